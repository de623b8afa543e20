"""A long run's progress on the terminal: cells done of those planned, and the time left.

Snakemake prints each job as it starts and ends, not how far the run has come.  The
Snakefile's ``onstart`` hook calls :func:`watch`, which starts a thread in Snakemake's main
process.  The thread knows the jobs this invocation will run (Snakemake's DAG: a run of one
figure counts only the cells that figure needs) and looks at their outputs every
``poll_s``; when the count has moved, at most every ``every_s``, and once at the end, it
prints to stderr (the terminal, and ``gpu_check.log`` under scripts/gpu_check.sh):

    ssm-bench: 12/56 cells done (40/91 jobs), about 3 min left

A job is done when each of its outputs exists and was written after the run started.  The
time left is the cost model's (ssmbench.budget) estimate of the jobs not yet done, scaled
by this run's pace so far (the time since the start over the estimate of the jobs done):
a machine slower or busier than the model's shows a longer time after its first jobs.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from ssmbench import budget
from ssmbench.config import Plan
from ssmbench.matrix import Cell

# the jobs that make a cell (or one process of a replicated one)
CELL_RULES = ("bench", "bench_replicate", "paired", "lm_bench", "task_train")


@dataclass(frozen=True)
class Tracked:
    """One job of the run: its rule, its outputs and its estimated seconds."""

    rule: str
    outputs: tuple[str, ...]
    estimate_s: float

    def done(self, since: float) -> bool:
        """Whether every output exists and was written at or after ``since`` (epoch s)."""
        try:
            return all(os.stat(path).st_mtime >= since for path in self.outputs)
        except OSError:
            return False


def tracked_jobs(plan: Plan, jobs: Iterable) -> list[Tracked]:
    """The jobs to watch, from Snakemake's jobs (``rule.name``, ``output``, ``wildcards``),
    each with the cost model's estimate: a cell's own, the mean of its rule's otherwise
    (0 for a rule the model does not price, such as ``all``)."""
    costs = budget.costs_for(plan.device)
    by_rule: dict[str, list[float]] = defaultdict(list)
    for job in budget.jobs(plan):
        by_rule[job.rule].append(job.seconds)
    mean_s = {rule: sum(s) / len(s) for rule, s in by_rule.items()}
    tracked = []
    for job in jobs:
        rule = job.rule.name
        if rule in ("bench", "bench_replicate"):
            w = job.wildcards
            cell = Cell(w.model, w.backend, w.phase, int(w.batch), int(w.seq_len),
                        int(w.d_state), w.dtype)  # fmt: skip
            estimate_s = budget.cell_seconds(plan, cell, costs)
        elif rule == "paired":
            estimate_s = budget.paired_seconds(plan, costs)
        else:
            estimate_s = mean_s.get(rule, 0.0)
        if job.output:  # `all` has none: nothing to wait for
            tracked.append(Tracked(rule, tuple(str(f) for f in job.output), estimate_s))
    return tracked


def report(tracked: list[Tracked], started: float, now: float) -> tuple[int, str]:
    """(jobs done, the progress line) at ``now`` of a run started at ``started``."""
    done = [t.done(started) for t in tracked]
    cells = [d for t, d in zip(tracked, done, strict=True) if t.rule in CELL_RULES]
    estimate_done = sum(t.estimate_s for t, d in zip(tracked, done, strict=True) if d)
    estimate_left = sum(t.estimate_s for t, d in zip(tracked, done, strict=True) if not d)
    pace = (now - started) / estimate_done if estimate_done > 0 else 1.0
    line = f"ssm-bench: {sum(done)}/{len(done)} jobs done"
    if cells:
        line = f"ssm-bench: {sum(cells)}/{len(cells)} cells done ({sum(done)}/{len(done)} jobs)"
    if sum(done) < len(done):
        line += f", about {_duration(estimate_left * pace)} left"
    return sum(done), line


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(seconds, 1):.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class _Watcher(threading.Thread):
    def __init__(self, tracked: list[Tracked], poll_s: float, every_s: float):
        super().__init__(name="ssm-bench progress", daemon=True)
        self.tracked, self.poll_s, self.every_s = tracked, poll_s, every_s
        self.started = time.time()
        self.stopped = threading.Event()
        self.last_done, self.last_print = 0, 0.0

    def run(self) -> None:
        while not self.stopped.wait(self.poll_s):
            done, line = report(self.tracked, self.started, time.time())
            if done != self.last_done and time.monotonic() - self.last_print >= self.every_s:
                self.last_done, self.last_print = done, time.monotonic()
                _print(line)

    def stop(self) -> None:
        """End the thread and print where the run ended, if that is news."""
        self.stopped.set()
        self.join(timeout=5)
        done, line = report(self.tracked, self.started, time.time())
        if done != self.last_done:
            _print(line)


def _print(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


_watcher: _Watcher | None = None


def watch(plan: Plan, jobs: Iterable, poll_s: float = 5.0, every_s: float = 30.0) -> None:
    """Start printing the progress of the run of ``jobs`` (Snakemake's jobs to run).
    ``SSMBENCH_PROGRESS_EVERY_S`` overrides ``every_s`` (0: at every change)."""
    global _watcher
    every_s = float(os.environ.get("SSMBENCH_PROGRESS_EVERY_S", every_s))
    tracked = tracked_jobs(plan, jobs)
    if not tracked:
        return
    total_s = sum(t.estimate_s for t in tracked)
    cells = sum(t.rule in CELL_RULES for t in tracked)
    _print(f"ssm-bench: {cells} cells to measure ({len(tracked)} jobs), about "
           f"{_duration(total_s)} by the cost model (python -m ssmbench plan)")  # fmt: skip
    _watcher = _Watcher(tracked, min(poll_s, max(every_s, 0.5)), every_s)
    _watcher.start()


def stop() -> None:
    """Stop the thread :func:`watch` started (``onsuccess``, ``onerror``), if any."""
    global _watcher
    if _watcher is not None:
        _watcher.stop()
        _watcher = None
