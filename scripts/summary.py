"""Print a run's cells as one compact table: per (model, backend, phase), how many cells
ran and the median latency at the longest sequence (batch 1), or why nothing ran.

    python scripts/summary.py RUN [PRESET]

With PRESET, also each rule's estimated seconds (ssmbench.budget) beside the seconds its
jobs took, from their provenance sidecars.
"""

import sys

import _src  # noqa: F401  (puts ../src on sys.path)
import pandas as pd

from ssmbench import paths
from ssmbench.tables import read_cells


def summary(cells: pd.DataFrame) -> str:
    rows = []
    for (model, backend, phase), group in cells.groupby(["model", "backend", "phase"]):
        ok = group[group.status == "ok"]
        line = {"model": model, "backend": backend, "phase": phase}
        line["ok"] = f"{len(ok)}/{len(group)}"
        if len(ok):
            last = ok.sort_values(["batch", "seq_len"]).groupby("batch").tail(1).iloc[0]
            line["T"] = int(last.seq_len)
            line["b"] = int(last.batch)
            line["median_ms"] = f"{last.time_ms_median:.3f}"
            line["p95/med"] = f"{last.time_ms_p95 / last.time_ms_median:.2f}"
            line["note"] = ""
        else:
            first = group.iloc[0]
            line.update(T="", b="", median_ms="", **{"p95/med": ""})
            line["note"] = f"{first.status}: {str(first.reason)[:60]}"
        rows.append(line)
    return pd.DataFrame(rows).to_string(index=False)


if __name__ == "__main__":
    run = sys.argv[1]
    path = paths.table(run, "cells.csv")
    try:
        cells = read_cells(path)
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"no summary: {e}")
    print(f"== {run}: {len(cells)} cells on {', '.join(sorted(set(cells.device_name) - {''}))}")
    print(cells.status.value_counts().to_string())
    print(summary(cells))
    if len(sys.argv) > 2:
        from ssmbench import budget, config

        plan = config.plan(config.load(overrides={"preset": sys.argv[2], "run": run}))
        print("== time per rule, estimated (ssmbench.budget) and measured in the jobs")
        print(budget.compare(plan))
