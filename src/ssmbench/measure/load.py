"""Was the machine ours while a measurement ran?

A cell owns its machine (one measuring job at a time, every core), yet nothing stops
another process from taking cores meanwhile: a remeasured cell once read 95.8 ms against
1.79 ms on a loaded host, and its record said nothing.  :class:`LoadWatch` reads three
witnesses around a measurement, all from the kernel's counters, none by sampling:

- **other processes' CPU** (``/proc/stat`` busy jiffies of all CPUs, less this process's
  own user and system time, over the window): cores that someone else used;
- **steal** (``/proc/stat``'s steal column): cores the hypervisor gave to another guest;
- **a probe before and after**: a fixed small matmul, the fastest of a few calls after a
  warm-up of its own, timed before the model is built and after the last sample; a
  machine that slowed under the measurement (load, clocks, thermal) shows as the probe
  after being slower.  Only that direction counts: in a fresh process the probe before is
  up to 1.7x slower than after however it is warmed (the fastest of 7 calls after 10, on
  the 2-core VM), so a faster probe after is the process's own start, not load.

The one-minute load average is kept as well, but it is not a witness: this job's own
threads are in it, and so are the jobs before it.  :meth:`LoadWatch.stop` returns the
numbers and ``loaded``: "" when the machine was ours, else why not, in words.  Linux
only for the counters; elsewhere they are None and only the probe speaks.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

# thresholds: another process using this much of a core on average, steal of this share
# of the CPUs' time, or a probe this much slower after than before.  Snakemake's
# own main process hums at 0.1-0.35 of a core during a job late in a 340-job run on the
# 2-core VM (its CPU time grows with the jobs done): that is not someone else's load, a
# competing busy process (a whole core) is.
OTHER_CPU_CORES = 0.5
STEAL_SHARE = 0.02
PROBE_CHANGE = 0.25
PROBE_CALLS = 7
PROBE_WARMUP = 10
PROBE_N = 384  # a 384 x 384 float32 matmul: about 0.6 ms on the 2-core VM

_BUSY = (0, 1, 2, 5, 6)  # user nice system irq softirq (idle, iowait and steal excluded)
_STEAL = 7


@dataclass(frozen=True)
class LoadReading:
    load_avg_1m: float | None
    other_cpu_cores: float | None  # average cores other processes used in the window
    steal_share: float | None  # the share of all CPUs' time stolen in the window
    probe_before_ms: float | None
    probe_after_ms: float | None
    loaded: str  # "" when the machine was ours, else why not

    def to_dict(self) -> dict:
        return dict(vars(self))


def _cpu_jiffies() -> tuple[int, int] | None:
    """(busy, steal) jiffies of all CPUs, or None without /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return None
    values = [int(v) for v in fields]
    busy = sum(values[i] for i in _BUSY if i < len(values))
    steal = values[_STEAL] if len(values) > _STEAL else 0
    return busy, steal


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def probe_ms(calls: int = PROBE_CALLS, n: int = PROBE_N) -> float | None:
    """The fastest of ``calls`` timed calls of a fixed ``n`` x ``n`` matmul on the host
    (torch's, on the threads this process uses), after ``PROBE_WARMUP`` untimed ones; None
    without torch."""
    try:
        import torch
    except ImportError:
        return None
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g)
    for _ in range(PROBE_WARMUP):  # the first calls allocate and wake the thread pool
        a @ a
    times = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        a @ a
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return min(times)


class LoadWatch:
    """``start()`` before a measurement, ``stop()`` after it: a :class:`LoadReading`.
    ``probe`` False skips the probe (tests of the counters)."""

    def __init__(self, probe: bool = True):
        self.probe = probe
        self._t0 = self._jiffies0 = self._own0 = None
        self._probe0 = None

    def start(self) -> LoadWatch:
        self._probe0 = probe_ms() if self.probe else None
        self._t0 = time.monotonic()
        self._jiffies0 = _cpu_jiffies()
        self._own0 = _own_cpu_s()
        return self

    def stop(self) -> LoadReading:
        jiffies, own = _cpu_jiffies(), _own_cpu_s()
        elapsed = time.monotonic() - self._t0
        probe1 = probe_ms() if self.probe else None
        other = steal = None
        if jiffies is not None and self._jiffies0 is not None and elapsed > 0:
            hz = os.sysconf("SC_CLK_TCK")
            ncpu = os.cpu_count() or 1
            busy_s = (jiffies[0] - self._jiffies0[0]) / hz
            other = max(0.0, busy_s - (own - self._own0)) / elapsed
            steal = (jiffies[1] - self._jiffies0[1]) / hz / (elapsed * ncpu)
        return reading(_load_avg(), other, steal, self._probe0, probe1)


def _load_avg() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def reading(load_avg, other, steal, before, after) -> LoadReading:
    """A :class:`LoadReading` from the witnesses, with ``loaded`` saying which of them
    crossed its threshold (module constants)."""
    why = []
    if other is not None and other > OTHER_CPU_CORES:
        why.append(f"other processes used {other:.2f} cores on average")
    if steal is not None and steal > STEAL_SHARE:
        why.append(f"{steal:.0%} of CPU time was stolen by the hypervisor")
    if before and after:
        change = after / before - 1
        if change > PROBE_CHANGE:  # slower after: the machine slowed under the measurement
            why.append(
                f"the probe took {after:.3g} ms after against {before:.3g} ms before "
                f"({change:+.0%})"
            )
    return LoadReading(load_avg, other, steal, before, after, "; ".join(why))
