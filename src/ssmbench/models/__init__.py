"""Sequence models, one file per family, and :func:`build_model`.

Every family module ``ssmbench.models.<family>`` provides its operator's backends (plain
PyTorch functions in a dict by backend name, the ``fused`` wrappers of the ecosystem's
kernels among them), a one-token step, a block mixer with
``forward(x, backend) -> (y, cache)`` and ``step(x_t, cache, backend) -> (y_t, cache)``,
``build_mixer(size, d_state, layer) -> nn.Module``, and ``fused_unavailable(device,
phase=None)``, why its fused backend cannot run there (where its kernels limit shapes,
also ``fused_block_reason`` and ``FUSED_SHAPE_REASONS``, see :mod:`ssmbench.models.kernels`);
:class:`~ssmbench.models.common.ResidualStack` stacks mixers into a model.
Beside them: ``common`` (what the families share), ``kernels`` (what their fused wrappers
share: finding and loading the kernel packages) and ``graphs`` (a decode step captured in a
CUDA graph and replayed: the graph backends).  This subpackage imports torch.
"""

from __future__ import annotations

import importlib

import torch

from ssmbench import registry
from ssmbench.matrix import Size
from ssmbench.models.common import ResidualStack
from ssmbench.registry import GRAPH_BACKENDS

FAMILIES = registry.FAMILIES  # each a module ssmbench.models.<family>
# Eager backends every family implements; "compile" is torch.compile of "torch" (made by
# models.common.pick_backend), kept apart because compiling costs seconds per shape;
# "fused" runs the ecosystem's tuned kernels (in each family's module) where it has them;
# "torch-mixed" is "torch" with its matmuls in bf16 where a family's chunked form has such
# matmuls (Mamba-2, Mamba-3, DeltaNet and the hybrid; the others raise BackendUnavailable).
BACKENDS = registry.UNIVERSAL_BACKENDS  # naive, torch
ALL_BACKENDS = registry.MODEL_BACKENDS  # and torch-mixed, compile, fused
# GRAPH_BACKENDS (ssmbench.config): the decode step of a base backend in a CUDA graph
DTYPES = {
    "fp64": torch.float64,
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}

__all__ = [
    "ALL_BACKENDS",
    "BACKENDS",
    "DTYPES",
    "FAMILIES",
    "GRAPH_BACKENDS",
    "ResidualStack",
    "build_model",
]


def build_model(
    model: str,
    size: Size,
    d_state: int,
    backend: str,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> ResidualStack:
    """A ``size.n_layers``-deep residual stack of ``model`` mixers running ``backend``.

    The weights depend only on (model, size, d_state, seed): they are drawn in float32
    on the CPU from a private generator state, then moved to ``device`` and ``dtype``,
    so the same seed gives the same model on every device.  ``d_state`` is ignored by
    attention.  Raises ValueError for an unknown model or backend.
    """
    if model not in FAMILIES:
        raise ValueError(f"unknown model {model!r}; known: {list(FAMILIES)}")
    if backend not in ALL_BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; known: {list(ALL_BACKENDS)}")
    family = importlib.import_module(registry.FAMILY[model].module)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        mixers = [family.build_mixer(size, d_state, layer) for layer in range(size.n_layers)]
        stack = ResidualStack(mixers, size.d_model, backend)
    return stack.to(device=device, dtype=dtype).eval()
