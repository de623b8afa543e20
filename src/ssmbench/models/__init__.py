"""Sequence models, one file per family, and :func:`build_model`.

Every family provides its operator's backends (plain PyTorch functions), a one-token
step, and a block mixer with ``forward(x, backend)`` and ``step(x_t, cache, backend)``;
:class:`~ssmbench.models.common.ResidualStack` stacks mixers into a model.
This subpackage imports torch.
"""

from __future__ import annotations

import torch

from ssmbench.config import Size
from ssmbench.models.attention import ATTENTION_BACKENDS, AttentionMixer
from ssmbench.models.common import ResidualStack
from ssmbench.models.mamba import SCAN_BACKENDS, MambaMixer

FAMILIES = ("attention", "mamba")
DTYPES = {
    "fp64": torch.float64,
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}
BACKENDS = ("naive", "torch")

# every family must offer every backend named in BACKENDS
assert set(ATTENTION_BACKENDS) == set(SCAN_BACKENDS) == set(BACKENDS)

__all__ = ["BACKENDS", "DTYPES", "FAMILIES", "ResidualStack", "build_model"]


def _mixer(model: str, size: Size, d_state: int) -> torch.nn.Module:
    """One freshly initialised mixer of the family ``model``."""
    if model == "attention":
        return AttentionMixer(size.d_model, size.n_heads, size.head_dim)
    return MambaMixer(
        size.d_model,
        d_state=d_state,
        d_conv=size.d_conv,
        expand=size.expand,
        chunk_size=size.chunk,
    )


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
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; known: {list(BACKENDS)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        mixers = [_mixer(model, size, d_state) for _ in range(size.n_layers)]
        stack = ResidualStack(mixers, size.d_model, backend)
    return stack.to(device=device, dtype=dtype).eval()
