"""Time a callable: warm-up first, then samples until the budget is met; keep every sample.

CPU: ``time.perf_counter_ns`` around each call.  CUDA: a fresh pair of CUDA events per
sample, recorded on the current stream; each sample is read before the next starts, so
the budget is wall time.

Sampling stops when enough samples are taken and, if ``timing.target_spread`` is set, the
samples agree: the relative spread, interquartile range over median, is at or under the
target (a noisy machine keeps sampling until ``max_samples`` or ``max_time_s``).  A cell
deadline (``timing.timeout_s`` from the cell's start) ends sampling early; the result then
says ``timed_out`` and keeps the samples taken so far.

:func:`measure` times one callable, :func:`measure_pair` two in alternating rounds.  A
measurement whose samples come in rounds with untimed work between them (a whole model's
decode steps, each round from its own copy of one prefill's cache) runs the same loop,
:class:`SamplingLoop`, with rounds of its own; :func:`synchronize` and :func:`past` are the
device wait and the deadline test every loop here uses.
"""

from __future__ import annotations

import contextlib
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ssmbench.errors import CellTimeout
from ssmbench.matrix import Timing

__all__ = [
    "CellTimeout",
    "SamplingLoop",
    "TimingResult",
    "deadline_alarm",
    "measure",
    "measure_pair",
    "past",
    "percentile",
    "relative_spread",
    "synchronize",
]


@dataclass(frozen=True)
class TimingResult:
    samples_ms: list[float]
    warmup: int
    measure_s: float  # wall time of warm-up and sampling together
    timed_out: bool = False
    # the meter's window: the timed calls, then untimed ones until min_meter_s was reached
    meter_calls: int = 0
    meter_s: float | None = None

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def p95_ms(self) -> float:
        return percentile(self.samples_ms, 95)

    @property
    def spread(self) -> float | None:
        return relative_spread(self.samples_ms)


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


def relative_spread(values: list[float]) -> float | None:
    """Interquartile range over median (robust to a few outliers); None for fewer than
    two values or a zero median."""
    if len(values) < 2:
        return None
    median = statistics.median(values)
    if median == 0:
        return None
    return (percentile(values, 75) - percentile(values, 25)) / median


@contextlib.contextmanager
def deadline_alarm(deadline: float | None) -> Iterator[None]:
    """Raise :class:`CellTimeout` in this thread once ``time.monotonic()`` passes
    ``deadline`` (None: no deadline).  It interrupts Python code, such as a naive loop over
    time, between two bytecodes; a single long native call ends first.  Only the main
    thread can take signals: elsewhere only the checks between calls apply."""
    if deadline is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum, frame):
        raise CellTimeout(f"cell deadline passed ({time.monotonic() - deadline:.1f} s ago)")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, max(deadline - time.monotonic(), 1e-3))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def measure(
    fn: Callable[[], object],
    timing: Timing,
    device: str = "cpu",
    deadline: float | None = None,
    meter=None,
    after_warmup: Callable[[], object] | None = None,
    min_meter_s: float = 0.0,
) -> TimingResult:
    """Run ``fn`` ``timing.warmup`` times and for at least ``timing.warmup_s`` seconds
    untimed, then time it until the budget is met (:class:`SamplingLoop`, one call a round;
    at least one sample unless the deadline passes first).

    ``deadline`` is a ``time.monotonic()`` instant after which no call starts; a
    :class:`CellTimeout` raised inside ``fn`` (see :func:`deadline_alarm`) also ends the
    measurement.  ``after_warmup`` (optional) is called once between the warm-up and the
    first sample, the device idle (e.g. to read the GPU clocks of the warm device).
    ``meter`` (optional, with ``start()`` and ``stop()``, such as
    :class:`ssmbench.measure.energy.EnergyMeter`) is started after the warm-up and stopped
    after the last sample; when the samples took less than ``min_meter_s`` seconds, ``fn``
    keeps being called, untimed, inside the meter's window until it is that long (or the
    deadline comes), so that a coarse counter is read over a window it can resolve.
    ``meter_calls`` counts every call in the window, ``meter_s`` its wall time.
    """
    start = time.perf_counter()
    loop = SamplingLoop(timing, device)
    samples_ms = loop.samples_ms

    def one_call():
        return (fn,)

    meter_calls, meter_s = 0, None
    try:
        if loop.warm_up(one_call, deadline):
            return TimingResult([], loop.warm, time.perf_counter() - start, timed_out=True)
        if after_warmup is not None:
            after_warmup()
        if meter is not None:
            meter.start()
        window_start = time.perf_counter()
        try:
            timed_out = loop.sample(one_call, deadline)
            meter_calls = len(samples_ms)
            while (
                meter is not None
                and not timed_out
                and time.perf_counter() - window_start < min_meter_s
                and not past(deadline)
            ):
                fn()
                meter_calls += 1
                synchronize(device)
        finally:
            if meter is not None:
                meter.stop()
                meter_s = time.perf_counter() - window_start
    except CellTimeout:
        return TimingResult(
            samples_ms,
            loop.warm,
            time.perf_counter() - start,
            timed_out=True,
            meter_calls=max(meter_calls, len(samples_ms)),
            meter_s=meter_s,
        )
    return TimingResult(
        samples_ms,
        loop.warm,
        time.perf_counter() - start,
        timed_out=timed_out,
        meter_calls=meter_calls,
        meter_s=meter_s,
    )


