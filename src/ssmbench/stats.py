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

Replicates (:func:`replicated_ratio`): a paired cell measured in k separate processes
(``replicates: k``).  One process samples one landing of its memory and threads, which
moves a 1 ms step by up to 30%, so rounds inside it cannot hold what a rerun meets; k
processes can.  The estimate is the median over processes of each process's ratio of
medians; its interval is a two-stage (hierarchical) bootstrap (Davison & Hinkley,
*Bootstrap Methods and their Application*, 1997, section 3.8): resample the processes
with replacement, then the rounds of each drawn process as pairs (scipy's paired
percentile bootstrap, as above), and take the percentiles of the resampled medians.
With k = 1 it is the process's own paired interval, kind ``within-process``.

Few processes make a percentile interval too narrow: resampling k values underestimates
their spread by sqrt((k - 1) / k), and the normal's quantile stands where Student's t with
k - 1 degrees of freedom belongs.  So the process-level intervals are *expanded*
percentile intervals (Hesterberg, "What Teachers Should Know About the Bootstrap", The
American Statistician 69(4), 2015): the percentiles are taken at the tail
alpha' / 2 = Phi(-sqrt(k / (k - 1)) t_{k-1, 1 - alpha/2}) instead of alpha / 2
(:func:`expanded_tail`; 95% becomes 99.81% of the draws for k = 5, the draws' range for
k = 3), from :data:`N_DRAWS` two-stage draws so that such a tail still holds a few of
them.  ``scripts/bench_paired_rerun.py`` checks the result: how often a rerun's estimate
falls inside the interval.

