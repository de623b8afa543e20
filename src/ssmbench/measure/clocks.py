"""Optional GPU clock locking through ``nvidia-smi``: off unless a run asks for it.

The benchmark study asks for GPU clocks "locked when possible": a locked SM clock takes
boost and thermal drift out of the timings.  On a rented or shared machine changing the
clocks is forbidden (and needs root), so nothing here runs by itself: a run script that
owns its machine calls

    python -m ssmbench clocks lock      # nvidia-smi -lgc MAX,MAX  (the highest supported)
    export SSMBENCH_CLOCKS_LOCKED=1
    ...                                 # the workflow
    python -m ssmbench clocks restore   # nvidia-smi -rgc

and every cell record says whether it ran locked (``clocks_locked``, read by
:func:`clocks_locked` from the environment the locker's caller exported).  ``nvidia-smi``
is found on PATH (the tests put a fake one there).
"""

from __future__ import annotations

import os
import subprocess

__all__ = [
    "ENV_VAR",
    "ClockError",
    "clocks_locked",
    "lock",
    "max_graphics_clock_mhz",
    "restore",
    "status",
]

ENV_VAR = "SSMBENCH_CLOCKS_LOCKED"
_TRUE = ("1", "true", "yes", "on")


class ClockError(RuntimeError):
    """nvidia-smi is missing or refused (e.g. not root, or a shared machine)."""


def _smi(*args: str, timeout_s: float = 30.0) -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, timeout=timeout_s
        )
    except FileNotFoundError as e:
        raise ClockError("nvidia-smi not found on PATH") from e
    except subprocess.TimeoutExpired as e:
        raise ClockError(f"nvidia-smi {' '.join(args)} timed out after {timeout_s:g} s") from e
    if out.returncode != 0:
        message = (out.stderr or out.stdout).strip().splitlines()
        raise ClockError(
            f"nvidia-smi {' '.join(args)} failed (exit {out.returncode}): "
            + (message[-1] if message else "no message")
        )
    return out.stdout


def max_graphics_clock_mhz(device_index: int = 0) -> int:
    """The highest graphics (SM) clock GPU ``device_index`` supports, in MHz
    (``nvidia-smi --query-supported-clocks=graphics``)."""
    text = _smi(
        "-i",
        str(device_index),
        "--query-supported-clocks=graphics",
        "--format=csv,noheader,nounits",
    )
    clocks = [int(line.strip()) for line in text.splitlines() if line.strip().isdigit()]
    if not clocks:
        raise ClockError(f"nvidia-smi listed no supported graphics clocks: {text.strip()!r}")
    return max(clocks)


def lock(device_index: int = 0) -> int:
    """Lock GPU ``device_index``'s graphics clock at its highest supported value
    (``nvidia-smi -lgc MAX,MAX``); returns that clock in MHz.  Needs root."""
    mhz = max_graphics_clock_mhz(device_index)
    _smi("-i", str(device_index), "-lgc", f"{mhz},{mhz}")
    return mhz


def restore(device_index: int = 0) -> None:
    """Undo :func:`lock`: let the driver manage the graphics clock again (``-rgc``)."""
    _smi("-i", str(device_index), "-rgc")


def status(device_index: int = 0) -> dict:
    """The current and highest SM clocks (MHz) and whether this environment says the run
    locked them (:func:`clocks_locked`)."""
    text = _smi(
        "-i",
        str(device_index),
        "--query-gpu=clocks.sm,clocks.max.sm",
        "--format=csv,noheader,nounits",
    )
    current, highest = (int(v.strip()) for v in text.strip().splitlines()[0].split(","))
    return {"sm_clock_mhz": current, "max_sm_clock_mhz": highest, "clocks_locked": clocks_locked()}


def clocks_locked(environ: dict | None = None) -> bool:
    """Whether the run locked the GPU clocks: ``SSMBENCH_CLOCKS_LOCKED`` set to a true value
    (1, true, yes, on) by the script that called :func:`lock`."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, "")
    return value.strip().lower() in _TRUE
