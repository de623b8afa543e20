"""Where does the process-to-process variance of a paired ratio come from, and can a
setting remove it?  Measures the same pairs in fresh processes under each variant, the
variants interleaved process by process, and prints the between-process spread of the
ratio and of each side's median per variant.

    python scripts/bench_noise.py [--processes 6] [--preset cpu]
        [--models mamba2] [--points decode:4096 decode:1024] [--variants ...]

Variants (each a fresh worker of scripts/bench_paired_rerun.py, one after another in the
order baseline, pinned, warm, one-thread, baseline, ...):
- ``baseline``: the preset's paired timing, every core;
- ``pinned``: OpenMP threads bound to cores (``OMP_PROC_BIND=close OMP_PLACES=cores``);
- ``warm``: a 1.5 s warm-up instead of the preset's;
- ``one-thread``: one intra-op thread (no thread pool to schedule).
A variant that removes a noise source shows a smaller spread than the baseline in the same
run; the medians show what it costs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ssmbench.scripting import positive_int  # noqa: E402

RERUN = Path(__file__).with_name("bench_paired_rerun.py")
VARIANTS = {
    "baseline": ({}, []),
    "pinned": ({"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}, []),
    "warm": ({}, ["--warmup-s", "1.5"]),
    "one-thread": ({}, ["--threads", "1"]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=positive_int, default=6)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--models", nargs="+", default=["mamba2"])
    parser.add_argument("--points", nargs="+", default=["decode:4096", "decode:1024"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args()

    import numpy as np

    from ssmbench.stats import between_spread, process_sd

    base = [sys.executable, str(RERUN), "--worker", "--preset", args.preset]
    base += ["--models", *args.models, "--points", *args.points]
    found: dict[tuple, list[tuple[float, float, float]]] = {}
    for i in range(args.processes):
        for name in args.variants:
            env, extra = VARIANTS[name]
            command = [
                *base,
                "--seed",
                str(i),
                *(["--threads", "2"] if "--threads" not in extra else []),
                *extra,
            ]
            out = subprocess.run(
                command, capture_output=True, text=True, check=True, env={**os.environ, **env}
            ).stdout
            for line in out.splitlines():
                r = json.loads(line)
                if r["status"] != "ok":
                    continue
                a, s = float(np.median(r["attention"])), float(np.median(r["ssm"]))
                key = (name, r["model"], r["phase"], r["seq_len"])
                found.setdefault(key, []).append((a / s, a, s))
        print(f"process {i + 1}/{args.processes} of every variant done", flush=True)
    print(
        "\nvariant     pair                     ratio median  max/min   CV     "
        "attention ms (sd log)  ssm ms (sd log)"
    )
    for (name, model, phase, seq_len), rows in sorted(found.items(), key=lambda kv: kv[0][1:]):
        ratios, att, ssm = zip(*rows, strict=True)
        maxmin, cv = between_spread(ratios)
        print(
            f"{name:11s} {model:8s} {phase:7s} T={seq_len:<6d} {statistics.median(ratios):9.3f} "
            f"{maxmin:9.3f} {cv:6.3f}   {statistics.median(att):8.3f} ({process_sd([att]):.3f})"
            f"       {statistics.median(ssm):8.3f} ({process_sd([ssm]):.3f})"
        )


if __name__ == "__main__":
    main()
