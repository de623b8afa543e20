"""Time a callable: warm-up first, then samples until the budget is met; keep every sample.

CPU: ``time.perf_counter_ns`` around each call.  CUDA: a fresh pair of CUDA events per
sample, recorded on the current stream, read after one synchronize at the end.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from ssmbench.config import Timing


@dataclass(frozen=True)
class TimingResult:
    samples_ms: list[float]
    warmup: int
    measure_s: float  # wall time of warm-up and sampling together

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def p95_ms(self) -> float:
        return percentile(self.samples_ms, 95)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile with linear interpolation between order statistics
    (NumPy's default method), without importing NumPy."""
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def measure(fn: Callable[[], object], timing: Timing, device: str = "cpu") -> TimingResult:
    """Run ``fn`` ``timing.warmup`` times untimed, then time it until at least
    ``min_samples`` samples and ``min_time_s`` seconds are reached, stopping at
    ``max_samples`` samples or ``max_time_s`` seconds of sampling (at least one sample)."""
    start = time.perf_counter()
    for _ in range(timing.warmup):
        fn()
    if device == "cuda":
        samples_ms = _measure_cuda(fn, timing)
    else:
        samples_ms = _measure_cpu(fn, timing)
    return TimingResult(samples_ms, timing.warmup, time.perf_counter() - start)


def _enough(n: int, elapsed_s: float, timing: Timing) -> bool:
    if n >= timing.max_samples or (n >= 1 and elapsed_s >= timing.max_time_s):
        return True
    return n >= timing.min_samples and elapsed_s >= timing.min_time_s


def _measure_cpu(fn, timing: Timing) -> list[float]:
    samples_ms: list[float] = []
    begin = time.perf_counter()
    while not _enough(len(samples_ms), time.perf_counter() - begin, timing):
        t0 = time.perf_counter_ns()
        fn()
        samples_ms.append((time.perf_counter_ns() - t0) / 1e6)
    return samples_ms


def _measure_cuda(fn, timing: Timing) -> list[float]:
    import torch

    torch.cuda.synchronize()
    events = []
    begin = time.perf_counter()
    while not _enough(len(events), time.perf_counter() - begin, timing):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()  # the budget is wall time: wait for this sample before the next check
        events.append((start, end))
    return [s.elapsed_time(e) for s, e in events]
