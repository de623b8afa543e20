"""Scheduling overhead: jobs per minute through SLURM with short jobs grouped (profiles/slurm's
`group-components`) and one job per allocation, against Snakemake's local executor, measured
in one run on this machine, and what each rate means for a matrix of 1,000 cells.

    sudo scripts/slurm_local.sh up          # or a real cluster: set SSMBENCH_SLURM_PARTITION
    python scripts/bench_scheduling.py [--jobs 60] [--group-size 30] [--rounds 3]

(``--jobs 240 --group-size 20``, the profile's group size, takes about 10 minutes a round
on a 2-core node; a small run's grouped wall is mostly the executor's status polls, so the
grouped / ungrouped ratio grows with the number of jobs: docs/clusters.md.)

Each round runs a trivial workflow of N jobs (each writes one small file: the job does no
work, so its wall time is what running *a* job costs) three ways, in an order that turns
from round to round so no way always runs first: locally (`--cores all`), through SLURM one
job per allocation, and through SLURM in groups of `--group-size` jobs (`--group-components
cells=<size>`, with the block cells' `group:`, ssmbench.scripting.group_of).  What an
allocation costs beyond a local job: sbatch, the scheduler's cycle, the job step
(srun re-invoking Snakemake inside the allocation, which parses the Snakefile again) and
the status polls; a group pays them once for its jobs, which then run one after another
in the allocation.  A real cell adds its own work (for the ci preset about 5 s of imports
and setup, scripts/bench_overhead.py) on every executor.

Prints per round and the median with the range over rounds: wall seconds and jobs per
minute of each way, the SLURM allocations each way asked for (counted from the executor's
"submitted with SLURM jobid" lines) beside the count grouping should give, the grouped /
ungrouped and SLURM / local rate ratios (median of the per-round ratios with their range,
and a bootstrap interval of the ratio of median rates over the rounds), and the hours of
pure scheduling a 1,000-cell matrix spends at each rate.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import _src  # noqa: F401  (this checkout's src/ first on the path)

from ssmbench.scripting import positive_int
from ssmbench.stats import ratio_interval

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
PLUGINS = Path(sys.executable).parent.parent / "slurm-plugins"  # `make slurm`
WAYS = ("local", "slurm", "grouped")
# the group profiles/slurm puts the block cells in (workflow/rules/common.smk, CELL_GROUP)
GROUP = "cells"

# The jobs are grouped as the block cells are: ssmbench.scripting.group_of, the same
# `group:` as workflow/rules/common.smk's
SNAKEFILE = textwrap.dedent(
    """
    from ssmbench.scripting import group_of

    N = int(config["n_jobs"])

    rule all:
        input:
            expand("out/{i}.txt", i=range(N)),

    rule job:
        output:
            "out/{i}.txt",
        group:
            lambda wildcards: group_of(workflow, "cells")
        resources:
            mem_mb=100,
            runtime=1,
        shell:
            "echo {wildcards.i} > {output}"
    """
)


@dataclass(frozen=True)
class Setup:
    """One measurement's settings: jobs per run, jobs per allocation when grouped, the
    SLURM partition."""

    jobs: int
    group_size: int
    partition: str

    def command(self, way: str) -> tuple[list[str], dict[str, str]]:
        """The Snakemake command line and environment of one run done ``way``."""
        cmd = [SNAKEMAKE, "--snakefile", "Snakefile"]
        env = dict(os.environ)
        if way == "local":
            cmd += ["--cores", "all"]
        else:
            cmd += [
                "--executor",
                "slurm",
                "--jobs",
                str(self.jobs),
                "--default-resources",
                f"slurm_partition={self.partition}",
                # no slurmdbd here (scripts/slurm_local.sh): states from squeue, polled soon
                "--slurm-status-command",
                "squeue",
                "--slurm-init-seconds-before-status-checks",
                "2",
            ]
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS), env.get("PYTHONPATH")]))
        if way == "grouped":
            cmd += ["--group-components", f"{GROUP}={self.group_size}"]
            # one core per group, so its jobs run one after another in it, as the block
            # cells do (each takes the node's cores); a cluster run counts cores per group
            cmd += ["--cores", "1"]
        cmd += ["--config", f"n_jobs={self.jobs}"]  # last: --config takes every word after it
        return cmd, env


# what the SLURM executor logs for each allocation it asks for
SUBMITTED = re.compile(r"submitted with SLURM jobid (\d+)")


@dataclass(frozen=True)
class Run:
    """One run of the N-job workflow: its wall seconds and the SLURM allocations it asked
    for (0 locally)."""

    wall_s: float
    allocations: int


def expected_allocations(setup: Setup, way: str) -> int:
    """The allocations a run done ``way`` should ask for: none locally, one per job
    ungrouped, one per ``group_size`` jobs grouped."""
    return {"local": 0, "slurm": setup.jobs, "grouped": math.ceil(setup.jobs / setup.group_size)}[
        way
    ]


def run_once(workdir: Path, setup: Setup, way: str) -> Run:
    """One run of the N-job workflow done ``way``, from no outputs."""
    out = workdir / "out"
    out.mkdir(parents=True, exist_ok=True)
    for f in out.iterdir():
        f.unlink()
    cmd, env = setup.command(way)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    wall_s = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"the {way} run failed:\n{done.stderr[-3000:]}")
    made = len(list(out.iterdir()))
    if made != setup.jobs:
        raise RuntimeError(f"the {way} run wrote {made} of {setup.jobs} outputs")
    return Run(wall_s, len(set(SUBMITTED.findall(done.stdout + done.stderr))))


def measure(setup: Setup, rounds: int, ways=WAYS, report=print) -> dict[str, list[Run]]:
    """Each way's run in each round (``report`` gets a line per round); the ways' order
    turns by one each round."""
    runs: dict[str, list[Run]] = {way: [] for way in ways}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "Snakefile").write_text(SNAKEFILE)
        for r in range(rounds):
            order = ways[r % len(ways) :] + ways[: r % len(ways)]
            for way in order:
                runs[way].append(run_once(workdir, setup, way))
            shown = ", ".join(
                f"{way} {runs[way][-1].wall_s:.2f} s in {runs[way][-1].allocations} allocations"
                for way in ways
            )
            report(f"round {r + 1}: {shown} ({setup.jobs} jobs each)")
    return runs


def per_minute(setup: Setup, runs: list[Run]) -> list[float]:
    """Jobs per minute of each run."""
    return [60 * setup.jobs / run.wall_s for run in runs]


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):8.2f}  [{min(values):.2f}, {max(values):.2f}]"


def rate_ratio(a: list[float], b: list[float]) -> tuple[float, float, float, float, float]:
    """(median, min, max) of the per-round ratios a/b, and the ratio of the median rates
    with its bootstrap interval over the rounds (paired: a round's runs share its moment
    of the machine): ``(median, min, max, lo, hi)``."""
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    _, lo, hi = ratio_interval(a, b, paired=True)
    return statistics.median(ratios), min(ratios), max(ratios), lo, hi


def summary(setup: Setup, runs: dict[str, list[Run]]) -> list[str]:
    """The table main prints."""
    rates = {way: per_minute(setup, r) for way, r in runs.items()}
    rounds = len(next(iter(runs.values())))
    lines = [f"{'':28}median   [min, max] over {rounds} rounds"]
    for way, r in runs.items():
        lines.append(f"{way + ' wall (s)':28}{spread([run.wall_s for run in r])}")
    for way, r in runs.items():
        asked = sorted({run.allocations for run in r})
        lines.append(
            f"{way + ' allocations':28}{', '.join(map(str, asked)):>8}"
            f"  (expected {expected_allocations(setup, way)})"
        )
    for way, r in rates.items():
        lines.append(f"{way + ' jobs/min':28}{spread(r)}")
    for a, b in (("grouped", "slurm"), ("slurm", "local")):
        if a in rates and b in rates:
            med, low, high, lo, hi = rate_ratio(rates[a], rates[b])
            lines.append(
                f"{a + ' / ' + b + ' jobs/min':28}{med:8.2f}  [{low:.2f}, {high:.2f}]"
                f"   ratio of medians, 95% bootstrap: [{lo:.2f}, {hi:.2f}]"
            )
    for way, r in rates.items():
        hours = [1000 / rate / 60 for rate in r]
        lines.append(f"{'1,000 jobs, ' + way + ' (h)':28}{spread(hours)}   scheduling alone")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=positive_int, default=60, help="jobs per run (default 60)")
    parser.add_argument(
        "--group-size",
        type=positive_int,
        default=30,
        help="jobs per allocation when grouped (default 30)",
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=3, help="runs of each way (default 3)"
    )
    parser.add_argument(
        "--partition", default=os.environ.get("SSMBENCH_SLURM_PARTITION") or "ssmbench"
    )
    args = parser.parse_args(argv)
    if subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
        parser.exit(
            2, "bench_scheduling: no SLURM cluster answers sinfo (sudo scripts/slurm_local.sh up)\n"
        )
    setup = Setup(args.jobs, args.group_size, args.partition)
    try:
        runs = measure(setup, args.rounds, report=lambda line: print(line, flush=True))
    except RuntimeError as error:
        parser.exit(1, f"bench_scheduling: {error}\n")
    print()
    print("\n".join(summary(setup, runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
