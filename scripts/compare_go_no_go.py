"""Do two runs give the same answers?  Compares two go/no-go tables point by point.

    python scripts/compare_go_no_go.py A/tables/go_no_go.csv B/tables/go_no_go.csv

For every point both tables hold (phase, batch, dtype, T, SSM): whether the answers flip
(one says "ssm faster", the other "attention faster"; an "inconclusive" on either side is
not a flip), and whether each run's ratio lies inside the other run's 95% interval.
Prints the counts overall and per interval kind, then every flip and every point where
neither ratio lies in the other's interval.

Where a run's ``cells.csv`` lies beside its go/no-go table, it first prints what each run
ran on: the commit, and the host's speed while it ran, as the load probe every cell times
before it is measured (a fixed small matmul, ``ssmbench.measure.load``): the median over
the run's cells and its interquartile range.  Two runs on one host a few hours apart have
read medians 27% apart; a cell bound by dispatch slows more than one bound by memory
bandwidth then, so a ratio of two separately measured cells moves with the host.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

POINT = ["phase", "batch", "dtype", "seq_len", "ssm"]
DECIDED = ("ssm faster", "attention faster")


def compare(a, b):
    """The points of both tables side by side, with ``flip``, ``a_in_b`` and ``b_in_a``."""
    both = a.merge(b, on=POINT, suffixes=("_a", "_b"))
    both["flip"] = (
        both.answer_a.isin(DECIDED) & both.answer_b.isin(DECIDED) & (both.answer_a != both.answer_b)
    )
    both["a_in_b"] = (both.latency_lo_b <= both.latency_ratio_a) & (
        both.latency_ratio_a <= both.latency_hi_b
    )
    both["b_in_a"] = (both.latency_lo_a <= both.latency_ratio_b) & (
        both.latency_ratio_b <= both.latency_hi_a
    )
    return both


def host(cells_csv: Path) -> dict | None:
    """What a run ran on, from its cells table: ``commit`` and the probe's ``median``,
    ``q25``, ``q75`` (ms) over its cells; None without the table or a probe."""
    import pandas as pd

    if not cells_csv.is_file():
        return None
    cells = pd.read_csv(cells_csv, dtype={"git_commit": str})
    probe = cells.get("probe_before_ms", pd.Series(dtype=float)).dropna()
    if probe.empty:
        return None
    commits = cells.get("git_commit", pd.Series(dtype=str)).dropna().unique()
    q25, median, q75 = probe.quantile([0.25, 0.5, 0.75])
    return dict(commit=",".join(c[:7] for c in commits), median=median, q25=q25, q75=q75)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    args = parser.parse_args()
    from ssmbench.analysis import read_table

    columns = [*POINT, "latency_ratio", "latency_lo", "latency_hi", "interval", "answer"]
    both = compare(read_table(args.a, columns), read_table(args.b, columns))
    hosts = {name: host(path.parent / "cells.csv") for name, path in (("A", args.a), ("B", args.b))}
    for name, h in hosts.items():
        if h is not None:
            print(
                f"{name}: commit {h['commit']}, load probe {h['median']:.3g} ms "
                f"[{h['q25']:.3g}, {h['q75']:.3g}] (median [quartiles] over its cells)"
            )
    if all(hosts.values()):
        a, b = hosts["A"], hosts["B"]
        print(f"host speed, B against A: the probe took {b['median'] / a['median']:.2f}x as long")
        if a["commit"] != b["commit"]:
            print("the runs' code differs: a difference may be the code's, not the host's")
    n = len(both)
    inside = int(both.a_in_b.sum() + both.b_in_a.sum())
    print(f"{n} points in both tables; {int(both.flip.sum())} answers flip")
    share = inside / (2 * n) if n else float("nan")
    print(f"each run's ratio inside the other's interval: {inside} of {2 * n} ({share:.0%})")
    for kind, rows in both.groupby("interval_a"):
        hits = int(rows.a_in_b.sum() + rows.b_in_a.sum())
        print(
            f"  {kind or '(no interval)'}: {len(rows)} points, {int(rows.flip.sum())} flips, "
            f"inside {hits} of {2 * len(rows)} ({hits / (2 * len(rows)):.0%})"
        )
    shown = both[both.flip | ~(both.a_in_b | both.b_in_a)]
    if not shown.empty:
        print("\nflips, and points where neither ratio lies in the other's interval:")
    for r in shown.itertuples():
        print(
            f"  {r.phase} T={r.seq_len} b{r.batch} {r.ssm}: {r.latency_ratio_a:.3g} "
            f"[{r.latency_lo_a:.3g}, {r.latency_hi_a:.3g}] {r.answer_a} | {r.latency_ratio_b:.3g} "
            f"[{r.latency_lo_b:.3g}, {r.latency_hi_b:.3g}] {r.answer_b}"
            + ("  FLIP" if r.flip else "")
        )


if __name__ == "__main__":
    main()
