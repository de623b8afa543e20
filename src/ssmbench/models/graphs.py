"""A decode step captured once in a CUDA graph and replayed: the ``torch-graph`` and
``fused-graph`` backends (:data:`ssmbench.registry.GRAPH_BACKENDS`).

A graph backend builds its model with its base backend (``torch``, ``fused``) and times
that backend's one-token step as replays of a graph captured once (:func:`graph_step`):
one launch for the whole step instead of one per kernel.  The replay
is checked equal to the eager step before anything is timed, and the memory the capture
took is measured (:class:`GraphReplay`), so a cell counts it.  CUDA only
(:func:`graph_unavailable`); :mod:`ssmbench.cell` makes a graph cell's work with it.
"""

from __future__ import annotations

import torch

from ssmbench.models import DTYPES
from ssmbench.models.common import BackendUnavailable
from ssmbench.numerics import compare
from ssmbench.registry import GRAPH_BACKENDS


class GraphReplay:
    """The replay of a captured decode step, holding everything the graph reads and writes.

    A CUDA graph replays fixed device addresses: its static inputs (``x_t``, the cache)
    and its outputs (``outputs``, the step's y and new cache, in the graph's private memory
    pool) must stay alive as long as the graph is replayed, so they are attributes of this
    object, which is the cell's timed callable, not only names in a closure.

    ``pool_bytes`` is the memory the capture took on the device: the growth of the CUDA
    caching allocator's reserved bytes across the capture (the private pool's segments,
    intermediates freed back into the pool included), at least the growth of its allocated
    bytes (the outputs, still live).  Replays allocate nothing, so this is the graph's
    footprint beyond the weights and the cache; the cell counts it in ``peak_bytes``.
    """

    def __init__(self, graph, x_t, cache, outputs, pool_bytes: float):
        self.graph, self.x_t, self.cache, self.outputs = graph, x_t, cache, outputs
        self.pool_bytes = float(pool_bytes)

    def __call__(self):
        self.graph.replay()
        return self.outputs


def graph_step(model, x_t, cache, warmup: int = 3, cuda=None) -> GraphReplay:
    """``model.step(x_t, cache)`` captured once in a CUDA graph; returns its
    :class:`GraphReplay`.

    The step reads only static buffers (x_t and the cache, which every sample steps from)
    and writes its outputs into the graph's own memory pool, so one replay is one decode
    step.  Warm-up runs on a side stream first (lazy initialisation, Triton autotuning and
    cuBLAS workspaces stay out of the capture, as the CUDA-graph notes of PyTorch advise);
    then one replay is checked equal to the eager step before anything is timed: a
    mismatch raises, and the cell is ``failed`` with the error.  ``cuda`` replaces
    ``torch.cuda`` (the tests pass a fake with the same few names).
    """
    if cuda is None:
        if not x_t.is_cuda:
            raise BackendUnavailable("CUDA graphs need a CUDA device")
        cuda = torch.cuda
    with torch.inference_mode():
        side = cuda.Stream()
        side.wait_stream(cuda.current_stream())
        with cuda.stream(side):
            for _ in range(warmup):
                eager_y, _ = model.step(x_t, cache)
        cuda.current_stream().wait_stream(side)
        cuda.synchronize()
        allocated, reserved = cuda.memory_allocated(), cuda.memory_reserved()
        graph = cuda.CUDAGraph()
        with cuda.graph(graph):
            outputs = model.step(x_t, cache)
        cuda.synchronize()
        pool_bytes = max(cuda.memory_reserved() - reserved, cuda.memory_allocated() - allocated, 0)
        graph.replay()
        cuda.synchronize()
        dtype = {v: k for k, v in DTYPES.items()}[eager_y.dtype]  # the tolerance row
        check = compare("graph_step", eager_y, outputs[0], dtype)
        if not check.ok:
            raise RuntimeError(f"graph replay differs from the eager step: {check}")
    return GraphReplay(graph, x_t, cache, outputs, pool_bytes)


def graph_unavailable(backend: str, device: str) -> str:
    """Why a cell of ``backend`` cannot run on ``device`` because it is a CUDA-graph
    backend off CUDA ("" otherwise)."""
    if backend in GRAPH_BACKENDS and device != "cuda":
        return f"{backend}: CUDA graphs need a CUDA device (this run's device is {device})"
    return ""
