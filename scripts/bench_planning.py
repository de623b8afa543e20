"""How long Snakemake takes to plan a run, against the number of cells, in one run here.

    python scripts/bench_planning.py [--cells 1000 5000 10000] [--repeats 3] [--profile N]

For each size it writes a config overlay with one extra preset, ``scale``: the ``ci``
preset's size and timing, with one sweep of 20 cells per sequence length (five families x
``naive``, ``torch`` x prefill, decode) over as many lengths as the size needs, a few
profiled cells, ``ci``'s paired cells and a headline.  In a temporary copy of the
workflow it times ``snakemake -n --quiet --configfile <overlay>`` end to end (the
Snakefile's parse, the plan, the DAG of every bench, figure and table job), ``--repeats``
times, and prints the median with its range and the ratio to the smallest size: a
planning that is linear in the cells gives about 5x and 10x for 5,000 and 10,000 cells
against 1,000.  ``--profile N`` writes a cProfile of one planning of N cells to
``planning-N.prof`` (``python -m pstats``) instead.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _src  # noqa: F401  (puts ../src on sys.path)
import yaml

from ssmbench import config as sbconfig
from ssmbench.scripting import copy_workflow

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
# five families x two backends x two phases: the cells of one sequence length
MODELS = ["attention", "s4d", "mamba", "mamba2", "deltanet"]
BACKENDS = ["naive", "torch"]
PHASES = ["prefill", "decode"]
CELLS_PER_LENGTH = len(MODELS) * len(BACKENDS) * len(PHASES)


def scale_overlay(n_cells: int) -> dict:
    """A config overlay whose preset ``scale`` has exactly ``n_cells`` cells (a multiple of
    CELLS_PER_LENGTH)."""
    if n_cells % CELLS_PER_LENGTH:
        raise ValueError(f"--cells must be multiples of {CELLS_PER_LENGTH}, got {n_cells}")
    ci = sbconfig.load()["presets"]["ci"]
    lengths = [32 * (i + 1) for i in range(n_cells // CELLS_PER_LENGTH)]
    axes = {"batch": [1], "d_state": [4], "dtype": ["fp32"]}
    sweeps = [
        {"models": MODELS, "backends": BACKENDS, "phases": PHASES, "seq_len": lengths, **axes},
        # profiled cells: already in the sweep above, so the count stays n_cells
        {"models": ["mamba2"], "backends": ["torch"], "phases": ["prefill"],
         "seq_len": lengths[:2], "profile": True, **axes},
    ]  # fmt: skip
    preset = {key: ci[key] for key in ("device", "calibrate_quick", "size", "timing", "paired")}
    preset.update(
        description=f"bench_planning: {n_cells} cells",
        sweeps=sweeps,
        headline=[{"models": ["mamba2"], "phases": ["decode"], "seq_len": lengths[-1:]}],
    )
    overlay = {"preset": "scale", "presets": {"scale": preset}}
    merged = sbconfig.load()  # as Snakemake merges --configfile: the new preset beside the rest
    merged["presets"]["scale"] = preset
    merged["preset"] = "scale"
    planned = len(sbconfig.plan(merged).cells)
    assert planned == n_cells, f"the scale preset has {planned} cells, not {n_cells}"
    return overlay


def planning_s(wf: Path, overlay: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one ``snakemake -n`` of the overlay's run in
    ``wf``.  On a shared machine the CPU seconds are the steadier of the two."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [SNAKEMAKE, "--cores", "2", "-n", "--quiet", "--configfile", str(overlay)],
        cwd=wf,
        check=True,
        capture_output=True,
    )
    wall_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall_s, cpu_s


def _spread(values: list[float], base: list[tuple[float, float]], i: int) -> str:
    """``median (min-max) xRATIO``, the ratio against the median of the base size's."""
    median = statistics.median(values)
    ratio = median / statistics.median(sample[i] for sample in base)
    return f"{median:6.2f} ({min(values):.2f}-{max(values):.2f}) x{ratio:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", type=int, metavar="N", help="cProfile one planning of N")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        wf = copy_workflow(Path(tmp) / "wf", precollected=False)
        overlays = {}
        for n in [args.profile] if args.profile else args.cells:
            overlays[n] = Path(tmp) / f"scale-{n}.yaml"
            overlays[n].write_text(yaml.safe_dump(scale_overlay(n)))
        if args.profile:
            out = Path.cwd() / f"planning-{args.profile}.prof"
            cmd = [sys.executable, "-m", "cProfile", "-o", str(out), SNAKEMAKE]
            cmd += ["--cores", "2", "-n", "--quiet", "--configfile", str(overlays[args.profile])]
            subprocess.run(cmd, cwd=wf, check=True, capture_output=True)
            print(f"wrote {out}")
            return
        planning_s(wf, overlays[args.cells[0]])  # warm the disk cache and __pycache__
        runs = {n: [planning_s(wf, overlays[n]) for _ in range(args.repeats)] for n in overlays}

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"snakemake -n --quiet on {os.cpu_count()} cores (load average {load}), "
        f"median of {args.repeats} (range), seconds:"
    )
    for n, samples in runs.items():
        wall_s, cpu_s = ([sample[i] for sample in samples] for i in (0, 1))
        print(f"  {n:6d} cells  wall {_spread(wall_s, runs[args.cells[0]], 0)}"
              f"  cpu {_spread(cpu_s, runs[args.cells[0]], 1)}")  # fmt: skip
    base = args.cells[0]
    linear = ", ".join(f"x{n / base:g}" for n in args.cells[1:])
    print(f"  (x: against {base} cells; planning linear in the cells gives {linear}, less the")
    print("   fixed start-up: Snakemake's imports and the Snakefile's parse)")


if __name__ == "__main__":
    main()
