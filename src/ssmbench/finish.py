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
from ssmbench.config import Cell, compute_dtype
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
    done = {os.path.normpath(p) for p in finished}
    records = []
    for c in planned:
        if os.path.normpath(paths.cell_record(run, c)) in done:
            continue
        log = paths.bench_log(run, c)
        if os.path.exists(log):
            status = "failed"
            reason = (
                f"its job left no finished record (crashed, or killed when the run stopped): {log}"
            )
        else:
            status, reason = "not_run", NOT_REACHED[stopped]
        records.append(
            CellRecord(
                run=run,
                **vars(c),
                device=device,
                size=dict(size),
                status=status,
                reason=reason,
                compute_dtype=compute_dtype(c.model, c.backend, c.phase, c.dtype),
            )
        )
    return records


def unfinished_paired(
    run: str,
    planned: Iterable[Cell],
    finished: Iterable[str],
    size: dict,
    device: str,
    stopped: str = "budget",
):
    """A paired record (``ssmbench.paired``) for each planned paired cell (its SSM side)
    whose record path is not among ``finished``: not_run, or failed when its job started."""
    from ssmbench.paired import PairedRecord

    done = {os.path.normpath(p) for p in finished}
    records = []
    for c in planned:
        if os.path.normpath(paths.paired_record(run, c)) in done:
            continue
        log = paths.paired_log(run, c)
        if os.path.exists(log):
            status = "failed"
            reason = (
                f"its job left no finished record (crashed, or killed when the run stopped): {log}"
            )
        else:
            status, reason = "not_run", NOT_REACHED[stopped]
        records.append(
            PairedRecord(
                run=run, **vars(c), device=device, size=dict(size), status=status, reason=reason
            )
        )
    return records
