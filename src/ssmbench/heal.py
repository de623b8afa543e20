"""Records that heal: a run's finished outputs checked when the workflow is planned.

Snakemake trusts an output that exists and is newer than its inputs, so a truncated,
hand-edited or bit-flipped record would be kept and only break ``aggregate`` later, far
from its cause.  Before Snakemake plans the jobs of a real run, :func:`heal_plan` checks
every output the plan makes whose job finished (its provenance sidecar exists): a record
must parse and meet its schema, and its sidecar must record its sha256.  A bad one is
reported, naming the file and what is wrong, and moved aside with its sidecar to
``<file>.corrupt``; Snakemake finds it missing and reruns its job, and only that job (the
tables and figures that rest on it follow).

Three things make "only that job" hold:

- a missing output is remade only when a job downstream must run, and once the tables
  exist none must: :func:`stale_tables` removes the first table's sidecar when a planned
  output is missing or unfinished, so ``aggregate`` runs again and pulls its jobs first;
- a verify, device or prewarm record made again must not make Snakemake remeasure the
  cells: they are ``ancient()`` inputs of the cells, which spares a cell only while the
  file exists, so :func:`stand_in` holds the place of a missing or bad one until its job
  remakes it;
- ``aggregate`` takes every record's sidecar as an input (``run_sidecars`` in
  common.smk), so a record without one (a stand-in, a killed job's) is made again.

On SLURM, a group of cells whose allocation died is resubmitted whole, and Snakemake
deletes a job's outputs before running it: :func:`keep_for_retry` sets the group's
vouched records aside first, and each cell's job puts its own back (:func:`restore_kept`),
so no finished cell is measured twice.

An output without a sidecar is an unfinished job's, left to Snakemake.  Nothing is written
on a dry run or any other command that runs no job (:func:`runs_jobs`), while another
Snakemake holds the directory's lock, or in a job's own invocation of the Snakefile: then
the bad outputs are only reported (and a dry run lists the jobs of a plain run less well).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from ssmbench import paths, provenance, runlock
from ssmbench.paired import validate_paired
from ssmbench.records import (
    DEVICE_KEYS,
    LM_VERIFY_KEYS,
    PREWARM_KEYS,
    RecordError,
    inconsistency,
    parse_json,
    require_keys,
    valid_record_fast,
    validate_record,
    validate_verify,
)

CORRUPT_SUFFIX = ".corrupt"
KEPT_SUFFIX = ".kept"  # a record set aside across a group's resubmission
RETRY_ENV = "SSMBENCH_RETRY_ATTEMPT"  # set in a resubmitted job's own invocation
LISTED = 20  # missing outputs named one by one

# Snakemake commands and flags that run no job: the plan is read, nothing may be moved
NO_JOB_FLAGS = frozenset(
    "--dry-run --dryrun --lint --list --list-rules --list-target-rules --lt --dag "
    "--rulegraph --filegraph --d3dag --summary --detailed-summary --unlock "
    "--cleanup-metadata --cm --list-changes --lc --list-input-changes --li "
    "--list-params-changes --lp --list-code-changes --list-untracked --lu "
    "--delete-all-output --delete-temp-output --archive --report --print-compilation "
    "--generate-unit-tests --containerize --export-cwl --conda-create-envs-only --touch "
    "--conda-cleanup-envs --version".split()
)
NO_JOB_SHORT = set("ntlSDv")  # -n, -t (touch), -l (list), -S, -D (summaries), -v


def runs_jobs(argv: Iterable[str]) -> bool:
    """Whether a Snakemake command line (``sys.argv``) may run jobs: not ``-n`` (alone or
    in a cluster such as ``-np``), ``--lint``, ``--unlock``, a summary or a listing."""
    for arg in argv:
        if arg.split("=", 1)[0] in NO_JOB_FLAGS:
            return False
        if re.fullmatch(r"-[A-Za-z]+", arg) and NO_JOB_SHORT & set(arg[1:]):
            return False
    return True


# Checks of one output's bytes, by kind: each raises naming the file and the key.


def _cell(blob: bytes, path: str) -> None:
    data = parse_json(blob, path)
    if not valid_record_fast(data) or inconsistency(data):
        validate_record(data, path)


def _paired(blob: bytes, path: str) -> None:
    validate_paired(parse_json(blob, path), path)


def _verify(blob: bytes, path: str) -> None:
    validate_verify(parse_json(blob, path), path)


def _device(blob: bytes, path: str) -> None:
    require_keys(parse_json(blob, path), DEVICE_KEYS, path, "device record")


def _prewarm(blob: bytes, path: str) -> None:
    require_keys(parse_json(blob, path), PREWARM_KEYS, path, "prewarm record")


def _ops(blob: bytes, path: str) -> None:
    """An ops.csv (rule profile): a header naming the cell's keys, rows as wide as it."""
    try:
        rows = list(csv.reader(io.StringIO(blob.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error) as e:
        raise RecordError(f"{path}: not a CSV table: {e}") from None
    if not rows:
        raise RecordError(f"{path}: empty (an ops table has a header and a row per bucket)")
    header = rows[0]
    for key in ("run", "model", "backend", "phase", "status"):
        if key not in header:
            raise RecordError(f"{path}: column {key!r}: missing from the header")
    for i, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise RecordError(f"{path}: line {i}: {len(row)} fields, the header has {len(header)}")


def _lm_cell(blob: bytes, path: str) -> None:
    from ssmbench.lm.record import validate_lm_record

    validate_lm_record(parse_json(blob, path), path)


def _lm_verify(blob: bytes, path: str) -> None:
    require_keys(parse_json(blob, path), LM_VERIFY_KEYS, path, "lm gate record")


def _task(blob: bytes, path: str) -> None:
    from ssmbench.tasks.record import validate_task_record

    validate_task_record(parse_json(blob, path), path)


def _bytes_only(blob: bytes, path: str) -> None:
    """An output with no reader here (a Chrome trace): its sidecar's hash is the check."""


Check = Callable[[bytes, str], None]


def planned_outputs(plan) -> list[tuple[str, Check]]:
    """Every record and measured output of a live ``plan``, each with its check: device,
    verify, prewarm (CUDA), cells, paired cells, profiles, whole-model cells, task jobs."""
    from ssmbench.prewarm import prewarm_groups

    run = plan.run
    # a whole-model run has no calibration: no device record to hold the place of
    outputs: list[tuple[str, Check]] = [(path, _device) for path in plan.device_records()]
    outputs += [(paths.verify_record(run, m, b), _verify) for m, b in plan.pairs]
    if plan.device == "cuda":
        outputs += [(paths.prewarm(run, *key), _prewarm) for key in prewarm_groups(plan.cells)]
    outputs += [(paths.cell_record(run, c, r), _cell) for c, r in plan.bench_jobs]
    outputs += [(paths.paired_record(run, c, r), _paired) for c, r in plan.paired_jobs]
    for c in sorted(plan.profiled):
        outputs += [(paths.ops(run, c), _ops), (paths.trace(run, c), _bytes_only)]
    lm = plan.lm  # whole models (ssmbench.lm)
    outputs += [(paths.lm_verify(run, *key), _lm_verify) for key in lm.verified]
    outputs += [(paths.lm_cell_record(run, c), _lm_cell) for c in lm.cells]
    for c in sorted(lm.profiled):
        outputs += [(paths.lm_ops(run, c), _ops), (paths.lm_trace(run, c), _bytes_only)]
    if plan.tasks:  # training jobs (ssmbench.tasks)
        outputs += [(paths.task_record(run, c), _task) for c in plan.tasks.cells]
    return outputs


def unvouched(path: str) -> str | None:
    """Why ``path``'s provenance sidecar does not vouch for its bytes (the sha256 it
    records and the one found), or None when it does: the one place the sidecar is checked."""
    try:
        provenance.check(path)
    except provenance.ProvenanceError as error:
        return str(error).removeprefix(f"{path}: ")
    return None


def problem(path: str, check: Check) -> str | None:
    """What is wrong with a finished output (one whose sidecar exists), or None when it is
    sound, missing, or unfinished (no sidecar: Snakemake reruns its job by itself).  The
    content is judged first (it says more), then the sidecar's hash."""
    if not os.path.isfile(paths.prov(path)):
        return None
    try:
        blob = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"unreadable: {e}"
    try:
        check(blob, path)
    except (ValueError, TypeError, KeyError) as error:
        return str(error).removeprefix(f"{path}: ") or type(error).__name__
    return unvouched(path)


def move_aside(path: str) -> str:
    """Rename ``path`` and its sidecar to ``<name>.corrupt`` (an older one is replaced);
    return the new path of ``path``."""
    aside = path + CORRUPT_SUFFIX
    os.replace(path, aside)
    sidecar = paths.prov(path)
    if os.path.exists(sidecar):
        os.replace(sidecar, sidecar + CORRUPT_SUFFIX)
    return aside


def stale_tables(plan, unfinished: list[str], write: bool, log) -> None:
    """A planned output without its sidecar (deleted, moved aside, or left by a killed job)
    is remade only if a job downstream must run: once the run's tables exist, Snakemake
    would find nothing to do and the tables would go on showing a row without a record.
    So the sidecar of the first table goes, and ``aggregate`` must run again, after the
    jobs that remake what is missing; and with tasks, tasks.csv's (``task_table``, which
    reads the task records; aggregate reads it)."""
    first = paths.LM_TABLES[0] if plan.kind == "lm" else paths.TABLES[0]
    sidecars = [paths.prov(paths.table(plan.run, first))]
    if plan.tasks:
        sidecars.append(paths.prov(paths.table(plan.run, paths.TASKS_TABLE)))
    sidecars = [s for s in sidecars if os.path.exists(s)]
    if not unfinished or not sidecars:
        return
    shown = unfinished[:LISTED]
    more = f" (and {len(unfinished) - len(shown)} more)" if len(unfinished) > len(shown) else ""
    action = "their jobs rerun" if write else "a run will remake them"
    print(
        f"ssm-bench: planned but missing or unfinished{more}; {action}, then the tables:", file=log
    )
    for path in shown:
        print(f"  {path}", file=log)
    if write:
        for sidecar in sidecars:
            os.remove(sidecar)


# The outputs the cells read (``ancient()`` inputs of bench, paired, profile, prewarm)
UPSTREAM = (_device, _verify, _prewarm, _lm_verify)
STAND_IN = {
    "stand_in": "this file holds the place of an output that was missing or bad; its job "
    "remakes it before any job reads it (ssmbench.heal)"
}


def stand_in(path: str) -> None:
    """Hold the place of a missing or bad verify, device or prewarm record until its job
    remakes it.  Snakemake's ``ancient()`` spares the cells only when the input exists:
    without a file in its place, every cell of a verify record made again would be
    remeasured.  It has no sidecar, so its job reruns (a declared output is missing), and
    it is no record (``read_verify`` refuses it), so a job that read it would fail."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(STAND_IN, f)
    with contextlib.suppress(FileNotFoundError):  # a deleted record's sidecar, left behind
        os.remove(paths.prov(path))


# A group of cells that SLURM resubmits (profiles/slurm: `retries`, `group-components`)


def retried_jobs(argv: Iterable[str]) -> list[tuple[str, dict[str, str]]]:
    """The jobs a resubmitted job's own invocation of Snakemake runs, as (rule, wildcards),
    read from its command line (``--attempt N`` with N > 1, ``--target-jobs
    rule:key=value,...``); none for a first attempt or the main process.  Read from the
    command line because Snakemake gives the Snakefile its attempt only once the workflow
    is parsed, and the records must be set aside before any job starts."""
    args = list(argv)
    attempt = args[args.index("--attempt") + 1] if "--attempt" in args[:-1] else "1"
    if not attempt.isdigit() or int(attempt) < 2 or "--target-jobs" not in args:
        return []
    jobs = []
    for entry in args[args.index("--target-jobs") + 1 :]:
        if entry.startswith("-"):
            break
        rule, _, wildcards = entry.partition(":")
        pairs = (item.partition("=") for item in wildcards.split(",") if item)
        jobs.append((rule, {key: value for key, _, value in pairs}))
    return jobs


def keep_for_retry(records: Iterable[str]) -> list[str]:
    """Set aside, as ``<name>.kept`` (record and sidecar), each of ``records`` that is sound
    and vouched for; return those set aside.

    Why: a resubmitted group runs every one of its cells again, and Snakemake deletes a
    job's outputs before the job starts, so the records its first allocation finished
    would be measured twice.  The retry's own invocation of the Snakefile calls this
    before any job starts (the profile's `keep-incomplete` spared the records when the
    group failed), and each cell's job puts its record back (:func:`restore_kept`)."""
    kept = []
    for path in records:
        sidecar = paths.prov(path)
        if not os.path.isfile(path) or not os.path.isfile(sidecar) or problem(path, _cell):
            continue
        os.replace(path, path + KEPT_SUFFIX)
        os.replace(sidecar, sidecar + KEPT_SUFFIX)
        kept.append(path)
    return kept


def restore_kept(path: str, retry: bool | None = None) -> bool:
    """Put back the record of ``path`` that :func:`keep_for_retry` set aside, when this job
    is a ``retry`` (default: :data:`RETRY_ENV` is set) and the record is still sound and
    vouched for; whether it did.  A record set aside by an earlier run is dropped (a first
    attempt measures afresh: its config may differ), as is one that no longer passes the
    checks."""
    if retry is None:
        retry = bool(os.environ.get(RETRY_ENV))
    sidecar = paths.prov(path)
    aside = [path + KEPT_SUFFIX, sidecar + KEPT_SUFFIX]
    if not all(os.path.isfile(f) for f in aside):
        for f in aside:
            with contextlib.suppress(FileNotFoundError):
                os.remove(f)
        return False
    if retry:
        os.replace(aside[0], path)
        os.replace(aside[1], sidecar)
        if problem(path, _cell) is None:
            return True
        aside = [path, sidecar]
    for f in aside:
        os.remove(f)
    return False


def another_run() -> bool:
    """Whether another Snakemake may be running in this checkout: Snakemake's own locks are
    there, or ``ssmbench.runlock``'s lock names a live process (or one on another host)."""
    if runlock.SNAKEMAKE_LOCKS.is_dir() and any(runlock.SNAKEMAKE_LOCKS.iterdir()):
        return True
    try:
        holder = runlock.read()
    except runlock.RunLocked:  # unreadable: assume the worst
        return True
    return holder is not None and holder.pid != os.getpid() and runlock.alive(holder) is not False


def heal_plan(plan, main_process: bool = True, argv: list[str] | None = None, log=None) -> list:
    """Check every finished output of a live ``plan`` and move the bad ones aside,
    reporting each as ``ssm-bench: <path>: <what>; moved aside to <path>.corrupt, its job
    reruns``.  Only reports (moves nothing) when the command runs no job, another Snakemake
    holds the lock, or this is not Snakemake's main process (a job's own invocation).
    Also clears the mark of a run stopped by a failed save (``ssmbench.outcome``).
    Returns the bad outputs' paths."""
    from ssmbench import outcome

    if plan.source != "live" or not main_process:
        return []
    log = log or sys.stderr
    write = runs_jobs(sys.argv if argv is None else argv)
    write = write and not another_run()
    checked = [(path, check, problem(path, check)) for path, check in planned_outputs(plan)]
    # a run with measured records keeps them when an input of theirs is made again
    measured = any(
        check not in UPSTREAM and why is None and os.path.exists(paths.prov(path))
        for path, check, why in checked
    )
    bad, unfinished = [], []
    for path, check, why in checked:
        if why is not None:
            bad.append(path)
            if write:
                aside = move_aside(path)
                print(f"ssm-bench: {path}: {why}; moved aside to {aside}, its job reruns", file=log)
            else:
                print(
                    f"ssm-bench: {path}: {why}; a run will move it aside, its job reruns", file=log
                )
        if write and measured and check in UPSTREAM and not os.path.exists(path):
            stand_in(path)  # missing, or just moved aside
            print(
                f"ssm-bench: {path}: made again before the jobs that read it; the records "
                "that already exist are kept (a stand-in holds its place until then)",
                file=log,
            )
        if check is not _prewarm and not (why is None and os.path.exists(paths.prov(path))):
            unfinished.append(path)  # bad, missing, or without its sidecar
    if not plan.partial:  # finishing a stopped run: missing stays missing
        stale_tables(plan, unfinished, write, log)
    if write:
        outcome.clear_stop(plan.run, log)
    return bad
