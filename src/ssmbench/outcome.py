"""How a run ended, said at its end; and a run stopped by an output it could not save.

No silent failures.  ``keep-going`` (profiles/default) lets a run finish around a cell
that failed, and every cell writes a record whatever happens, so a run whose every cell
failed would still build its tables and exit 0.  The Snakefile's ``onsuccess`` and
``onerror`` hooks call :func:`at_end`, which counts the plan's cell records by status and
lists those that failed, ran out of memory or time (``model/backend/phase bB tT``: the
reason's first line); when every measured cell (any status but ``unavailable`` and
``not_run``) failed, the run exits non-zero with that summary.

A full disk.  A job that cannot save what it measured (``OSError`` on write, ENOSPC
mostly) fails inside :func:`saving`, which marks the run stopped (``paths.stopped``,
holding the reason); every later job calls :func:`refuse_if_stopped` before measuring and
fails at once, as it does when the disk has under :data:`MIN_FREE_BYTES` left, so the
rest of the matrix is not measured to the same fate.  The next run clears the mark when
it is planned (``ssmbench.heal``), and the jobs that failed run again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections import Counter
from pathlib import Path

from ssmbench import paths
from ssmbench.records import read_record

# statuses of a cell that was measured and did not give a number
FAILURES = ("failed", "oom", "timeout")
# statuses of a cell that was never measured: not a failure of the run
NOT_MEASURED = ("unavailable", "not_run")
LISTED = 30  # cells named at the end; the cells table has the rest
# a record and its sidecar take a few kilobytes, a Chrome trace a few megabytes
MIN_FREE_BYTES = 16 * 2**20


class RunStopped(RuntimeError):
    """A job refused to run, or failed, because the run cannot save its outputs."""


def _first_line(text: str) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def cell_statuses(plan) -> tuple[Counter, list[str]]:
    """(count of the plan's cells by status, one line per cell that failed); a cell
    without a record counts as ``no record``, one whose record its reader refuses (not
    JSON, a field its schema refuses, a NaN: nothing a table could hold) as
    ``unreadable``, so the count is of what the tables can use."""
    from ssmbench.lm.record import read_lm_record
    from ssmbench.tasks.record import read_task_record

    counts: Counter = Counter()
    failed = []
    blocks = [
        (paths.cell_record(plan.run, c), f"{c.model}/{c.backend}/{c.phase} b{c.batch} t{c.seq_len}")
        for c in plan.cells
    ]
    models = [(paths.lm_cell_record(plan.run, c), c.name) for c in plan.lm.cells]
    matrix = plan.tasks  # training jobs (ssmbench.tasks)
    tasks = [(paths.task_record(plan.run, c), c.name) for c in matrix.cells] if matrix else []
    readers = [read_record] * len(blocks) + [read_lm_record] * len(models)
    readers += [read_task_record] * len(tasks)
    for (path, name), read in zip(blocks + models + tasks, readers, strict=True):
        if not os.path.exists(path):
            counts["no record"] += 1
            continue
        try:
            data = _as_dict(read(path))
            status, reason = data["status"], str(data.get("reason", ""))
        except (ValueError, KeyError, TypeError, OSError) as error:
            status, reason = "unreadable", str(error)
        counts[status] += 1
        if status in (*FAILURES, "unreadable"):
            failed.append(f"  {name}: {status}: {_first_line(reason)}")
    return counts, failed


def _as_dict(record) -> dict:
    return record if isinstance(record, dict) else vars(record)


def summary(plan) -> tuple[str, bool]:
    """The end-of-run summary of ``plan``'s cells, and whether every measured one failed."""
    counts, failed = cell_statuses(plan)
    total = sum(counts.values())
    measured = total - sum(counts[s] for s in (*NOT_MEASURED, "no record"))
    by_status = ", ".join(f"{s} {n}" for s, n in sorted(counts.items()))
    lines = [f"ssm-bench: {plan.run}: {total} cells: {by_status}"]
    if failed:
        lines.append(f"ssm-bench: {len(failed)} of {measured} measured cells failed:")
        lines += failed[:LISTED]
        if len(failed) > LISTED:
            table = paths.table(plan.run, "lm.csv" if plan.kind == "lm" else "cells.csv")
            lines.append(f"  ... and {len(failed) - LISTED} more (status and reason in {table})")
    all_failed = measured > 0 and len(failed) == measured
    return "\n".join(lines), all_failed


def at_end(plan, succeeded: bool, log=None) -> None:
    """What the Snakefile's hooks call: print the summary (and why the run stopped, if it
    did); exit non-zero when every measured cell failed."""
    if plan.source != "live":
        return
    log = log or sys.stderr
    text, all_failed = summary(plan)
    print(text, file=log)
    reason = stopped(plan.run)
    if reason:
        print(f"ssm-bench: the run stopped early: {reason}", file=log)
    if succeeded and all_failed:
        raise SystemExit(f"ssm-bench: every measured cell of {plan.run} failed (above)")


# --- a run stopped by an output it could not save ---


def stopped(run: str) -> str:
    """Why ``run`` is stopped ("" when it is not)."""
    mark = Path(paths.stopped(run))
    if not mark.exists():
        return ""
    try:
        return mark.read_text().strip() or "an output could not be saved (disk full?)"
    except OSError as error:
        return f"an output could not be saved ({mark}: {error})"


def mark_stopped(run: str, reason: str) -> None:
    """Write the stop mark, as well as a full disk allows: the reason, else an empty file
    (an inode, no data block), else nothing (the free-space check stops the next jobs)."""
    mark = Path(paths.stopped(run))
    try:
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.write_text(reason + "\n")
    except OSError:
        with contextlib.suppress(OSError):
            mark.touch()


def clear_stop(run: str, log=None) -> None:
    """Remove the stop mark (a new run is planned), saying what it held."""
    reason = stopped(run)
    if reason:
        print(f"ssm-bench: the last run stopped early: {reason}; trying again", file=log)
        Path(paths.stopped(run)).unlink(missing_ok=True)


def _free_bytes(path: str) -> int:
    folder = Path(path).absolute().parent
    while not folder.exists():
        folder = folder.parent
    return shutil.disk_usage(folder).free


def refuse_if_stopped(run: str, output: str) -> None:
    """Before a job measures: raise :class:`RunStopped` when the run is stopped, or when
    the disk that ``output`` goes to has under :data:`MIN_FREE_BYTES` free (and stop it)."""
    reason = stopped(run)
    if not reason:
        free = _free_bytes(output)
        if free >= MIN_FREE_BYTES:
            return
        reason = f"{free} bytes free on the disk of {output} (under {MIN_FREE_BYTES})"
        mark_stopped(run, reason)
    message = (
        f"the run stopped: {reason}; {output} is not measured (free space, then run "
        "snakemake again: the jobs that failed rerun)"
    )
    print(f"ssm-bench: {message}", file=sys.__stderr__)
    raise RunStopped(message)


@contextlib.contextmanager
def saving(run: str, what: str):
    """Around a job's writes: an ``OSError`` (ENOSPC, a read-only folder) marks ``run``
    stopped with the reason and fails the job with :class:`RunStopped`."""
    try:
        yield
    except OSError as error:
        reason = f"cannot save {what}: {error}"
        mark_stopped(run, reason)
        print(f"ssm-bench: the run stops: {reason}", file=sys.__stderr__)
        raise RunStopped(f"the run stops: {reason}") from error


# --- a results folder the run cannot write ---


def check_writable(folders) -> None:
    """Before any job: raise :class:`RunStopped` naming the first of ``folders`` (results,
    logs) that this run could not write: a read-only file system, no permission, or a file
    where the folder should be.  A folder that does not exist yet is judged by the one it
    would be made in (nothing is created here: a refused run writes nothing)."""
    for folder in folders:
        path = Path(folder)
        if path.exists() and not path.is_dir():
            raise RunStopped(f"{folder}: is a file, where the run keeps a folder of its outputs")
        target = path if path.exists() else _existing_parent(path)
        if os.access(target, os.W_OK | os.X_OK):
            continue
        why = "a read-only file system" if _read_only(target) else "no permission to write"
        where = f"{folder}/" if target == path else f"{target}/ (where {folder}/ would be made)"
        raise RunStopped(
            f"{where} cannot be written: {why}.  A run writes its records and tables under "
            "results/<run>/ and its logs under logs/<run>/: make it writable, or run in a "
            "checkout where it is (source=precollected draws shipped runs and writes only "
            "figures/)"
        )


def _existing_parent(path: Path) -> Path:
    return next(p for p in path.absolute().parents if p.exists())


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


# --- a failed job never costs the previous tables ---

# The tables of the run as it started, hard links kept beside Snakemake's own state: a job
# that fails loses its outputs (Snakemake deletes them before it runs and again after it
# fails), so a table the run could not make again comes back from here.
KEPT = Path(".snakemake") / "ssmbench-kept-tables"


def _tables(run: str) -> Path:
    """results/<run>/tables/"""
    return Path(paths.table(run, "cells.csv")).parent


def keep_tables(plan, log=None) -> None:
    """At a live run's start (``onstart``): keep its tables and their sidecars (hard
    links, or copies where links fail), after restoring any that a killed run, whose hooks
    never ran, left kept."""
    if plan.source != "live":
        return
    restore_tables(plan, log)
    tables = _tables(plan.run)
    if not tables.is_dir():
        return
    kept = KEPT / plan.run
    for path in sorted(p for p in tables.rglob("*") if p.is_file()):
        _link(path, kept / path.relative_to(tables))


def restore_tables(plan, log=None) -> list[str]:
    """After a failed run (``onerror``): every kept table or sidecar that the run no
    longer has goes back in place, so a table that a failed job could not make again is
    the previous run's (its sidecar still says which records it came from), not gone.
    Returns the restored files, and says so on ``log``."""
    kept = KEPT / plan.run
    if not kept.is_dir():
        return []
    tables = _tables(plan.run)
    restored = []
    for path in sorted(p for p in kept.rglob("*") if p.is_file()):
        target = tables / path.relative_to(kept)
        if not target.exists():
            _link(path, target)
            restored.append(str(target))
    shutil.rmtree(kept, ignore_errors=True)
    shown = [p for p in restored if not p.endswith(paths.PROV_SUFFIX)]
    if shown:
        print(
            f"ssm-bench: {len(shown)} tables could not be made again and are the previous "
            f"run's (their sidecars name the records they were made from): "
            f"{', '.join(Path(p).name for p in shown)} in {tables}",
            file=log or sys.stderr,
        )
    return restored


def drop_kept_tables(plan) -> None:
    """After a run that succeeded (``onsuccess``): its tables are whole; the kept ones go."""
    shutil.rmtree(KEPT / plan.run, ignore_errors=True)


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
