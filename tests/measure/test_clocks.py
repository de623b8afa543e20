"""Opt-in GPU clock locking (ssmbench.measure.clocks) through a fake nvidia-smi on PATH."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from ssmbench.measure import clocks

FAKE_SMI = """#!/bin/sh
echo "$@" >> "{log}"
case "$*" in
  *--query-supported-clocks=graphics*) printf '1980\\n1755\\n345\\n' ;;
  *--query-gpu=clocks.sm,clocks.max.sm*) printf '1980, 1980\\n' ;;
  *-lgc*) [ -n "{refuse}" ] && {{ echo "Insufficient Permissions" >&2; exit 4; }} ;;
esac
exit 0
"""


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """A fake nvidia-smi first on PATH; returns a function reading the calls it got."""

    def install(refuse: bool = False):
        log = tmp_path / "calls.log"
        script = tmp_path / "bin" / "nvidia-smi"
        script.parent.mkdir(exist_ok=True)
        script.write_text(FAKE_SMI.format(log=log, refuse="1" if refuse else ""))
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
        return lambda: log.read_text().splitlines() if log.exists() else []

    return install


def test_lock_sets_the_highest_supported_clock_and_restore_resets(fake_smi):
    calls = fake_smi()
    assert clocks.lock() == 1980
    clocks.restore()
    assert calls() == [
        "-i 0 --query-supported-clocks=graphics --format=csv,noheader,nounits",
        "-i 0 -lgc 1980,1980",
        "-i 0 -rgc",
    ]


def test_a_refused_lock_is_an_error_with_nvidia_smis_message(fake_smi):
    fake_smi(refuse=True)
    with pytest.raises(clocks.ClockError, match="exit 4.*Insufficient Permissions"):
        clocks.lock()


def test_no_nvidia_smi_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(clocks.ClockError, match="nvidia-smi not found"):
        clocks.restore()


@pytest.mark.parametrize(
    "value, locked", [("1", True), ("true", True), ("0", False), ("", False), (None, False)]
)
def test_clocks_locked_reads_the_environment(value, locked):
    environ = {} if value is None else {clocks.ENV_VAR: value}
    assert clocks.clocks_locked(environ) is locked


def test_command_line_status_and_lock(fake_smi):
    calls = fake_smi()
    env = {**os.environ, clocks.ENV_VAR: "1"}
    out = subprocess.run(
        [sys.executable, "-m", "ssmbench", "clocks", "status"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        '{"sm_clock_mhz": 1980, "max_sm_clock_mhz": 1980, "clocks_locked": true}'
    )
    out = subprocess.run(
        [sys.executable, "-m", "ssmbench", "clocks", "lock", "--gpu", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "locked at 1980 MHz" in out.stdout
    assert calls()[-1] == "-i 0 -lgc 1980,1980"
