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
from ssmbench.config import Cell
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
    """A record for each planned cell whose record path is not among ``finished``;
    ``stopped`` is why the run stopped (a key of :data:`NOT_REACHED`)."""
    return _unfinished(
        CellRecord,
        paths.cell_record,
        paths.bench_log,
        run,
        planned,
        finished,
        size,
        device,
        stopped,
    )


def unfinished_paired(
    run: str,
    planned: Iterable[Cell],
    finished: Iterable[str],
    size: dict,
    device: str,
    stopped: str = "budget",
):
    """A paired record (``ssmbench.paired``) for each planned paired cell (its SSM side)
    whose record path is not among ``finished``, as :func:`unfinished_records`."""
    from ssmbench.paired import PairedRecord

    return _unfinished(
        PairedRecord,
        paths.paired_record,
        paths.paired_log,
        run,
        planned,
        finished,
        size,
        device,
        stopped,
    )


def _unfinished(make, record_path, log_path, run, planned, finished, size, device, stopped):
    """``make(...)`` for each planned cell without a finished record: not_run, or failed
    when its job started (its log, ``log_path(run, cell)``, exists)."""
    done = {os.path.normpath(p) for p in finished}
    records = []
    for c in planned:
        if os.path.normpath(record_path(run, c)) in done:
            continue
        log = log_path(run, c)
        if os.path.exists(log):
            status = "failed"
            reason = (
                f"its job left no finished record (crashed, or killed when the run stopped): {log}"
            )
        else:
            status, reason = "not_run", NOT_REACHED[stopped]
        records.append(
            make(run=run, **vars(c), device=device, size=dict(size), status=status, reason=reason)
        )
    return records
