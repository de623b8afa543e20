"""The workflow's fixed cost per cell, against the time spent measuring and a bare
``python -c "import torch"``, all measured in one run on this machine.

    python scripts/bench_overhead.py [--preset ci] [--repeats 5]

In a temporary copy of the workflow it records the verify results first (untimed), then
times (a) ``snakemake -n`` for the preset's cell records (Snakefile parse and DAG: paid once
per invocation, not per cell) and (b) the real run of those N cells.  The fixed cost per
cell is ``(b - a - sum(measure_s)) / N``, where ``measure_s`` is the warm-up and sampling
time each record reports; it covers job start, the script's imports (torch among them),
the verify lookup, building the model and inputs, writing the record and its provenance.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ssmbench import config as sbconfig
from ssmbench import paths
from ssmbench.scripting import copy_workflow

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


def wall_s(cmd: list[str], cwd: Path | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="ci")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    plan = sbconfig.plan(sbconfig.load(overrides={"preset": args.preset}))
    import_s = [wall_s([sys.executable, "-c", "import torch"]) for _ in range(args.repeats)]
    import_torch_s = statistics.median(import_s)

    with tempfile.TemporaryDirectory() as tmp:
        wf = copy_workflow(Path(tmp) / "wf", precollected=False)
        smk = [SNAKEMAKE, "--cores", "all"]
        config = ["--config", f"preset={args.preset}"]  # last: --config takes what follows
        verify = [paths.verify_record(plan.run, m, b) for m, b in plan.pairs]
        cells = [paths.cell_record(plan.run, c) for c in plan.cells]
        subprocess.run(smk + verify + config, cwd=wf, check=True, capture_output=True)
        dag_s = statistics.median(wall_s(smk + ["-n"] + cells + config, cwd=wf) for _ in range(3))
        run_s = wall_s(smk + cells + config, cwd=wf)
        records = [json.loads((wf / c).read_text()) for c in cells]

    n = len(records)
    measure_s = sum(r["measure_s"] or 0.0 for r in records)
    fixed_s = (run_s - dag_s - measure_s) / n
    print(f"preset={args.preset} cells={n} statuses={sorted({r['status'] for r in records})}")
    print(
        f"import_torch_s={import_torch_s:.3f} (median of {args.repeats}: "
        + ", ".join(f"{s:.2f}" for s in import_s)
        + ")"
    )
    print(f"snakemake_dag_s={dag_s:.3f} (once per invocation)")
    print(
        f"run_s={run_s:.3f} measure_s_total={measure_s:.3f} measure_s_per_cell={measure_s / n:.3f}"
    )
    print(f"fixed_s_per_cell={fixed_s:.3f}")
    print(f"fixed_over_import_torch={fixed_s / import_torch_s:.2f} (target <= 1.25)")


if __name__ == "__main__":
    main()
