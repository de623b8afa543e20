"""Intervals of the ratios the project reports.

Every ratio of two latencies (attention over an SSM, an eager step over its graph replay,
the naive loop over the vectorized form) is a ratio of medians, ``median(a) / median(b)``,
over the kept samples of each side.  Its 95% interval is a bootstrap (Efron & Tibshirani,
*An Introduction to the Bootstrap*, 1993, ch. 13): resample each side's samples with
replacement, recompute the ratio, take the 2.5th and 97.5th percentiles of the resampled
ratios (the percentile method of ``scipy.stats.bootstrap``; BCa's jackknife is degenerate
for medians of few distinct values).

- **paired**: the two sides were timed in the same rounds of one process (a paired cell,
  ``ssmbench.paired``); sample i of one side and sample i of the other saw the same
  moment of the machine, so rounds are resampled as pairs and a drift common to both
  sides cancels out of the interval.
- **unpaired**: the two sides are separate cells, measured minutes apart in separate
  processes; each side is resampled on its own.  The interval then holds each cell's
  noise, not the drift of the machine between the two cells, which a rerun shows.

Fixed seed: the same samples give the same interval.  Imports numpy and scipy, never torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

CONFIDENCE = 0.95
N_RESAMPLES = 2000
SEED = 0
METHODS = ("paired", "unpaired")


def ratio_of_medians(a, b, axis: int = -1):
    """``median(a) / median(b)`` along ``axis`` (vectorized, as scipy's bootstrap calls it)."""
    return np.median(a, axis=axis) / np.median(b, axis=axis)


def ratio_interval(
    a: Sequence[float],
    b: Sequence[float],
    paired: bool,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> tuple[float, float, float]:
    """(ratio, lo, hi): ``median(a) / median(b)`` and its ``confidence`` bootstrap
    interval (module docstring).  ``paired`` resamples the rounds ``(a[i], b[i])``
    together, so ``a`` and ``b`` must have the same length.  With fewer than two samples
    on a side, or a zero median, lo and hi are NaN; when every resample gives the same
    ratio, the interval is that point."""
    from scipy import stats

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if paired and a.shape != b.shape:
        raise ValueError(
            f"a paired interval needs as many samples on each side, got {a.size} and {b.size}"
        )
    if a.size == 0 or b.size == 0 or np.median(b) == 0:
        return float("nan"), float("nan"), float("nan")
    ratio = float(ratio_of_medians(a, b))
    if a.size < 2 or b.size < 2:
        return ratio, float("nan"), float("nan")
    if np.ptp(a) == 0 and np.ptp(b) == 0:  # nothing to resample
        return ratio, ratio, ratio
    result = stats.bootstrap(
        (a, b),
        ratio_of_medians,
        n_resamples=n_resamples,
        vectorized=True,
        paired=paired,
        confidence_level=confidence,
        method="percentile",
        **_seed(seed),
    )
    low, high = result.confidence_interval
    return ratio, float(low), float(high)


def _seed(seed: int) -> dict:
    """scipy's seed keyword: ``rng`` from scipy 1.15 on, ``random_state`` before it."""
    import inspect

    from scipy import stats

    name = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"
    return {name: np.random.default_rng(seed)}


def decide(low: float, high: float, line: float = 1.0) -> str:
    """Which side of ``line`` an interval lies on: ``"above"``, ``"below"``,
    ``"inconclusive"`` (it holds the line) or ``""`` (no interval)."""
    if np.isnan(low) or np.isnan(high):
        return ""
    if low > line:
        return "above"
    if high < line:
        return "below"
    return "inconclusive"


def inside(value: float, low: float, high: float) -> bool:
    """Whether ``value`` lies in ``[low, high]`` (False without an interval)."""
    return bool(low <= value <= high) if not (np.isnan(low) or np.isnan(high)) else False
