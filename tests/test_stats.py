"""Bootstrap intervals of ratios of medians (ssmbench.stats)."""

import math

import numpy as np
import pytest

from ssmbench.stats import decide, inside, ratio_interval


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
