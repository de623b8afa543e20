"""Timing: percentiles, the sample loop's budget, and a pair's rounds (their ABBA order, the
deadline, CUDA events)."""

from __future__ import annotations

import numpy as np
import pytest

from ssmbench.matrix import Timing
from ssmbench.measure.timing import measure, measure_pair, percentile

TIMING = Timing(warmup=1, min_samples=6, max_samples=8, min_time_s=0.0, max_time_s=5.0)


@pytest.mark.parametrize("n", [1, 2, 5, 20, 101])
def test_percentile_matches_numpy(n):
    values = list(np.random.default_rng(n).exponential(size=n))
    for q in (0, 50, 95, 100):
        assert percentile(values, q) == pytest.approx(np.percentile(values, q), rel=1e-12)


def test_measure_keeps_every_sample_within_budget():
    calls = []
    timing = Timing(warmup=2, min_samples=4, max_samples=7, min_time_s=0.0, max_time_s=10.0)
    result = measure(lambda: calls.append(1), timing)
    assert len(calls) == 2 + 4 and len(result.samples_ms) == 4
    timing = Timing(warmup=0, min_samples=1, max_samples=7, min_time_s=60.0, max_time_s=60.0)
    assert len(measure(lambda: None, timing).samples_ms) == 7  # max_samples caps


def test_rounds_alternate_their_order_and_give_both_sides_as_many_samples():
    calls = []
    fns = (lambda: calls.append("A"), lambda: calls.append("B"))
    a, b = measure_pair(fns, TIMING)
    # no spread target and no minimum time: min_samples rounds are enough
    assert len(a.samples_ms) == len(b.samples_ms) == TIMING.min_samples
    warm = calls[: 2 * TIMING.warmup]
    rounds = calls[2 * TIMING.warmup :]
    assert warm == ["A", "B"]
    assert rounds[:8] == ["A", "B", "B", "A", "A", "B", "B", "A"]
    assert a.warmup == b.warmup == TIMING.warmup


def test_a_pair_stops_at_its_deadline_with_equal_rounds():
    import time

    a, b = measure_pair((lambda: time.sleep(0.01), lambda: None), TIMING, deadline=0.0)
    assert a.timed_out and b.timed_out and a.samples_ms == b.samples_ms == []


def test_on_a_gpu_each_round_is_timed_by_cuda_events(monkeypatch):
    """The CUDA branch of a pair's timer, on a fake of the few names it uses: each sample is
    one pair of events around one call, read after the call's end event synchronizes."""
    import torch

    clock = iter(range(1000))

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing
            self.at = None

        def record(self):
            self.at = next(clock)

        def synchronize(self):
            assert self.at is not None

        def elapsed_time(self, end):
            return float(end.at - self.at)

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    calls = []
    fns = (lambda: calls.append("A"), lambda: calls.append("B"))
    a, b = measure_pair(fns, TIMING, device="cuda")
    assert a.samples_ms == b.samples_ms == [1.0] * TIMING.min_samples  # start, end: one tick
    assert calls[2:6] == ["A", "B", "B", "A"]
