"""Scheduling overhead: jobs per minute through SLURM (profiles/slurm's executor) against
Snakemake's local executor, measured in one run on this machine, and what that means for
a matrix of 1,000 cells.

    sudo scripts/slurm_local.sh up          # or a real cluster: set SSMBENCH_SLURM_PARTITION
    python scripts/bench_scheduling.py [--jobs 40] [--rounds 3]

Each round runs a trivial workflow of N jobs (each writes one small file: the job does no
work, so its wall time is what running *a* job costs) once locally (`--cores all`) and
once through SLURM, alternating, so both see the machine's same moments.  What a SLURM job
costs beyond a local one: sbatch, the scheduler's cycle, the job step (srun re-invoking
Snakemake inside the allocation, which parses the Snakefile again) and the status polls.
A real cell adds its own work (for the ci preset about 5 s of imports and setup,
scripts/bench_overhead.py) on either executor.

Prints per round and the median with the range over rounds: wall seconds, jobs per
minute, the SLURM / local ratio, and the hours of pure scheduling a 1,000-cell matrix
spends at that rate.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
PLUGINS = Path(sys.executable).parent.parent / "slurm-plugins"  # `make slurm`

SNAKEFILE = textwrap.dedent(
    """
    N = int(config["n_jobs"])

    rule all:
        input:
            expand("out/{i}.txt", i=range(N)),

    rule job:
        output:
            "out/{i}.txt",
        resources:
            mem_mb=100,
            runtime=5,
        shell:
            "echo {wildcards.i} > {output}"
    """
)


def run_once(workdir: Path, n: int, slurm: bool, partition: str) -> float:
    """Wall seconds of one run of the N-job workflow in a fresh folder."""
    (workdir / "out").mkdir(parents=True, exist_ok=True)
    for f in (workdir / "out").iterdir():
        f.unlink()
    cmd = [SNAKEMAKE, "--snakefile", str(workdir / "Snakefile")]
    env = dict(os.environ)
    if slurm:
        cmd += [
            "--executor",
            "slurm",
            "--jobs",
            str(n),
            "--default-resources",
            f"slurm_partition={partition}",
            # no slurmdbd here (scripts/slurm_local.sh): states from squeue, polled soon
            "--slurm-status-command",
            "squeue",
            "--slurm-init-seconds-before-status-checks",
            "2",
        ]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS), env.get("PYTHONPATH")]))
    else:
        cmd += ["--cores", "all"]
    cmd += ["--config", f"n_jobs={n}"]  # last: --config takes every word after it
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        which = "SLURM" if slurm else "local"
        sys.exit(f"bench_scheduling: the {which} run failed:\n{done.stderr[-3000:]}")
    made = len(list((workdir / "out").iterdir()))
    if made != n:
        sys.exit(f"bench_scheduling: {made} of {n} outputs written")
    return wall


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):8.2f}  [{min(values):.2f}, {max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=40, help="jobs per run (default 40)")
    parser.add_argument("--rounds", type=int, default=3, help="local + SLURM pairs (default 3)")
    parser.add_argument(
        "--partition", default=os.environ.get("SSMBENCH_SLURM_PARTITION") or "ssmbench"
    )
    args = parser.parse_args()
    if subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
        sys.exit(
            "bench_scheduling: no SLURM cluster answers sinfo (sudo scripts/slurm_local.sh up)"
        )

    local, slurm = [], []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "Snakefile").write_text(SNAKEFILE)
        for r in range(args.rounds):
            local.append(run_once(workdir, args.jobs, False, args.partition))
            slurm.append(run_once(workdir, args.jobs, True, args.partition))
            print(
                f"round {r + 1}: local {local[-1]:.2f} s, SLURM {slurm[-1]:.2f} s "
                f"({args.jobs} jobs each)",
                flush=True,
            )

    per_min = {
        name: [60 * args.jobs / w for w in walls]
        for name, walls in (("local", local), ("slurm", slurm))
    }
    ratios = [s / lo for s, lo in zip(slurm, local, strict=True)]
    print(f"\n{'':24}median   [min, max] over {args.rounds} rounds")
    print(f"{'local wall (s)':24}{spread(local)}")
    print(f"{'SLURM wall (s)':24}{spread(slurm)}")
    print(f"{'local jobs/min':24}{spread(per_min['local'])}")
    print(f"{'SLURM jobs/min':24}{spread(per_min['slurm'])}")
    print(f"{'SLURM / local wall':24}{spread(ratios)}")
    for name in ("local", "slurm"):
        hours = [1000 / rate / 60 for rate in per_min[name]]
        print(f"{'1,000 jobs, ' + name + ' (h)':24}{spread(hours)}   scheduling alone")


if __name__ == "__main__":
    main()
