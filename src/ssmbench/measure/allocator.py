"""The host allocator policy of a measuring process.

PyTorch's CPU tensors come from the C library's ``malloc``.  glibc serves a large block
(from 128 KiB, a threshold it raises as it sees large frees, up to 32 MiB) with a fresh
``mmap`` and unmaps it when it is freed, and it trims the top of its heap when enough lies
free there.  A PyTorch program that allocates megabytes per call then page-faults its memory
in again on every call.  On this project's 2-core VM, per call at T = 4096:

=========================  =======================  ======================
                           glibc defaults           freed memory kept
=========================  =======================  ======================
Mamba-3 prefill, torch     4 900-11 600 faults,     0 faults, 9.6 ms
                           15-24 ms
attention prefill, naive   270 000 faults, 430 ms   22 000 faults, 208 ms
=========================  =======================  ======================

and which of the two a process got depended on its allocation history, so that timings of
the same cell differed up to 2.4x from run to run.

``retain`` (the default of every preset) keeps freed memory in the process, as PyTorch's
caching allocator does on GPUs: no block is served by ``mmap`` (``M_MMAP_MAX = 0``: every
block comes from the heap, which ``mallopt`` cannot otherwise arrange for blocks over
32 MiB), and the heap is trimmed only when 1 GiB lies free at its top.  ``system`` leaves
the C library's defaults.  Kept memory settles over a few calls, not at once: PyTorch asks
for 64-byte aligned blocks, and glibc 2.36 leaves small pieces between the blocks it frees,
so now and then a warm Mamba-3 prefill still faults 500-1 000 pages (its cold call:
13 000-14 000), and a loop that makes and frees one 64 MiB tensor takes up to nine calls.
The policy is set once, before the cell allocates anything, and each record names it
(``host_allocator``).  Memory peaks are unaffected: they are read from PyTorch's allocator
events or the CUDA allocator, not from the process's resident size (which, with memory
kept, can stay up to 1 GiB above the live tensors).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import sys

POLICIES = ("retain", "system")

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
TRIM_THRESHOLD = 1 << 30
_KEPT = ""  # what set_host_allocator("retain") put in force in this process, if it did


def c_library() -> str:
    """The C library this process runs on, as ``platform.libc_ver`` names it
    ("glibc 2.36"), or "" where it cannot tell: what the defaults do depends on it."""
    name, version = platform.libc_ver()
    return f"{name} {version}".strip()


def set_host_allocator(policy: str = "retain") -> str:
    """Apply ``policy`` to this process's ``malloc`` and say what is in force, for the
    record: "glibc 2.36, freed memory kept (...)", or "system (glibc 2.36)", or "system"
    with the reason it is."""
    global _KEPT
    if policy not in POLICIES:
        raise ValueError(f"host_allocator must be one of {POLICIES}, got {policy!r}")
    if policy == "system":  # glibc's dynamic thresholds cannot be restored once set
        if _KEPT:
            return f"{_KEPT} (retain was set earlier in this process)"
        library = c_library()
        return f"system ({library})" if library else "system"
    if not sys.platform.startswith("linux"):
        return f"system (no glibc on {sys.platform})"
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return "system (the C library has no mallopt)"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(M_MMAP_MAX, 0) != 1:
        return "system (mallopt refused M_MMAP_MAX)"
    if mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        return "system (mallopt refused M_TRIM_THRESHOLD)"
    kept = f"M_MMAP_MAX=0, M_TRIM_THRESHOLD={TRIM_THRESHOLD >> 30} GiB"
    _KEPT = f"{c_library() or 'the C library'}, freed memory kept ({kept})"
    return _KEPT
