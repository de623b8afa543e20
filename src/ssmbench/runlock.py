"""One run of the workflow at a time in one checkout.

Two runs in one checkout share its cores (a CPU cell takes all of them), its GPU, its
Triton cache and its logs, so each would time the other.  Snakemake's own lock does not
stop them: it covers the files of one invocation (runs with different ``run=`` names do
not overlap), and whichever invocation ends first deletes the whole ``.snakemake/locks/``
folder, the other run's locks with it.  So the workflow holds a lock of its own:

- taken by the Snakefile's ``onstart`` hook, which Snakemake calls in its main process
  when a real run starts: not for ``-n``, ``--lint``, ``--report``, ``--unlock`` or a run
  with nothing to do, and not in a job's process (those run with ``--no-hooks``);
- released by ``onsuccess`` and ``onerror``, and at the process's exit as a backstop;
- a file, ``.snakemake/ssmbench.lock``, naming its holder (pid, host, the process's start
  time, run name, start time, command line), created whole or not at all.

A second run is refused with the holder named.  A lock whose holder has gone (killed,
or a power loss) is stale.  On the same host that is provable: no process has the pid, or
the process that has it started at another time (the pid was reused); such a lock is
cleared, with a note naming the run that left it, and so are the locks Snakemake took for
that run (which would otherwise refuse every run until ``snakemake --unlock``), while the
Snakefile is parsed, before Snakemake looks at them.  A lock taken on another host (a
checkout on a shared disk) cannot be checked from here: the run is refused, with the
command that clears the lock once that run is known to be over.
"""

from __future__ import annotations

import atexit
import json
import os
import shlex
import socket
import sys
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

LOCK = Path(".snakemake") / "ssmbench.lock"
# Snakemake's own locks of the files one invocation writes: a killed run leaves them, and
# Snakemake then refuses every run until `snakemake --unlock`
SNAKEMAKE_LOCKS = Path(".snakemake") / "locks"


class RunLocked(RuntimeError):
    """Another run holds this checkout; the message names it and what to do."""


@dataclass(frozen=True)
class Holder:
    """Who holds the lock."""

    pid: int
    host: str
    run: str
    started: str  # ISO 8601, local time with offset
    command: str
    # the process's start in clock ticks since boot (/proc/<pid>/stat), which tells a live
    # holder from a later process given the same pid; None where there is no /proc
    proc_start: int | None = None

    def describe(self) -> str:
        return f"run {self.run!r} (pid {self.pid} on {self.host}, started {self.started})"


def _process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot; None if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the fields after the command name, which is in parentheses and may hold spaces:
    # field 3 (state) is the first of them, field 22 (starttime) the twentieth
    return int(stat.rsplit(")", 1)[1].split()[19])


def alive(holder: Holder) -> bool | None:
    """Whether ``holder``'s process still runs: True or False on this host, None when
    it ran on another host (nothing here can tell)."""
    if holder.host != socket.gethostname():
        return None
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    now = _process_start(holder.pid)
    if holder.proc_start is not None and now is not None and now != holder.proc_start:
        return False  # the pid belongs to a later process
    return True