def synchronize(device: str) -> None:
    """Wait until the work queued on ``device`` has run: ``torch.cuda.synchronize()`` on
    "cuda"; nothing on a CPU, whose calls return when they are done."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def past(deadline: float | None) -> bool:
    """Whether ``time.monotonic()`` has reached ``deadline`` (None: no deadline, never)."""
    return deadline is not None and time.monotonic() >= deadline


def _enough(samples_ms: list[float], elapsed_s: float, timing: Timing) -> bool:
    n = len(samples_ms)
    if n >= timing.max_samples or (n >= 1 and elapsed_s >= timing.max_time_s):
        return True
    if n < timing.min_samples or elapsed_s < timing.min_time_s:
        return False
    if timing.target_spread > 0:
        spread = relative_spread(samples_ms)
        return spread is not None and spread <= timing.target_spread
    return True


def _timer(device: str) -> Callable[[Callable[[], object]], float]:
    """``once(fn)``: the milliseconds of one call of ``fn`` on ``device`` (CUDA events
    around it on a GPU, the host's monotonic clock on a CPU)."""
    if device == "cuda":
        import torch

        def once(fn) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)

        return once

    def once(fn) -> float:
        t0 = time.perf_counter_ns()
        fn()
        return (time.perf_counter_ns() - t0) / 1e6

    return once


Round = Callable[[], Iterable[Callable[[], object]]]


class SamplingLoop:
    """Warm-up, then samples until the budget is met, one sampled measurement's loop.

    The work comes in rounds: ``new_round()`` does whatever must precede a round, untimed,
    and returns the round's calls, run (warm-up) or timed one by one (sampling), each a
    sample of its own.  :func:`measure`'s round is one call of its function; a whole
    model's decode (:mod:`ssmbench.lm.cell`) makes each round a fresh copy of one
    prefill's cache and returns its N - 1 steps.  The loop keeps what it has done in
    :attr:`warm` (calls run in the warm-up) and :attr:`samples_ms` (one per timed call, in
    milliseconds: CUDA events on a GPU, the host's monotonic clock on a CPU), so a caller
    interrupted by :class:`CellTimeout` still reads them.  Rounds are whole: the budget is
    checked between rounds, the deadline before every call."""

    def __init__(self, timing: Timing, device: str = "cpu"):
        self.timing, self.device = timing, device
        self.warm = 0
        self.samples_ms: list[float] = []
        self._once = _timer(device)

    def warm_up(self, new_round: Round, deadline: float | None = None) -> bool:
        """Run rounds untimed until ``timing.warmup`` calls and ``timing.warmup_s``
        seconds are done, then :func:`synchronize`; True (and no wait) if ``deadline``
        (None: none checked) ended it first."""
        start = time.perf_counter()
        while self.warm < self.timing.warmup or time.perf_counter() - start < self.timing.warmup_s:
            for call in new_round():
                if past(deadline):
                    return True
                call()
                self.warm += 1
        synchronize(self.device)
        return False

    def sample(self, new_round: Round, deadline: float | None = None) -> bool:
        """Time rounds' calls into :attr:`samples_ms` until the budget is met: at least
        ``min_samples`` and ``min_time_s``, and, with ``target_spread`` set, a relative
        spread at or under it; at most ``max_samples`` or ``max_time_s`` (once there is a
        sample).  True if ``deadline`` ended it first."""
        begin = time.perf_counter()
        while not _enough(self.samples_ms, time.perf_counter() - begin, self.timing):
            for call in new_round():
                if past(deadline):
                    return True
                self.samples_ms.append(self._once(call))
        return False


def measure_pair(
    fns: tuple[Callable[[], object], Callable[[], object]],
    timing: Timing,
    device: str = "cpu",
    deadline: float | None = None,
) -> tuple[TimingResult, TimingResult]:
    """Time two callables in alternating rounds of one process: a paired measurement.

    Warm-up alternates the two for ``timing.warmup`` calls each and ``timing.warmup_s``
    seconds.  Then each round times one call of each, in the order A B in even rounds and
    B A in odd ones (so neither side always follows the other, whose caches and clocks it
    inherits), until the rounds satisfy :func:`_enough` on ``timing`` counted in rounds
    and in the wall time of the whole pair (``max_time_s`` is the pair's, not a side's),
    or the deadline passes.  Sample i of A and sample i of B come from round i, so their
    ratio sees one moment of the machine (``ssmbench.stats``: paired intervals).  Returns
    one :class:`TimingResult` per callable, with as many samples each.
    """
    once = _timer(device)
    start = time.perf_counter()
    warm = 0
    samples: tuple[list[float], list[float]] = ([], [])
    timed_out = False
    try:
        while warm < timing.warmup or time.perf_counter() - start < timing.warmup_s:
            if past(deadline):
                timed_out = True
                break
            fns[0](), fns[1]()
            warm += 1
        synchronize(device)
        begin = time.perf_counter()
        while not timed_out and not _enough_rounds(samples, time.perf_counter() - begin, timing):
            if past(deadline):
                timed_out = True
                break
            order = (0, 1) if len(samples[0]) % 2 == 0 else (1, 0)
            round_ms = {side: once(fns[side]) for side in order}
            for side in (0, 1):
                samples[side].append(round_ms[side])
    except CellTimeout:
        timed_out = True
    elapsed = time.perf_counter() - start
    return tuple(TimingResult(s, warm, elapsed, timed_out=timed_out) for s in samples)


def _enough_rounds(samples: tuple[list[float], list[float]], elapsed_s: float, timing: Timing):
    """:func:`_enough` for a pair: both sides' spread targets must be met."""
    return all(_enough(s, elapsed_s, timing) for s in samples)
