"""How many operators one call dispatches: the ``n_ops`` of a cell's record, which the
dispatch floor multiplies by the calibrated cost of one dispatch
(:func:`ssmbench.measure.ceilings.measure_dispatch`).

A count is taken on one more call of the cell's callable, after timing and outside it, so
counting never slows a timed call.  What counts depends on where the cost is paid:

- CPU (``kind = "aten_ops"``): the ATen operators the call dispatches, counted by a
  ``TorchDispatchMode`` (:func:`aten_counter`): each call that reaches its
  ``__torch_dispatch__`` is one.  A composite operator (CompositeImplicitAutograd:
  ``linear``, ``einsum``, ``matmul``, ``rms_norm``) is decomposed inside the mode, so its
  parts count and not it: ``nn.Linear`` on a 2-D input is ``t`` + ``addmm``, 2.  Without
  this a composite op reaches the mode whole under ``torch.inference_mode`` (where the
  autograd key that decomposes it is skipped) and in parts outside it; decomposed, the
  count is the same in both.  Views (``view``, ``t``, ``select``, ``unsqueeze``) and
  factories (``zeros``, ``randn``) count: each is a trip through the dispatcher.  What
  an operator's own kernel calls inside (``convolution``'s backend kernels) is not seen,
  nor Python work between operators.
- CUDA, eager (``kind = "cuda_kernels"``): the kernels the call launches, counted as the
  GPU kernel events ``torch.profiler`` records over the call (:func:`count_cuda_kernels`;
  memcpy and memset events are not kernels).  Each eager kernel is one launch.
- CUDA graph replay (``kind = "graph_kernels"``): the kernels one replay runs, counted the
  same way over one replay: the profiler records each kernel of a replayed graph.  A GPU
  call in which the profiler sees no kernel at all is not counted (None, and the method
  says so): every cell launches some, so the profiler did not see them.

A torch.compile'd call on a CPU is not counted (``n_ops`` None): while a dispatch mode is
active, Dynamo runs the function's eager code, so the mode would count ops the compiled
call never dispatches (its generated C++ calls its kernels directly).

Torch is imported lazily, so the module's names are importable without it.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = [
    "KINDS",
    "OpCount",
    "aten_counter",
    "count_aten_ops",
    "count_cuda_kernels",
    "count_ops",
    "kernel_names",
]

# n_ops_kind: what one unit of n_ops is (the record schema's enum)
KINDS = ("aten_ops", "cuda_kernels", "graph_kernels")

ATEN_METHOD = (
    "ATen ops one untimed call dispatches: every call reaching a TorchDispatchMode's "
    "__torch_dispatch__, composite (CompositeImplicitAutograd) ops decomposed into the ops "
    "they call, views and factories included"
)
KERNEL_METHOD = (
    "GPU kernel events torch.profiler records over one untimed {what} (memcpy and memset "
    "not counted)"
)
NO_KERNELS = (
    "not counted: torch.profiler recorded no GPU kernel over the {what} (CUPTI not "
    "tracing, or not inside a graph)"
)
NOT_COMPILED = (
    "not counted: under a TorchDispatchMode torch.compile runs the eager code, whose ops "
    "are not the compiled call's"
)
# the device events that move or set memory rather than run a kernel (CUPTI's names)
NOT_KERNELS = ("Memcpy", "Memset")


@dataclass(frozen=True)
class OpCount:
    """A count of one call: ``n_ops`` (None when it could not be counted), its ``kind``
    (one of :data:`KINDS`), ``method`` (one sentence: how, or why not), and ``by_name``
    (operator or kernel name -> count; its values sum to ``n_ops``)."""

    n_ops: int | None
    kind: str
    method: str
    by_name: dict[str, int]


@functools.cache
def _aten_counter_class() -> type:
    """The class of :func:`aten_counter`'s mode, made on first use: it subclasses torch's
    ``TorchDispatchMode``, and this module does not import torch until it counts."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class AtenCounter(TorchDispatchMode):
        """Counts each ATen op reaching ``__torch_dispatch__``, by name (``aten.add.Tensor``),
        in :attr:`counts`; a composite op is decomposed inside the mode (re-entered, so its
        parts reach it too) and not counted itself."""

        def __init__(self):
            super().__init__()
            self.counts: Counter[str] = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            with self:  # the handler runs with the mode popped: the parts must see it
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
            self.counts[str(func)] += 1
            return func(*args, **kwargs)

    return AtenCounter


def aten_counter():
    """A ``TorchDispatchMode`` counting the ATen ops run under it: ``with aten_counter() as
    mode: ...``, then ``mode.counts`` (op name -> count)."""
    return _aten_counter_class()()


def count_aten_ops(fn: Callable[[], object]) -> OpCount:
    """The ATen ops one call of ``fn`` dispatches (the module's docstring says which)."""
    with aten_counter() as mode:
        fn()
    counts = dict(mode.counts)
    return OpCount(sum(counts.values()), "aten_ops", ATEN_METHOD, counts)


def kernel_names(events: Iterable) -> list[str]:
    """The names of the GPU kernel events among ``events`` (torch.profiler's kineto
    events, each with ``device_type()`` and ``name()``): device events on CUDA whose name
    is not a memcpy or memset."""
    return [
        e.name()
        for e in events
        if e.device_type().name == "CUDA" and not e.name().startswith(NOT_KERNELS)
    ]


def _kineto_events(fn: Callable[[], object]) -> list:
    """The kineto events of one call of ``fn`` under torch's profiler with CUDA activity
    (torch.autograd.profiler's: torch.profiler.profile imports Inductor on entering)."""
    import torch
    from torch.autograd.profiler import profile

    with profile(use_device="cuda", use_kineto=True) as prof:
        fn()
        torch.cuda.synchronize()
    return list(prof.kineto_results.events())


def count_cuda_kernels(
    fn: Callable[[], object], graph: bool = False, events: Callable | None = None
) -> OpCount:
    """The GPU kernels one call of ``fn`` runs (``graph``: ``fn`` replays a CUDA graph).
    ``events(fn)`` returns the profiler's events of one call (default: torch's profiler;
    the tests pass a fake)."""
    names = kernel_names((events or _kineto_events)(fn))
    kind = "graph_kernels" if graph else "cuda_kernels"
    what = "replay of the captured graph" if graph else "call"
    if not names:  # every GPU cell launches kernels: the profiler did not see them
        return OpCount(None, kind, NO_KERNELS.format(what=what), {})
    return OpCount(len(names), kind, KERNEL_METHOD.format(what=what), dict(Counter(names)))


def count_ops(
    fn: Callable[[], object], device: str, graph: bool = False, compiled: bool = False
) -> OpCount:
    """:func:`count_aten_ops` on a CPU, :func:`count_cuda_kernels` on CUDA (``graph``: ``fn``
    replays a CUDA graph).  A count of None whose method says why where the count would be
    wrong or failed (a count never fails a cell): ``compiled`` code (torch.compile) on a
    CPU, which runs its eager code instead while a dispatch mode is active, and any error
    while counting."""
    kind = "aten_ops" if device != "cuda" else ("graph_kernels" if graph else "cuda_kernels")
    if compiled and device != "cuda":
        return OpCount(None, kind, NOT_COMPILED, {})
    try:
        if device == "cuda":
            return count_cuda_kernels(fn, graph=graph)
        return count_aten_ops(fn)
    except Exception as e:  # the cell is measured; its count is a detail
        return OpCount(None, kind, f"not counted: {type(e).__name__}: {e}", {})