def read(root: str | os.PathLike = ".") -> Holder | None:
    """The lock's holder, or None when nothing holds it.  Raises RunLocked when the
    file is there but says nothing readable (edited by hand, a full disk)."""
    path = Path(root, LOCK)
    try:
        return Holder(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as error:
        raise RunLocked(
            f"ssm-bench: the run lock {path.resolve()} cannot be read ({error}).\n"
            f"If no other run of this checkout is in progress, clear it with:\n"
            f"    rm {shlex.quote(str(path.resolve()))}"
        ) from None


def take(run: str, root: str | os.PathLike = ".") -> Holder:
    """Take the lock for this process's run ``run``, or raise RunLocked naming the run that
    holds it.  A stale lock of this host is cleared first, with a note on stderr."""
    path = Path(root, LOCK)
    path.parent.mkdir(parents=True, exist_ok=True)
    me = Holder(
        pid=os.getpid(),
        host=socket.gethostname(),
        run=run,
        started=datetime.now().astimezone().isoformat(timespec="seconds"),
        command=shlex.join(sys.argv),
        proc_start=_process_start(os.getpid()),
    )
    for _ in range(3):  # a stale lock cleared, then another run may take it first
        if _create(path, me):
            atexit.register(release, root)
            return me
        holder = read(root)
        if holder is None:  # released between our two looks
            continue
        state = alive(holder)
        if state is None:
            raise RunLocked(_other_host(path, holder))
        if state:
            raise RunLocked(_in_progress(path, holder))
        _clear_stale(root, holder)
    raise RunLocked(f"ssm-bench: the run lock {path.resolve()} keeps changing hands; try again")


def take_or_exit(run: str, root: str | os.PathLike = ".") -> Holder:
    """:func:`take`, for the Snakefile's ``onstart`` hook: a refusal ends Snakemake with
    its message alone (exit status 1), not a traceback; Snakemake still removes its own
    locks of this invocation on the way out."""
    try:
        return take(run, root)
    except RunLocked as refusal:
        sys.exit(str(refusal))


def release(root: str | os.PathLike = ".") -> bool:
    """Remove the lock if this process holds it; whether it did."""
    path = Path(root, LOCK)
    try:
        holder = read(root)
    except RunLocked:
        return False
    if holder is None or holder.pid != os.getpid() or holder.host != socket.gethostname():
        return False
    path.unlink(missing_ok=True)
    return True


def note_if_held(root: str | os.PathLike = ".") -> None:
    """On stderr, what the lock says, if anything, before Snakemake's own lock speaks: it
    refuses a run of the same files before ``onstart`` with "Directory cannot be locked
    ... --unlock", which is wrong advice while that run is alive (``--unlock`` deletes its
    locks) and the cure once it was killed."""
    try:
        holder = read(root)
    except RunLocked:
        return
    if holder is None or holder.pid == os.getpid():
        return
    state = alive(holder)
    if state:
        print(
            f"ssm-bench: {holder.describe()} is in progress in this checkout: a run started "
            "now is refused (and `snakemake --unlock` would delete that run's own locks)",
            file=sys.stderr,
        )
    elif state is False:
        # the run that held this checkout is gone (killed, or the machine went down): the
        # locks Snakemake took for it are stale too, and no other real run can hold any
        # (it would hold ours), so both go before Snakemake looks at its own
        _clear_stale(root, holder)
        cleared = clear_snakemake_locks(root)
        if cleared:
            print(
                f"ssm-bench: cleared Snakemake's own locks ({cleared} files in "
                f"{Path(root, SNAKEMAKE_LOCKS)}), which the stopped run left",
                file=sys.stderr,
            )


def clear_snakemake_locks(root: str | os.PathLike = ".") -> int:
    """Remove Snakemake's lock files of this checkout (what ``--unlock`` removes); how
    many.  Only for a run proven stopped: a live run's locks keep its files its own."""
    folder = Path(root, SNAKEMAKE_LOCKS)
    count = 0
    for lock in folder.glob("*.lock") if folder.is_dir() else ():
        lock.unlink(missing_ok=True)
        count += 1
    return count


def _create(path: Path, me: Holder) -> bool:
    """Write the lock file whole, unless one exists: the holder goes to a file of its own,
    which is then hard-linked to the lock's name (a link never replaces a file)."""
    mine = path.with_name(f"{path.name}.{me.pid}")
    mine.write_text(json.dumps(asdict(me), indent=1) + "\n")
    try:
        os.link(mine, path)
        return True
    except FileExistsError:
        return False
    finally:
        mine.unlink()


def _clear_stale(root: str | os.PathLike, holder: Holder) -> None:
    """Remove the stale lock of ``holder``, unless another run replaced it meanwhile."""
    path = Path(root, LOCK)
    try:
        if read(root) != holder:
            return
        path.unlink()
    except (FileNotFoundError, RunLocked):
        return
    print(
        f"ssm-bench: cleared a stale run lock: {holder.describe()} is no longer running "
        f"(killed, or the machine went down) and left {path}",
        file=sys.stderr,
    )


def _in_progress(path: Path, holder: Holder) -> str:
    return (
        f"ssm-bench: another run of this checkout is in progress: {holder.describe()}, "
        f"command: {holder.command}\n"
        "Two runs in one checkout would time each other (they share its cores, GPU, caches "
        f"and logs).  Wait for it to end, or stop it (kill {holder.pid}); a second run can "
        "go in another checkout (git worktree add).  The lock: "
        f"{path.resolve()}"
    )


def _other_host(path: Path, holder: Holder) -> str:
    return (
        f"ssm-bench: this checkout is locked by {holder.describe()}, on another host, whose "
        "process cannot be checked from here.  If that run is over (a stale lock, left by "
        "a killed run or a power loss), clear the lock with:\n"
        f"    rm {shlex.quote(str(path.resolve()))}"
    )
