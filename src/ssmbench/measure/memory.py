"""Peak memory of one callable, measured from the allocator rather than estimated.

``peak_bytes`` is the most tensor memory live at any moment during one call of ``fn``, above
what was live when the call started.

- CUDA (``method = "cuda_max_memory_allocated"``): the caching allocator's own counters.
  ``reset_peak_memory_stats``, read ``memory_allocated`` at the start, call, synchronize,
  then ``max_memory_allocated - start``.  Counts allocated blocks (requests rounded up to
  512 bytes), not the cache the allocator reserves around them.
- CPU (``method = "cpu_profiler_memory_events"``): the CPU allocator has no peak counter,
  but while ``torch.profiler`` runs with ``profile_memory=True`` it reports every allocation
  and free as a ``[memory]`` event carrying the signed byte count (``+nbytes`` when a
  storage is allocated, ``-nbytes`` when it is freed).  Sorted by time, their running sum is
  the bytes live above the start; its maximum is the peak.  The sizes are the requested
  bytes, exactly: 4 MiB then 2 MiB, first freed, peaks at 6 MiB to the byte.
  Why this: ``torch.cuda.max_memory_allocated`` has no CPU counterpart, and resident-set
  size counts the Python heap and allocator slack, and cannot see a peak between samples.

Limits of the CPU method, each checked in torch 2.13:

- the profiler reports allocations of the calling thread only (the thread where ATen
  allocates every op's outputs and workspaces); a tensor allocated on another Python thread
  is not seen, nor memory a library takes outside the c10 allocator (oneDNN's scratchpad,
  NumPy arrays);
- a free of a tensor allocated before the call is not reported (the reporter never saw its
  size), so a call that frees its inputs reads higher than on CUDA, where that free lowers
  the running total;
- the reporter keeps the size of a block allocated under a memory profiler until the block
  is freed under one: a block freed after its profiler ended leaves its size behind, and a
  later block at the same address has its free reported with that stale size.  A cell
  process profiles memory once, so its measurement starts from an empty table; a process
  that profiled memory before (a test session) can read a free of older memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

CPU_DEVICE_TYPES = ("CPU", "MKLDNN", "IDEEP")  # host memory, as torch.profiler counts it


def peak_of_deltas(deltas_bytes: list[int]) -> tuple[int, int]:
    """``(peak, end)`` of a running sum of signed allocation sizes in time order: the
    highest value it reaches (at least 0, the start) and its final value."""
    live = peak = 0
    for delta in deltas_bytes:
        live += delta
        peak = max(peak, live)
    return peak, live


def tensor_bytes(value: object) -> int:
    """Bytes of the distinct storages reachable from ``value`` through tensors, tuples,
    lists, dicts and dataclasses (a storage shared by several views counts once)."""
    import torch

    seen: dict[tuple[str, int], int] = {}

    def walk(v: object) -> None:
        if isinstance(v, torch.Tensor):
            storage = v.untyped_storage()
            seen[(str(v.device), storage.data_ptr())] = storage.nbytes()
        elif isinstance(v, (tuple, list)):
            for item in v:
                walk(item)
        elif isinstance(v, dict):
            for item in v.values():
                walk(item)
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            for field in dataclasses.fields(v):
                walk(getattr(v, field.name))

    walk(value)
    return sum(seen.values())


def measure_peak(fn: Callable[[], object], device: str, warmup: int = 1) -> dict:
    """Peak memory of one call of ``fn`` on ``device``, after ``warmup`` untraced calls (so
    that one-time allocations such as cuBLAS workspaces stay out).

    Returns:
        ``peak_bytes``: the most bytes live during the call above the start;
        ``end_bytes``: bytes allocated by the call still live when it returned (its output,
        and anything it cached);
        ``alloc_total_bytes``: all bytes allocated during the call, freed or not;
        ``output_bytes``: the storages the returned tensors refer to (see
        :func:`tensor_bytes`; a returned input or view of one counts too);
        ``method``: ``"cuda_max_memory_allocated"`` or ``"cpu_profiler_memory_events"``.
    """
    for _ in range(warmup):
        fn()
    if device == "cuda":
        return _measure_cuda(fn)
    return _measure_cpu(fn)


def _measure_cuda(fn: Callable[[], object]) -> dict:
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    allocated_before = torch.cuda.memory_stats().get("allocated_bytes.all.allocated", 0)
    out = fn()
    torch.cuda.synchronize()
    return {
        "peak_bytes": torch.cuda.max_memory_allocated() - start,
        "end_bytes": torch.cuda.memory_allocated() - start,
        "alloc_total_bytes": (
            torch.cuda.memory_stats().get("allocated_bytes.all.allocated", 0) - allocated_before
        ),
        "output_bytes": tensor_bytes(out),
        "method": "cuda_max_memory_allocated",
    }


def _measure_cpu(fn: Callable[[], object]) -> dict:
    # torch.autograd.profiler's profile, the one torch.profiler.profile wraps: the wrapper's
    # prepare_trace asks hasattr(torch, "_inductor"), which imports Inductor and Dynamo
    # (about 2 s per process on the 2-core VM, most of a decode cell's job)
    from torch.autograd.profiler import profile

    with profile(use_cpu=True, use_kineto=True, profile_memory=True) as prof:
        out = fn()
    deltas = memory_deltas(prof)
    peak, end = peak_of_deltas(deltas)
    return {
        "peak_bytes": peak,
        "end_bytes": end,
        "alloc_total_bytes": sum(d for d in deltas if d > 0),
        "output_bytes": tensor_bytes(out),
        "method": "cpu_profiler_memory_events",
    }


def memory_deltas(prof) -> list[int]:
    """The signed sizes of the host ``[memory]`` events of a finished ``torch.profiler``
    run (``profile_memory=True``), in time order."""
    inner = getattr(prof, "profiler", None) or prof  # torch.profiler's, or autograd's own
    results = getattr(inner, "kineto_results", None)
    if results is None:
        raise RuntimeError("this torch.profiler keeps no kineto results: cannot read memory")
    events = [
        (e.start_ns(), e.nbytes())
        for e in results.events()
        if e.name() == "[memory]" and e.device_type().name in CPU_DEVICE_TYPES
    ]
    events.sort(key=lambda event: event[0])  # stable: ties keep the order recorded
    return [nbytes for _, nbytes in events]
