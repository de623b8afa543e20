"""Do the verdict's ratios survive a rerun?  Whole replicated measurements of the headline
pairs, repeated; prints how often each run's estimate falls inside another run's 95%
interval, with one process per run (the interval a single process gives) and with the
run's k processes together (the hierarchical interval the workflow reports).

    python scripts/bench_paired_rerun.py [--runs 4] [--replicates 5] [--preset cpu]
        [--models mamba2 deltanet hybrid] [--points decode:4096 decode:1024 ...]
        [--spread-s 0] [--threads 2] [--seed 0] [--out rerun.json]

A run is ``--replicates`` fresh processes (``--worker``), one after another; each measures
every (SSM, phase, T) pair of the list once, in an order shuffled with the seed, as a
paired cell of the preset (``ssmbench.paired.run_paired``: attention and the SSM in
alternating rounds under the preset's ``paired`` timing) and prints one JSON line per
pair with its rounds.  Runs follow each other, as a rerun follows a run.

By default a run's processes follow each other too, so a run samples about a minute of the
machine; in the workflow a pair's replicates are interleaved with the other jobs of a
15-minute run.  ``--spread-s S`` spreads each run's processes over S seconds as the
workflow does: process p starts no earlier than p * S / replicates seconds after its run's
first, the machine left idle in between (the runs still follow each other, so two runs
never share a stretch of time).  Each row keeps its process's start, in seconds from its
run's.

Coverage, for each pair, over the ordered couples of runs (i, j), i != j:
- **one process** (before replicates): every process q of run j against every process p
  of run i: q's ratio inside p's paired interval over its own rounds;
- **replicated** (the workflow's estimate): run j's median over its processes inside run
  i's hierarchical interval (``ssmbench.stats.replicated_ratio``).
Two estimates with equally noisy, honest intervals cover each other about 83% of the time;
much less means the interval misses a source of variance that changes between processes.
Also prints the between-process spread of each pair (max/min and CV of its processes'
ratios, pooled over runs) beside both intervals' mean widths, and each side's time per run
(a step of one side between runs, the rest of the run alike, is the machine changing
between runs: no interval from one run's processes can hold it).  ``--out`` keeps every
process's rounds as JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ssmbench.scripting import non_negative_float, positive_int  # noqa: E402

HEADLINE = ("mamba2", "deltanet", "hybrid")
POINTS = ("decode:4096", "decode:1024", "prefill:4096", "train:1024")


def _point(text: str) -> tuple[str, int]:
    phase, _, seq_len = text.partition(":")
    if phase not in ("prefill", "decode", "train") or not seq_len.isdigit():
        raise argparse.ArgumentTypeError(f"expected PHASE:T such as decode:4096, got {text!r}")
    return phase, int(seq_len)


def worker(args) -> None:
    """Measure every pair once in this process, in a seeded order; one JSON line each."""
    from ssmbench.cell import CellSpec
    from ssmbench.config import load, plan
    from ssmbench.matrix import Cell
    from ssmbench.paired import run_paired
    from ssmbench.registry import NO_STATE

    p = plan(load(overrides={"preset": args.preset}))
    timing = p.paired_timing or p.timing
    if args.warmup_s is not None:
        from dataclasses import replace

        timing = replace(timing, warmup_s=args.warmup_s)
    pairs = list(itertools.product(args.models, args.points))
    random.Random(args.seed).shuffle(pairs)
    for model, (phase, seq_len) in pairs:
        d_state = 0 if model in NO_STATE else 16
        cell = Cell(model, "torch", phase, 1, seq_len, d_state, "fp32")
        cache = "random" if phase == "decode" and seq_len > 4096 else "prefill"
        spec = CellSpec("rerun", cell, p.device, p.size, timing, p.seed, cache_source=cache)
        r = run_paired(spec, threads=args.threads)
        line = dict(model=model, phase=phase, seq_len=seq_len, status=r.status)
        line.update(attention=r.attention_samples_ms, ssm=r.ssm_samples_ms, loaded=r.loaded)
        print(json.dumps(line), flush=True)


def measure(args) -> list[dict]:
    """Every run's processes, one after another: a list of rows (run, process, pair,
    rounds)."""
    rows = []
    base = [sys.executable, __file__, "--worker", "--preset", args.preset]
    base += ["--threads", str(args.threads), "--models", *args.models]
    base += ["--points", *(f"{ph}:{t}" for ph, t in args.points)]
    started = time.monotonic()
    slot_s = args.spread_s / args.replicates
    for run in range(args.runs):
        run_start = time.monotonic()
        for process in range(args.replicates):
            time.sleep(max(0.0, run_start + process * slot_s - time.monotonic()))
            offset_s = round(time.monotonic() - run_start, 2)
            seed = args.seed * 1_000_003 + run * 1000 + process
            out = subprocess.run(
                [*base, "--seed", str(seed)], capture_output=True, text=True, check=True
            ).stdout
            for line in out.splitlines():
                row = {"run": run, "process": process, "started_s": offset_s}
                rows.append({**row, **json.loads(line)})
            print(
                f"run {run + 1}/{args.runs}, process {process + 1}/{args.replicates} done "
                f"({time.monotonic() - started:.0f} s)",
                flush=True,
            )
    return rows


def coverage(rows: list[dict]) -> tuple[list[dict], dict]:
    """Per pair and overall: coverage with one process and replicated, mean widths and
    the between-process spread (module docstring)."""
    from ssmbench.stats import between_spread, ratio_interval, replicated_ratio

    by_pair: dict[tuple, dict[int, list[dict]]] = {}
    for r in rows:
        if r["status"] == "ok":
            key = (r["model"], r["phase"], r["seq_len"])
            by_pair.setdefault(key, {}).setdefault(r["run"], []).append(r)
    table, totals = [], {"one": [0, 0], "replicated": [0, 0]}
    for key, runs in sorted(by_pair.items()):
        single = {  # run -> [(ratio, lo, hi)] per process
            run: [ratio_interval(p["attention"], p["ssm"], paired=True) for p in procs]
            for run, procs in runs.items()
        }
        whole = {
            run: replicated_ratio([(p["attention"], p["ssm"]) for p in procs])
            for run, procs in runs.items()
        }
        one = [
            lo <= q[0] <= hi
            for i, j in itertools.permutations(runs, 2)
            for (_, lo, hi) in single[i]
            for q in single[j]
        ]
        rep = [
            whole[i][1] <= whole[j][0] <= whole[i][2] for i, j in itertools.permutations(runs, 2)
        ]
        ratios = [s[0] for procs in single.values() for s in procs]
        within_run = [between_spread([s[0] for s in procs]) for procs in single.values()]
        for name, hits in (("one", one), ("replicated", rep)):
            totals[name][0] += sum(hits)
            totals[name][1] += len(hits)
        table.append(
            dict(
                model=key[0],
                phase=key[1],
                seq_len=key[2],
                runs=len(runs),
                processes=sum(len(p) for p in runs.values()),
                ratio_min=min(ratios),
                ratio_max=max(ratios),
                maxmin_in_run=statistics.median(m for m, _ in within_run),
                cv_in_run=statistics.median(c for _, c in within_run),
                width_one=statistics.mean(
                    hi - lo for procs in single.values() for _, lo, hi in procs
                ),
                width_replicated=statistics.mean(w[2] - w[1] for w in whole.values()),
                coverage_one=sum(one) / len(one) if one else float("nan"),
                coverage_replicated=sum(rep) / len(rep) if rep else float("nan"),
                couples=len(rep),
                run_estimates=[round(w[0], 4) for w in whole.values()],
                run_sides=[_sides_ms(runs[run]) for run in sorted(runs)],
            )
        )
    return table, totals


def _sides_ms(procs: list[dict]) -> tuple[float, float]:
    """(attention, ssm): each side's median over one run's processes of its median ms."""
    return tuple(
        round(statistics.median(statistics.median(p[side]) for p in procs), 4)
        for side in ("attention", "ssm")
    )


def report(table: list[dict], totals: dict, args) -> None:
    spread = f", each run's processes spread over {args.spread_s:g} s" if args.spread_s else ""
    print(
        f"\n{args.runs} runs x {args.replicates} processes{spread}, preset {args.preset}; "
        "coverage over "
        "ordered couples of runs (one process: every process of one run against every "
        "process of another)"
    )
    print(
        "pair                      ratios (min-max)  max/min  CV in run  width 1-proc  "
        "width k-proc  cover 1-proc  cover k-proc"
    )
    for r in table:
        print(
            f"{r['model']:9s} {r['phase']:7s} T={r['seq_len']:<6d} "
            f"{r['ratio_min']:7.3f}-{r['ratio_max']:<7.3f} {r['maxmin_in_run']:7.3f} "
            f"{r['cv_in_run']:9.3f} {r['width_one']:13.3f} {r['width_replicated']:13.3f} "
            f"{r['coverage_one']:12.0%} {r['coverage_replicated']:12.0%}"
        )
    print(
        "\neach side per run, in run order (the median of its processes' medians, ms): a "
        "step between runs on one side is the machine, not the interval"
    )
    for r in table:
        attention, ssm = zip(*r["run_sides"], strict=True)
        print(
            f"{r['model']:9s} {r['phase']:7s} T={r['seq_len']:<6d} attention "
            + " ".join(f"{x:.3g}" for x in attention)
            + "   ssm "
            + " ".join(f"{x:.3g}" for x in ssm)
        )
    for name, label in (("one", "one process"), ("replicated", f"{args.replicates} processes")):
        hit, n = totals[name]
        if n:
            print(f"coverage, {label}: {hit / n:.0%} ({hit} of {n})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=positive_int, default=4)
    parser.add_argument("--replicates", type=positive_int, default=5)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--models", nargs="+", default=list(HEADLINE))
    parser.add_argument("--points", nargs="+", type=_point, default=[_point(p) for p in POINTS])
    parser.add_argument(
        "--spread-s",
        type=non_negative_float,
        default=0.0,
        help="spread each run's processes over this many seconds",
    )
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write every process's rounds here (JSON)")
    parser.add_argument("--from", dest="source", type=Path, help="report on a saved --out")
    parser.add_argument("--warmup-s", type=float, help="override the pair's warm-up seconds")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.source:
        saved = json.loads(args.source.read_text())
        rows = saved["rows"]
        args.runs, args.replicates = saved["runs"], saved["replicates"]
        args.spread_s = saved.get("spread_s", 0.0)
    else:
        rows = measure(args)
    if args.out:
        args.out.write_text(
            json.dumps(
                dict(runs=args.runs, replicates=args.replicates, spread_s=args.spread_s, rows=rows)
            )
        )
    report(*coverage(rows), args)


if __name__ == "__main__":
    main()
