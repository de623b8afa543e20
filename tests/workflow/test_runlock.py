"""One run at a time in one checkout (ssmbench.runlock): a second run is refused naming
the first, a stale lock is explained or cleared, and a dry run, a lint or a finished run
leave no lock behind."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from ssmbench import runlock
from tests.conftest import snakemake

# one real job of the ci preset (about ten seconds: verification of a small backend)
ONE_JOB = ("results/ci/verify/attention/naive.json", "--config", "preset=ci")


def fake_lock(root: Path, pid: int, host: str | None = None, **fields) -> runlock.Holder:
    """A lock file as another run would have left it."""
    holder = runlock.Holder(
        pid=pid,
        host=host or socket.gethostname(),
        run=fields.get("run", "other"),
        started=fields.get("started", "2026-12-01T09:30:00+00:00"),
        command=fields.get("command", "snakemake --cores all --config run=other"),
        proc_start=fields.get("proc_start", runlock._process_start(pid)),
    )
    (root / runlock.LOCK).parent.mkdir(parents=True, exist_ok=True)
    (root / runlock.LOCK).write_text(json.dumps(asdict(holder)))
    return holder


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_run_is_refused_while_another_run_of_the_checkout_holds_it(workflow_copy):
    fake_lock(workflow_copy, os.getpid(), run="cpu-long")  # this test's process: alive
    out = snakemake(workflow_copy, *ONE_JOB)
    assert out.returncode == 1
    err = out.stderr
    assert "another run of this checkout is in progress: run 'cpu-long'" in err
    assert f"pid {os.getpid()} on {socket.gethostname()}" in err
    assert "started 2026-12-01T09:30:00+00:00" in err and "--config run=other" in err
    assert "Traceback" not in err  # the message alone
    assert not (workflow_copy / ONE_JOB[0]).exists()  # nothing ran
    assert json.loads((workflow_copy / runlock.LOCK).read_text())["pid"] == os.getpid()


def test_a_dry_run_beside_a_run_is_allowed_and_says_the_run_is_in_progress(workflow_copy):
    fake_lock(workflow_copy, os.getpid())
    out = snakemake(workflow_copy, "-n", *ONE_JOB)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"run 'other' (pid {os.getpid()}" in out.stderr and "is in progress" in out.stderr


def test_a_stale_lock_of_a_dead_run_is_cleared_with_a_note_and_the_run_goes_on(
    workflow_copy,
):
    """A run killed with SIGKILL leaves both locks, ours and Snakemake's (which would refuse
    every run until `snakemake --unlock`): the next run proves ours stale, clears both
    while the Snakefile is read, says so, and goes on."""
    pid = dead_pid()
    fake_lock(workflow_copy, pid, proc_start=None, run="killed")
    snakemake_locks = workflow_copy / runlock.SNAKEMAKE_LOCKS
    snakemake_locks.mkdir(parents=True)
    (snakemake_locks / "0.output.lock").write_text(str(workflow_copy / ONE_JOB[0]) + "\n")
    (snakemake_locks / "0.input.lock").write_text("")
    out = snakemake(workflow_copy, *ONE_JOB)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"cleared a stale run lock: run 'killed' (pid {pid} on {socket.gethostname()}" in (
        out.stderr
    )
    assert "cleared Snakemake's own locks (2 files" in out.stderr
    assert "--unlock" not in out.stderr
    assert (workflow_copy / ONE_JOB[0]).is_file()
    assert not (workflow_copy / runlock.LOCK).exists()  # released at the end


def test_a_lock_whose_pid_now_belongs_to_a_later_process_is_stale(tmp_path, capsys):
    start = runlock._process_start(os.getpid())
    if start is None:
        pytest.skip("no /proc here: a reused pid cannot be told")
    fake_lock(tmp_path, os.getpid(), proc_start=start - 1, run="rebooted")
    holder = runlock.take("ci", tmp_path)
    assert holder.pid == os.getpid() and holder.run == "ci"
    assert "cleared a stale run lock: run 'rebooted'" in capsys.readouterr().err
    assert runlock.release(tmp_path) and not (tmp_path / runlock.LOCK).exists()


def test_a_lock_from_another_host_is_refused_with_the_command_that_clears_it(tmp_path):
    fake_lock(tmp_path, 1, host="gpu-node-7")
    with pytest.raises(runlock.RunLocked) as refused:
        runlock.take("ci", tmp_path)
    message = str(refused.value)
    assert "run 'other' (pid 1 on gpu-node-7" in message and "another host" in message
    assert f"rm {(tmp_path / runlock.LOCK).resolve()}" in message
    assert (tmp_path / runlock.LOCK).is_file()  # not ours to clear


def test_an_unreadable_lock_is_refused_not_overwritten(tmp_path):
    (tmp_path / runlock.LOCK).parent.mkdir()
    (tmp_path / runlock.LOCK).write_text("{half a lock")
    with pytest.raises(runlock.RunLocked, match="cannot be read") as refused:
        runlock.take("ci", tmp_path)
    assert f"rm {(tmp_path / runlock.LOCK).resolve()}" in str(refused.value)
    assert (tmp_path / runlock.LOCK).read_text() == "{half a lock"


def test_release_leaves_a_lock_this_process_does_not_hold(tmp_path):
    fake_lock(tmp_path, os.getppid())
    assert not runlock.release(tmp_path)
    assert (tmp_path / runlock.LOCK).is_file()


def test_a_dry_run_and_a_lint_take_no_lock(workflow_copy):
    for args in (("-n", *ONE_JOB), ("--lint", "--config", "preset=ci")):
        snakemake(workflow_copy, *args)
        assert not (workflow_copy / runlock.LOCK).exists(), args


def test_two_real_runs_with_different_names_the_second_is_refused(workflow_copy):
    """A ci run in progress, then a run named otherwise: Snakemake's own lock would let it
    start (no file in common); the run lock refuses it, naming the first."""
    import time

    first = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "1", "--config", "preset=ci"],
        cwd=workflow_copy,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not (workflow_copy / runlock.LOCK).exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert first.poll() is None, "the first run ended before it could be overlapped"
        second = "results/second/verify/attention/naive.json"
        out = snakemake(workflow_copy, second, "--config", "preset=ci", "run=second")
        assert out.returncode == 1
        assert f"in progress: run 'ci' (pid {first.pid}" in out.stderr
        assert not (workflow_copy / "results" / "second").exists()
    finally:
        first.terminate()
        first.wait(timeout=120)
    # stopped by SIGTERM: released on the way out, or left stale (then cleared next time)
    lock = workflow_copy / runlock.LOCK
    assert not lock.exists() or runlock.alive(runlock.read(workflow_copy)) is False