A headline cell measured in k processes (a headline selector's ``replicates``) is
reported at its median process, with the same two-stage interval of the median of its
processes' medians (:func:`replicated_median`); two such cells' ratio, each side resampled
on its own, is :func:`replicated_unpaired_ratio`.

Fixed seed: the same samples give the same interval.  Imports numpy and scipy, never torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

CONFIDENCE = 0.95
N_RESAMPLES = 2000
# two-stage draws of a replicated estimate: enough for an expanded tail (expanded_tail)
# of 0.1% to hold 20 of them
N_DRAWS = 20000
SEED = 0
# the kind of a replicated ratio's interval (:func:`replicated_ratio`)
HIERARCHICAL, WITHIN_PROCESS = "hierarchical", "within-process"
# a replicate whose ratio lies further than this many MADs (scaled to a normal's sd) from
# its siblings' median, on the log scale, is an outlier (:func:`outliers`)
OUTLIER_MADS = 3.5
OUTLIER_FLOOR = 0.10
MAD_SCALE = 1.4826


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
    result = _bootstrap(a, b, paired, n_resamples, confidence, np.random.default_rng(seed))
    low, high = result.confidence_interval
    return ratio, float(low), float(high)


def _bootstrap(a, b, paired: bool, n_resamples: int, confidence: float, rng):
    """scipy's percentile bootstrap of :func:`ratio_of_medians` (module docstring)."""
    from scipy import stats

    return stats.bootstrap(
        (a, b),
        ratio_of_medians,
        n_resamples=n_resamples,
        vectorized=True,
        paired=paired,
        confidence_level=confidence,
        method="percentile",
        **_seed_of(rng),
    )


def paired_distribution(
    a: Sequence[float], b: Sequence[float], n_resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """``n_resamples`` ratios of medians of one process's rounds resampled as pairs
    (``scipy.stats.bootstrap``'s distribution); a single round, or rounds without spread,
    give their ratio ``n_resamples`` times."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ratio = float(ratio_of_medians(a, b))
    if a.size < 2 or (np.ptp(a) == 0 and np.ptp(b) == 0):
        return np.full(n_resamples, ratio)
    result = _bootstrap(a, b, True, n_resamples, CONFIDENCE, rng)
    return np.asarray(result.bootstrap_distribution, dtype=float)


def replicated_ratio(
    replicates: Sequence[tuple[Sequence[float], Sequence[float]]],
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> tuple[float, float, float, str]:
    """(ratio, lo, hi, kind) of a paired cell measured in several processes.

    ``replicates`` holds each process's rounds ``(a_samples, b_samples)``.  The ratio is
    the median over processes of ``median(a) / median(b)``.  The interval (module
    docstring) is the two-stage bootstrap, kind ``hierarchical``: each of
    :data:`N_DRAWS` draws picks k processes with replacement and, for each, one ratio
    from that process's own paired bootstrap distribution (``n_resamples`` resamples of its
    rounds), and keeps the median of the k; lo and hi are the draws' expanded percentiles
    (:func:`expanded_tail`).  One process gives its paired interval, kind
    ``within-process``.  Processes without samples on a side, or with a zero median, are
    left out; none left gives NaN and kind ``""``."""
    usable = [
        (np.asarray(a, dtype=float), np.asarray(b, dtype=float))
        for a, b in replicates
        if len(a) and len(b) and np.median(b) != 0
    ]
    for a, b in usable:
        if a.shape != b.shape:
            raise ValueError(
                f"a paired interval needs as many samples on each side, got {a.size} and {b.size}"
            )
    if not usable:
        return float("nan"), float("nan"), float("nan"), ""
    if len(usable) == 1:
        return (
            *ratio_interval(
                *usable[0], paired=True, confidence=confidence, n_resamples=n_resamples, seed=seed
            ),
            WITHIN_PROCESS,
        )
    ratios = np.array([ratio_of_medians(a, b) for a, b in usable])
    rng = np.random.default_rng(seed)
    within = np.stack([paired_distribution(a, b, n_resamples, rng) for a, b in usable])
    low, high = _percentiles(_hierarchical(within, rng), len(usable), confidence)
    return float(np.median(ratios)), float(low), float(high), HIERARCHICAL


def median_distribution(
    samples: Sequence[float], n_resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """``n_resamples`` medians of one process's samples resampled with replacement
    (``scipy.stats.bootstrap``'s distribution); one sample, or samples without spread,
    give their median ``n_resamples`` times."""
    from scipy import stats

    x = np.asarray(samples, dtype=float)
    if x.size < 2 or np.ptp(x) == 0:
        return np.full(n_resamples, float(np.median(x)))
    result = stats.bootstrap(
        (x,),
        np.median,
        n_resamples=n_resamples,
        vectorized=True,
        confidence_level=CONFIDENCE,
        method="percentile",
        **_seed_of(rng),
    )
    return np.asarray(result.bootstrap_distribution, dtype=float)


def _hierarchical(within: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The two-stage resample (module docstring) of k processes' bootstrap distributions
    ``within`` ``(k, n_resamples)``: each of :data:`N_DRAWS` draws picks k processes with
    replacement and one resample of each, and keeps their median -> ``(N_DRAWS,)``."""
    k = within.shape[0]
    process = rng.integers(k, size=(N_DRAWS, k))  # stage 1: the processes
    draw = rng.integers(within.shape[1], size=(N_DRAWS, k))  # stage 2: a resample of each
    return np.median(within[process, draw], axis=1)


def expanded_tail(k: int, confidence: float = CONFIDENCE) -> float:
    """The one-sided tail of the expanded percentile interval of k processes (module
    docstring): Phi(-sqrt(k / (k - 1)) t_{k-1, (1 + confidence) / 2}); for k = 5 and 95%,
    0.00095.  The plain tail (1 - confidence) / 2 for k < 2, which has no t."""
    from scipy.stats import norm, t

    if k < 2:
        return (1 - confidence) / 2
    return float(norm.sf(np.sqrt(k / (k - 1)) * t.ppf((1 + confidence) / 2, k - 1)))


def _percentiles(draws: np.ndarray, k: int, confidence: float) -> tuple[float, float]:
    """(lo, hi): the expanded percentile interval of k processes' two-stage ``draws``."""
    tail = expanded_tail(k, confidence) * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(low), float(high)


def _usable(processes: Sequence[Sequence[float]]) -> list[np.ndarray]:
    return [np.asarray(p, dtype=float) for p in processes if len(p)]


def replicated_median(
    processes: Sequence[Sequence[float]],
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> tuple[float, float, float, str]:
    """(median, lo, hi, kind) of a cell measured in several processes (``processes``:
    each one's samples): the median of the processes' medians and its two-stage bootstrap
    interval (processes with replacement, then each drawn process's samples; expanded
    percentiles, :func:`expanded_tail`), kind ``hierarchical``.  Fewer than two processes
    with samples give NaN and kind ``""``: one process's interval holds none of the
    process-to-process noise this one is for."""
    usable = _usable(processes)
    if len(usable) < 2:
        return float("nan"), float("nan"), float("nan"), ""
    rng = np.random.default_rng(seed)
    within = np.stack([median_distribution(x, n_resamples, rng) for x in usable])
    low, high = _percentiles(_hierarchical(within, rng), len(usable), confidence)
    estimate = float(np.median([np.median(x) for x in usable]))
    return estimate, float(low), float(high), HIERARCHICAL


def replicated_unpaired_ratio(
    a: Sequence[Sequence[float]],
    b: Sequence[Sequence[float]],
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> tuple[float, float, float]:
    """(ratio, lo, hi) of two separate cells each measured in several processes (``a``,
    ``b``: each process's samples): the ratio of their medians of process medians, and
    its interval from each side's two-stage resample (:func:`replicated_median`) drawn on
    its own, as the cells were measured apart, at the expanded tail of the side with fewer
    processes.  NaN unless both sides have two or more processes with samples."""
    a_usable, b_usable = _usable(a), _usable(b)
    if len(a_usable) < 2 or len(b_usable) < 2:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    sides = []
    for usable in (a_usable, b_usable):
        within = np.stack([median_distribution(x, n_resamples, rng) for x in usable])
        sides.append(_hierarchical(within, rng))
    a_median = np.median([np.median(x) for x in a_usable])
    b_median = np.median([np.median(x) for x in b_usable])
    if b_median == 0 or (sides[1] == 0).any():
        return float("nan"), float("nan"), float("nan")
    k = min(len(a_usable), len(b_usable))
    low, high = _percentiles(sides[0] / sides[1], k, confidence)
    return float(a_median / b_median), float(low), float(high)


def between_spread(estimates: Sequence[float]) -> tuple[float, float]:
    """(max/min, coefficient of variation) of per-process estimates: how far processes
    disagree.  NaN for fewer than two, or a non-positive estimate."""
    x = np.asarray([e for e in estimates if e is not None and np.isfinite(e)], dtype=float)
    if x.size < 2 or (x <= 0).any():
        return float("nan"), float("nan")
    return float(x.max() / x.min()), float(x.std(ddof=1) / x.mean())


def outliers(estimates: Sequence[float], mads: float = OUTLIER_MADS) -> list[int]:
    """The indices of the estimates that disagree with their siblings beyond their
    spread: on the log scale, further from the others' median than ``mads`` times the
    others' median absolute deviation (scaled to a normal's sd), and more than
    ``OUTLIER_FLOOR`` (10%) off it: four siblings give a rough MAD, and processes that
    agree to a few percent name no outlier.  Needs at least four estimates (three
    siblings for the spread)."""
    x = np.log(np.asarray(estimates, dtype=float))
    if x.size < 4 or not np.isfinite(x).all():
        return []
    found = []
    for i in range(x.size):
        others = np.delete(x, i)
        centre = np.median(others)
        mad = MAD_SCALE * np.median(np.abs(others - centre))
        off = abs(x[i] - centre)
        if off > np.log(1 + OUTLIER_FLOOR) and off > mads * mad:
            found.append(i)
    return found


def _seed_of(rng: np.random.Generator) -> dict:
    """scipy's seed keyword for a generator: ``rng`` from scipy 1.15 on, ``random_state``
    before it."""
    import inspect

    from scipy import stats

    name = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"
    return {name: rng}


def process_sd(medians_by_cell: Sequence[Sequence[float]]) -> float:
    """The between-process standard deviation of one cell's median on the log scale,
    pooled over cells each measured in several processes (``medians_by_cell``: each
    cell's per-process medians): the root of the mean of the cells' sample variances of
    log median, weighted by their degrees of freedom.  NaN with no cell of two or more."""
    ss = dof = 0.0
    for medians in medians_by_cell:
        x = np.log(np.asarray([m for m in medians if m and m > 0], dtype=float))
        if x.size >= 2:
            ss += float(((x - x.mean()) ** 2).sum())
            dof += x.size - 1
    return float(np.sqrt(ss / dof)) if dof else float("nan")


def widen(
    ratio: float, low: float, high: float, sd: float, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """A separate cells' interval with the process-to-process noise added: each side of
    the ratio is one process, so on the log scale the ratio gains a variance of ``2 sd**2``
    (:func:`process_sd`), added in quadrature to each half of the within-process interval
    ``(low, high)``.  NaN in, NaN out."""
    from scipy.stats import norm

    if not all(np.isfinite(v) and v > 0 for v in (ratio, low, high)) or not np.isfinite(sd):
        return float("nan"), float("nan")
    extra = norm.ppf(0.5 + confidence / 2) * sd * np.sqrt(2)
    down = np.hypot(np.log(ratio) - np.log(low), extra)
    up = np.hypot(np.log(high) - np.log(ratio), extra)
    return float(ratio * np.exp(-down)), float(ratio * np.exp(up))


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
