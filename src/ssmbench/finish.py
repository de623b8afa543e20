"""Finishing a run that stopped early: rows for the cells it never measured.

A budgeted run (``scripts/gpu_check.sh --budget-s``) is stopped when its time is up, a
run may lose a job to a crash that leaves no record (a CUDA fault kills the process), and
a run is stopped by SIGTERM.  ``snakemake --config partial=True`` then builds the tables
and figures from what exists: only records whose provenance sidecar vouches for their
bytes count (:func:`ssmbench.provenance.vouched`; a job killed while writing leaves no
sidecar), and every planned cell without one becomes a row of its own, so the tables
say what was not measured instead of leaving it out:

- ``not_run``: its job never started; the reason says why the run stopped (``budget``,
  ``sigterm``, or ``failure``: a job it needs failed, so it could not start);
- ``failed``: its job started (its log exists) but left no finished record: it crashed,
  or it was killed when the run stopped; the reason names the log.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ssmbench import paths
from ssmbench.matrix import Cell
from ssmbench.records import CellRecord

NOT_REACHED = {
    "budget": "budget: the run stopped at its time budget before this cell's job started",
    "sigterm": "sigterm: the run was stopped (SIGTERM) before this cell's job started",
    "failure": "failure: a job this cell needs (verify, prewarm, calibrate) failed first",
}


def unfinished_records(
    run: str,
    planned: Iterable[Cell],
    finished: Iterable[str],
    size: dict,
    device: str,
    stopped: str = "budget",
) -> list[CellRecord]:
    """A record for each planned bench job whose record path is not among ``finished``;
    ``stopped`` is why the run stopped (a key of :data:`NOT_REACHED`).  ``planned`` holds
    (cell, replicate) pairs (a replicated headline cell's processes), or bare cells
    (replicate 0)."""
    jobs = _jobs(planned)
    return _unfinished(
        CellRecord,
        paths.cell_record,
        paths.bench_log,
        run,
        [c for c, _ in jobs],
        finished,
        size,
        device,
        stopped,
        replicates=[r for _, r in jobs],
    )


def _jobs(planned) -> list[tuple[Cell, int]]:
    """(cell, replicate) for each planned job, a bare cell being replicate 0."""
    return [job if isinstance(job, tuple) and len(job) == 2 else (job, 0) for job in planned]


def unfinished_paired(
    run: str,
    planned: Iterable[Cell],
    finished: Iterable[str],
    size: dict,
    device: str,
    stopped: str = "budget",
):
    """A paired record (``ssmbench.paired``) for each planned paired job whose record path
    is not among ``finished``, as :func:`unfinished_records`.  ``planned`` holds (SSM
    side, replicate) pairs, or bare cells (replicate 0)."""
    from ssmbench.paired import PairedRecord

    jobs = _jobs(planned)
    return _unfinished(
        lambda replicate, **kw: PairedRecord(**kw, replicate=replicate),
        paths.paired_record,
        paths.paired_log,
        run,
        [c for c, _ in jobs],
        finished,
        size,
        device,
        stopped,
        replicates=[r for _, r in jobs],
    )


def _unfinished(
    make, record_path, log_path, run, planned, finished, size, device, stopped, replicates=None
):
    """``make(...)`` for each planned cell without a finished record: not_run, or failed
    when its job started (its log, ``log_path(run, cell)``, exists).  ``replicates``
    (paired jobs) gives each cell's replicate index, passed to the paths and ``make``."""
    done = {os.path.normpath(p) for p in finished}
    records = []
    planned = list(planned)
    extra = [{} for _ in planned] if replicates is None else [{"replicate": r} for r in replicates]
    for c, more in zip(planned, extra, strict=True):
        if os.path.normpath(record_path(run, c, **more)) in done:
            continue
        log = log_path(run, c, **more)
        if os.path.exists(log):
            status = "failed"
            reason = (
                f"its job left no finished record (crashed, or killed when the run stopped): {log}"
            )
        else:
            status, reason = "not_run", NOT_REACHED[stopped]
        records.append(
            make(
                run=run,
                **vars(c),
                **more,
                device=device,
                size=dict(size),
                status=status,
                reason=reason,
            )
        )
    return records
