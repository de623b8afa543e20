"""What every measuring job's process shares: its limits, its device, and how an error
becomes a status.

A block cell (:mod:`ssmbench.cell`), a paired cell (:mod:`ssmbench.paired`), a verify job
(:mod:`ssmbench.verify.run`), a whole-model cell (:mod:`ssmbench.lm.cell`) and a training
job (:mod:`ssmbench.tasks.run`) each run in a process of their own and end as a record
whatever happens (docs/ARCHITECTURE.md, "Status is data"): :func:`error_status` turns what
they raise into ``unavailable``, ``oom`` or ``failed`` with a reason.  The scripts cap a
CPU job's address space first (:func:`cap_address_space`), so an allocation past it is an
``oom`` row instead of swap or the kernel's OOM killer.

Imports torch lazily, inside the functions that need it: the workflow's scripts and
``python -m ssmbench --help`` import this module without it.
"""

from __future__ import annotations

import os
import platform

from ssmbench.provenance import cpu_model


def device_unavailable(device: str) -> str:
    """Why ``device`` cannot be used here, or ``""`` when it can."""
    if device == "cpu":
        return ""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        return "device cuda requested but torch.cuda.is_available() is False on this machine"
    return ""


def cap_address_space(gigabytes: float) -> None:
    """Cap this process's address space at ``gigabytes`` GiB (RLIMIT_AS): an allocation
    past it fails, and the cell ends as ``oom`` instead of driving the machine into swap or
    the kernel's OOM killer.  The cap counts everything mapped (libraries, thread stacks),
    not only tensors, so it must leave room for them (torch itself maps ~2 GiB here)."""
    import resource

    cap = int(gigabytes * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def device_name(device: str) -> str:
    """The device's name as a record keeps it: the GPU's, else the CPU model's."""
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    return cpu_model() or platform.machine()


def set_threads(threads: int | None) -> int:
    """Fix torch's CPU thread count at ``threads`` (default: all cores); returns it."""
    import torch

    threads = threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    return threads


def is_oom(error: BaseException) -> bool:
    """CUDA out-of-memory, or the CPU allocator refusing an allocation."""
    if isinstance(error, MemoryError):
        return True
    import torch

    if isinstance(error, torch.cuda.OutOfMemoryError):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and (
        "can't allocate memory" in text or "out of memory" in text.lower()
    )


def is_unavailable(error: BaseException) -> bool:
    """A backend that cannot run here (e.g. torch.compile without a working compiler)."""
    from ssmbench.models.common import BackendUnavailable

    return isinstance(error, BackendUnavailable)


def error_status(error: BaseException) -> tuple[str, str]:
    """(status, reason) of an error raised while measuring: ``unavailable`` for a backend
    that cannot run here, ``oom`` for an allocation refused, ``failed`` otherwise."""
    if is_unavailable(error):
        return "unavailable", str(error)
    return ("oom" if is_oom(error) else "failed"), f"{type(error).__name__}: {error}".strip()
