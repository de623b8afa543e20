"""Bootstrap intervals of ratios of medians (ssmbench.stats)."""

import math

import numpy as np
import pytest

from ssmbench import stats
from ssmbench.stats import (
    HIERARCHICAL,
    WITHIN_PROCESS,
    between_spread,
    decide,
    expanded_tail,
    inside,
    outliers,
    process_sd,
    ratio_interval,
    replicated_median,
    replicated_ratio,
    replicated_unpaired_ratio,
    widen,
)


def drifting_pair(n=40, ratio=2.0, seed=1):
    """Two sides timed in the same rounds of a machine whose speed drifts by a factor of
    up to 1.6 over the run (common to both), with 3% noise each."""
    rng = np.random.default_rng(seed)
    drift = np.linspace(1.0, 1.6, n)
    b = drift * (1 + 0.03 * rng.standard_normal(n))
    a = ratio * drift * (1 + 0.03 * rng.standard_normal(n))
    return a, b


def test_a_paired_interval_cancels_the_drift_both_sides_share():
    a, b = drifting_pair()
    ratio, lo, hi = ratio_interval(a, b, paired=True)
    _, ulo, uhi = ratio_interval(a, b, paired=False)
    assert lo < 2.0 < hi
    assert ratio == pytest.approx(np.median(a) / np.median(b))
    # the drift widens the unpaired interval (each side's spread holds it); pairing removes it
    assert (hi - lo) < 0.5 * (uhi - ulo)


def test_the_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    covered = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        a = 3.0 * rng.lognormal(0.0, 0.1, 30)
        b = rng.lognormal(0.0, 0.1, 30)
        _, lo, hi = ratio_interval(a, b, paired=False, n_resamples=500)
        covered += lo <= 3.0 <= hi
    assert 0.85 <= covered / 200 <= 0.995


def test_same_samples_same_interval():
    a, b = drifting_pair()
    assert ratio_interval(a, b, paired=True) == ratio_interval(a, b, paired=True)
    assert ratio_interval(a, b, paired=True, seed=1) != ratio_interval(a, b, paired=True)


def test_too_few_samples_give_no_interval_and_pairs_must_match():
    ratio, lo, hi = ratio_interval([2.0], [1.0], paired=False)
    assert ratio == 2.0 and math.isnan(lo) and math.isnan(hi)
    assert all(math.isnan(v) for v in ratio_interval([], [1.0, 2.0], paired=False))
    assert ratio_interval([2.0, 2.0], [1.0, 1.0], paired=True) == (2.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="as many samples on each side, got 3 and 2"):
        ratio_interval([1, 2, 3], [1, 2], paired=True)


def test_decide_and_inside():
    assert decide(1.1, 1.5) == "above"
    assert decide(0.5, 0.9) == "below"
    assert decide(0.9, 1.2) == "inconclusive"
    assert decide(float("nan"), 1.2) == ""
    assert inside(1.0, 0.9, 1.1) and not inside(1.2, 0.9, 1.1)
    assert not inside(1.0, float("nan"), float("nan"))


# Replicates: a paired cell measured in k processes (ssmbench.stats.replicated_ratio)


