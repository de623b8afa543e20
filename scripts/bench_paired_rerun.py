"""Do the verdict's ratios survive a rerun?  The paired measurement of the headline pairs,
repeated in several processes one after another; prints how often each run's estimate
falls inside the other runs' 95% intervals.

    python scripts/bench_paired_rerun.py [--runs 5] [--preset cpu] [--models mamba2 ...]
        [--points decode:4096 prefill:4096] [--threads 2]

Each run is a fresh process (``--worker``) that measures every (SSM, phase, T) pair of
the list as a paired cell of the preset (``ssmbench.paired.run_paired``: attention and
the SSM in alternating rounds, the preset's ``paired`` timing) and prints one JSON line
per pair: the ratio attention / SSM and its paired bootstrap interval (``ssmbench.stats``).
Runs follow each other, so each owns the machine as a workflow job does, and minutes
pass between them, as between a run and its rerun.

Coverage: for each pair, over all ordered couples of runs (i, j), i != j, the share in
which run j's ratio lies inside run i's interval.  A 95% interval that held the whole
uncertainty of a rerun would cover a rerun's estimate somewhat less than 95% of the time
(both estimates are noisy: about 83% for two equally noisy estimates of one value); much
less means that something which changes between processes (the drift of the machine,
what a process's memory and threads landed on) is not in the interval.  Also prints the
spread of the ratios across runs (max/min) beside the intervals' widths.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ssmbench.scripting import positive_int  # noqa: E402

HEADLINE = ("mamba2", "deltanet", "hybrid")
POINTS = ("decode:4096", "prefill:4096")


def _point(text: str) -> tuple[str, int]:
    phase, _, seq_len = text.partition(":")
    if phase not in ("prefill", "decode", "train") or not seq_len.isdigit():
        raise argparse.ArgumentTypeError(f"expected PHASE:T such as decode:4096, got {text!r}")
    return phase, int(seq_len)


def worker(args) -> None:
    """Measure every pair in this process; one JSON line each."""
    from ssmbench.cell import CellSpec
    from ssmbench.config import Cell, load, plan
    from ssmbench.paired import run_paired
    from ssmbench.registry import NO_STATE
    from ssmbench.stats import ratio_interval

    p = plan(load(overrides={"preset": args.preset}))
    timing = p.paired_timing or p.timing
    for model, (phase, seq_len) in itertools.product(args.models, args.points):
        d_state = 0 if model in NO_STATE else 16
        cell = Cell(model, "torch", phase, 1, seq_len, d_state, "fp32")
        cache = "random" if phase == "decode" and seq_len > 4096 else "prefill"
        spec = CellSpec("rerun", cell, p.device, p.size, timing, p.seed, cache_source=cache)
        r = run_paired(spec, threads=args.threads)
        ratio, lo, hi = (float("nan"),) * 3
        if r.status == "ok":
            ratio, lo, hi = ratio_interval(r.attention_samples_ms, r.ssm_samples_ms, paired=True)
        line = dict(model=model, phase=phase, seq_len=seq_len, status=r.status, ratio=ratio)
        print(json.dumps({**line, "lo": lo, "hi": hi, "rounds": r.n_rounds}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=positive_int, default=5)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--models", nargs="+", default=list(HEADLINE))
    parser.add_argument("--points", nargs="+", type=_point, default=[_point(p) for p in POINTS])
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    command = [sys.executable, __file__, "--worker", "--preset", args.preset]
    command += ["--threads", str(args.threads), "--models", *args.models]
    command += ["--points", *(f"{ph}:{t}" for ph, t in args.points)]
    results: dict[tuple, list[dict]] = {}
    for run in range(args.runs):
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            r = json.loads(line)
            results.setdefault((r["model"], r["phase"], r["seq_len"]), []).append(r)
            print(
                f"run {run}: {r['model']:9s} {r['phase']:7s} T={r['seq_len']:<6d} "
                f"ratio={r['ratio']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}] rounds={r['rounds']}",
                flush=True,
            )
    covered = total = 0
    print("\npair                       ratios (min-max)   spread  mean CI width  coverage")
    for (model, phase, seq_len), runs in results.items():
        ok = [r for r in runs if r["status"] == "ok"]
        hits = [a["lo"] <= b["ratio"] <= a["hi"] for a, b in itertools.permutations(ok, 2)]
        covered, total = covered + sum(hits), total + len(hits)
        ratios = [r["ratio"] for r in ok]
        width = statistics.mean(r["hi"] - r["lo"] for r in ok) if ok else float("nan")
        share = sum(hits) / len(hits) if hits else float("nan")
        print(
            f"{model:9s} {phase:7s} T={seq_len:<6d} {min(ratios):7.3f}-{max(ratios):<7.3f} "
            f"{max(ratios) / min(ratios):7.3f} {width:14.3f} {share:9.0%}"
        )
    print(f"\ncoverage={covered / total:.0%} ({covered} of {total} run pairs)" if total else "")


if __name__ == "__main__":
    main()
