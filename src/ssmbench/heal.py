"""Records that heal: a run's finished outputs checked when the workflow is planned.

Snakemake trusts an output that exists and is newer than its inputs, so a truncated,
hand-edited or bit-flipped record would be kept and only break ``aggregate`` later, far
from its cause.  Before Snakemake plans the jobs of a real run, :func:`heal_plan` checks
every output the plan makes whose job finished (its provenance sidecar exists): the
sidecar must vouch for its bytes, and a record must parse and meet its schema.  A bad one
is reported, naming the file and what is wrong, and moved aside with its sidecar to
``<file>.corrupt``; Snakemake then finds it missing and reruns its job, and only that job
(its downstream tables follow).

What is not checked here: an output without a sidecar is an unfinished job's (killed, or
still running), which Snakemake reruns by itself (``rerun-incomplete``); a missing one is
Snakemake's to make.  Nothing is written on a dry run or any other command that runs no
job (:func:`runs_jobs`), nor while another Snakemake holds the directory's lock: then the
bad outputs are only reported.

A verify, device or prewarm record made again does not make Snakemake remeasure the cells
whose records are sound: those inputs are ``ancient()`` in the rules that read them.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from ssmbench import paths
from ssmbench.paired import validate_paired
from ssmbench.records import (
    DEVICE_KEYS,
    PREWARM_KEYS,
    RecordError,
    parse_json,
    require_keys,
    valid_record_fast,
    validate_record,
    validate_verify,
)

CORRUPT_SUFFIX = ".corrupt"
SNAKEMAKE_LOCKS = Path(".snakemake") / "locks"

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
    if not valid_record_fast(data):
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


def _bytes_only(blob: bytes, path: str) -> None:
    """An output with no reader here (a Chrome trace): its sidecar's hash is the check."""


Check = Callable[[bytes, str], None]


def planned_outputs(plan) -> list[tuple[str, Check]]:
    """Every record and measured output of a live ``plan``, each with its check: device,
    verify, prewarm (CUDA), cells, paired cells, profiles."""
    from ssmbench.prewarm import prewarm_groups

    run = plan.run
    outputs: list[tuple[str, Check]] = [(paths.device(run), _device)]
    outputs += [(paths.verify_record(run, m, b), _verify) for m, b in plan.pairs]
    if plan.device == "cuda":
        outputs += [(paths.prewarm(run, *key), _prewarm) for key in prewarm_groups(plan.cells)]
    outputs += [(paths.cell_record(run, c), _cell) for c in plan.cells]
    outputs += [(paths.paired_record(run, c), _paired) for c in plan.paired]
    for c in sorted(plan.profiled):
        outputs += [(paths.ops(run, c), _ops), (paths.trace(run, c), _bytes_only)]
    return outputs


def unvouched(path: str, blob: bytes) -> str | None:
    """Why ``path``'s provenance sidecar does not vouch for its bytes ``blob``, or None
    when it does: the one place the sidecar is checked (``provenance.vouched`` reads the
    file again and says only yes or no; a ``provenance.check`` may replace this)."""
    sidecar = paths.prov(path)
    try:
        outputs = json.loads(Path(sidecar).read_bytes())["outputs"]
        recorded = outputs.get(path)
        if recorded is None:  # written under another spelling of the path
            mine = os.path.realpath(path)
            recorded = next((d for p, d in outputs.items() if os.path.realpath(p) == mine), None)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return f"its provenance sidecar {sidecar} is unreadable ({type(e).__name__}: {e})"
    if recorded is None:
        return f"its provenance sidecar {sidecar} does not list it"
    found = hashlib.sha256(blob).hexdigest()
    if found != recorded:
        return (
            f"its sha256 is {found[:16]}..., not the {recorded[:16]}... its provenance "
            f"sidecar {sidecar} records (changed since its job wrote it)"
        )
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
    return unvouched(path, blob)


def move_aside(path: str) -> str:
    """Rename ``path`` and its sidecar to ``<name>.corrupt`` (an older one is replaced);
    return the new path of ``path``."""
    aside = path + CORRUPT_SUFFIX
    os.replace(path, aside)
    sidecar = paths.prov(path)
    if os.path.exists(sidecar):
        os.replace(sidecar, sidecar + CORRUPT_SUFFIX)
    return aside


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
    locked = SNAKEMAKE_LOCKS.is_dir() and any(SNAKEMAKE_LOCKS.iterdir())
    bad = []
    for path, check in planned_outputs(plan):
        why = problem(path, check)
        if why is None:
            continue
        bad.append(path)
        if write and not locked:
            aside = move_aside(path)
            print(f"ssm-bench: {path}: {why}; moved aside to {aside}, its job reruns", file=log)
        else:
            print(f"ssm-bench: {path}: {why}; a run will move it aside and rerun its job", file=log)
    if write and not locked:
        outcome.clear_stop(plan.run, log)
    return bad
