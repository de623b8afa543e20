"""Print the CUDA-graph and noise targets from any run's tables, each as measured, next to
its target.

    python scripts/check_targets.py RUN [--results results]

1. CUDA-graph decode: eager step / graph replay per family at batch 1 (target >= 3x);
2. graph replay / the step's own kernel time, summed by the profiler in the same run
   (ops.csv of the eager decode cell; target <= 1.5x: what is left is the kernels);
3. noise: P95 / median of every ok cell with a median of at least 1 ms (target <= 1.05).
A run without graph cells or profiles (any CPU run) says so instead of a number.
"""

import argparse
from pathlib import Path

import _src  # noqa: F401  (puts ../src on sys.path)
import pandas as pd

from ssmbench.analysis import GRAPH_TARGET, graph_speedups
from ssmbench.tables import read_cells, read_ops

KERNEL_TARGET = 1.5
NOISE_TARGET = 1.05


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run")
    parser.add_argument("--results", default="results", help="folder of runs (or precollected)")
    args = parser.parse_args()
    tables = Path(args.results) / args.run / "tables"
    try:
        cells = read_cells(tables / "cells.csv")
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"no targets: {e}") from None
    ops = read_ops(tables / "ops.csv") if (tables / "ops.csv").is_file() else None

    speedups = graph_speedups(cells, batch=1)
    print(f"== {args.run}: decode eager / CUDA-graph replay, batch 1 (target >= {GRAPH_TARGET}x)")
    if speedups.empty:
        graph = cells[cells.backend.str.endswith("-graph")]
        why = graph.reason.iloc[0] if len(graph) else "no graph backend in this run"
        print(f"   none measured: {why}")
    else:
        worst = speedups.groupby(["model", "eager"]).speedup.min().reset_index()
        worst["meets"] = worst.speedup >= GRAPH_TARGET
        print(worst.to_string(index=False, float_format=lambda v: f"{v:.2f}"))

    print(f"== graph replay / the step's kernel time (target <= {KERNEL_TARGET}x)")
    if speedups.empty or ops is None or ops.empty:
        print("   needs graph cells and profiled eager decode cells in the same run")
    else:
        kernels = ops[ops.phase == "decode"].groupby(["model", "backend", "seq_len"]).time_ms.sum()
        rows = []
        for r in speedups.itertuples():
            kernel_ms = kernels.get((r.model, r.eager, r.seq_len))
            if kernel_ms:
                rows.append(
                    (r.model, r.graph, r.seq_len, r.graph_ms, kernel_ms, r.graph_ms / kernel_ms)
                )
        table = pd.DataFrame(
            rows, columns=["model", "graph", "T", "replay_ms", "kernels_ms", "ratio"]
        )
        print(
            table.to_string(index=False, float_format=lambda v: f"{v:.3f}")
            if rows
            else "   no pair"
        )

    print(f"== noise: P95 / median of ok cells with median >= 1 ms (target <= {NOISE_TARGET})")
    ok = cells[(cells.status == "ok") & (cells.time_ms_median >= 1.0)]
    if ok.empty:
        print("   no such cell")
    else:
        ratio = ok.time_ms_p95 / ok.time_ms_median
        print(f"   {int((ratio <= NOISE_TARGET).sum())} of {len(ok)} cells meet it; worst:")
        worst = ok.assign(p95_over_median=ratio).nlargest(5, "p95_over_median")
        columns = [
            "model",
            "backend",
            "phase",
            "batch",
            "seq_len",
            "time_ms_median",
            "p95_over_median",
        ]
        print(worst[columns].to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