def processes(k, ratio=2.0, process_sd=0.15, round_noise=0.02, n=30, seed=0):
    """k processes of one pair: each lands on its own speed ratio (lognormal around
    ``ratio`` with ``process_sd``, what a process's memory and threads land on), and its
    ``n`` rounds add ``round_noise`` to each side."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(k):
        landed = ratio * np.exp(process_sd * rng.standard_normal())
        b = 1 + round_noise * rng.standard_normal(n)
        a = landed * (1 + round_noise * rng.standard_normal(n))
        out.append((a, b))
    return out


def test_one_process_is_its_own_paired_interval_labelled_within_process():
    ((a, b),) = processes(1)
    ratio, lo, hi, kind = replicated_ratio([(a, b)])
    assert kind == WITHIN_PROCESS
    assert (ratio, lo, hi) == ratio_interval(a, b, paired=True)


def test_the_estimate_is_the_median_of_the_processes_ratios():
    reps = processes(5)
    ratio, lo, hi, kind = replicated_ratio(reps)
    per_process = [np.median(a) / np.median(b) for a, b in reps]
    assert kind == HIERARCHICAL
    assert ratio == pytest.approx(np.median(per_process))
    assert lo <= ratio <= hi
    assert replicated_ratio(reps) == replicated_ratio(reps)  # fixed seed
    assert replicated_ratio(reps, seed=1) != replicated_ratio(reps)


def test_within_process_intervals_miss_the_process_spread_the_hierarchical_one_holds():
    """The known answer is the true ratio, 2.0.  Each process lands 15% off it at random
    and its rounds are 2% noisy: a process's own interval is far too narrow to hold the
    truth, the hierarchical interval over five processes holds it about 95% of the time."""
    within = hierarchical = 0
    trials = 120
    for seed in range(trials):
        reps = processes(5, seed=seed)
        _, lo, hi = ratio_interval(*reps[0], paired=True, n_resamples=400)
        within += lo <= 2.0 <= hi
        _, lo, hi, _ = replicated_ratio(reps, n_resamples=400)
        hierarchical += lo <= 2.0 <= hi
    assert within / trials < 0.4
    assert hierarchical / trials >= 0.8


def test_a_reruns_estimate_falls_inside_the_expanded_interval_as_often_as_it_should():
    """Five processes per run, each landing 5% off the true ratio at random, rounds 2%
    noisy: two estimates with honest 95% intervals fall inside each other's about 83% of
    the time.  The expanded percentiles reach that; the plain percentiles of the same
    draws, too narrow here (five processes whose rounds add noise of their own), fall short
    of it."""
    trials, expanded, plain = 200, 0, 0
    for seed in range(trials):
        run = processes(5, process_sd=0.05, seed=seed)
        rerun = processes(5, process_sd=0.05, seed=10_000 + seed)
        estimate = np.median([np.median(a) / np.median(b) for a, b in rerun])
        _, lo, hi, _ = replicated_ratio(run, n_resamples=200)
        expanded += lo <= estimate <= hi
        rng = np.random.default_rng(seed)
        within = np.stack([stats.paired_distribution(a, b, 200, rng) for a, b in run])
        lo, hi = np.percentile(stats._hierarchical(within, rng), [2.5, 97.5])
        plain += lo <= estimate <= hi
    assert expanded / trials >= 0.83
    assert plain / trials <= expanded / trials - 0.05


def test_the_expanded_tail_is_students_t_widened_for_few_processes():
    # Phi^-1(1 - tail) = sqrt(k / (k - 1)) t_{k-1, 0.975}: 2.776 * sqrt(5/4) = 3.104 for k = 5
    assert expanded_tail(5) == pytest.approx(0.000955, rel=0.01)
    assert expanded_tail(3) < 1e-6  # three processes: the draws' range
    assert expanded_tail(1) == pytest.approx(0.025)
    # many processes: back to the plain 2.5% tail
    assert expanded_tail(10_000) == pytest.approx(0.025, rel=0.01)


def test_processes_without_samples_are_left_out_and_none_gives_nan():
    reps = processes(3)
    ratio, *_ = replicated_ratio([*reps, ([], [])])
    assert ratio == pytest.approx(replicated_ratio(reps)[0])
    ratio, lo, hi, kind = replicated_ratio([([], [])])
    assert math.isnan(ratio) and math.isnan(lo) and kind == ""
    with pytest.raises(ValueError, match="as many samples on each side, got 3 and 2"):
        replicated_ratio([([1, 2, 3], [1, 2]), ([1, 2], [1, 2])])


def test_between_spread_and_outliers():
    maxmin, cv = between_spread([1.0, 2.0])
    assert maxmin == 2.0 and cv == pytest.approx(np.std([1, 2], ddof=1) / 1.5)
    assert all(math.isnan(v) for v in between_spread([1.0]))
    assert outliers([1.0, 1.02, 0.98, 1.01, 1.6]) == [4]
    assert outliers([1.0, 1.02, 0.98, 1.01, 1.03]) == []
    # processes that agree to a fraction of a percent: an 8% one is not an outlier
    assert outliers([1.0, 1.0001, 0.9999, 1.0, 1.08]) == []
    assert outliers([1.0, 1.0, 5.0]) == []  # three: too few to know a spread


def test_process_sd_pools_the_cells_log_variances():
    sd = process_sd([[1.0, np.e], [2.0, 2.0, 2.0]])
    # the first cell's log sample variance is 0.5 over 1 dof, the second's 0 over 2
    assert sd == pytest.approx(np.sqrt(0.5 / 3))
    assert math.isnan(process_sd([[1.0]]))


def test_widen_adds_two_processes_noise_in_quadrature():
    lo, hi = widen(2.0, 1.9, 2.1, 0.0)
    assert (lo, hi) == pytest.approx((1.9, 2.1))
    lo, hi = widen(2.0, 2.0, 2.0, 0.1)
    half = 1.959964 * 0.1 * np.sqrt(2)
    assert (lo, hi) == pytest.approx((2.0 * np.exp(-half), 2.0 * np.exp(half)), rel=1e-5)
    assert all(math.isnan(v) for v in widen(2.0, float("nan"), 2.1, 0.1))


# Replicated cells: one cell measured in k processes (ssmbench.stats.replicated_median)


def cell_processes(k, median_ms=3.0, process_sd=0.15, sample_noise=0.02, n=20, seed=0):
    """k processes of one cell: each lands on its own speed (lognormal around
    ``median_ms`` with ``process_sd``), and its ``n`` samples add ``sample_noise``."""
    rng = np.random.default_rng(seed)
    return [
        median_ms
        * np.exp(process_sd * rng.standard_normal())
        * (1 + sample_noise * rng.standard_normal(n))
        for _ in range(k)
    ]


def test_a_replicated_cell_is_the_median_of_its_processes_medians():
    reps = cell_processes(5)
    median, lo, hi, kind = replicated_median(reps)
    assert kind == HIERARCHICAL
    assert median == pytest.approx(np.median([np.median(x) for x in reps]))
    assert lo <= median <= hi
    assert replicated_median(reps) == replicated_median(reps)  # fixed seed
    # one process: no interval, its own would hold none of the process-to-process noise
    assert all(math.isnan(v) for v in replicated_median(reps[:1])[:3])
    assert replicated_median(reps[:1])[3] == ""
    assert replicated_median([*reps[:2], []])[3] == HIERARCHICAL  # empty processes left out


def test_a_replicated_cells_interval_holds_the_process_spread_one_processs_does_not():
    """The known answer is the true median, 3.0 ms: each process lands 15% off it and
    its samples are 2% noisy.  One process's bootstrap interval of its median rarely
    holds 3.0; the hierarchical interval over five processes holds it most of the time."""
    from ssmbench.stats import median_distribution

    within = hierarchical = 0
    trials = 100
    for seed in range(trials):
        reps = cell_processes(5, seed=seed)
        dist = median_distribution(reps[0], 400, np.random.default_rng(seed))
        lo, hi = np.percentile(dist, [2.5, 97.5])
        within += lo <= 3.0 <= hi
        _, lo, hi, _ = replicated_median(reps, n_resamples=400)
        hierarchical += lo <= 3.0 <= hi
    assert within / trials < 0.4
    assert hierarchical / trials >= 0.8


def test_two_replicated_cells_ratio_holds_both_sides_process_spread():
    """Two separate cells whose true medians are 6.0 and 3.0 ms (ratio 2.0), each in five
    processes 15% apart: the interval of their ratio covers 2.0 most of the time, the
    unpaired interval of two single processes' samples seldom does."""
    single = replicated = 0
    trials = 100
    for seed in range(trials):
        a = cell_processes(5, median_ms=6.0, seed=2 * seed)
        b = cell_processes(5, median_ms=3.0, seed=2 * seed + 1)
        _, lo, hi = ratio_interval(a[0], b[0], paired=False, n_resamples=400)
        single += lo <= 2.0 <= hi
        ratio, lo, hi = replicated_unpaired_ratio(a, b, n_resamples=400)
        replicated += lo <= 2.0 <= hi
        assert ratio == pytest.approx(
            np.median([np.median(x) for x in a]) / np.median([np.median(x) for x in b])
        )
    assert single / trials < 0.4
    assert replicated / trials >= 0.8
    assert all(math.isnan(v) for v in replicated_unpaired_ratio(a[:1], b))
