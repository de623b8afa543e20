"""A Jamba-style hybrid: Mamba-2 and attention layers in the shared residual skeleton.

Lieber et al. 2024 ("Jamba", arXiv 2403.19887) interleave one attention layer per seven
Mamba layers (``MMMAMMMM``).  Here the layer pattern is ``Size.hybrid_pattern``, cycled
over ``n_layers`` (:meth:`ssmbench.config.Size.layer_kind`): layer ``i`` is a Mamba-2 mixer
where ``pattern[i % len(pattern)]`` is ``M`` and an attention mixer where it is ``A``.
Each layer keeps its own cache (the SSM state and conv window, or the KV cache), so
decode carries both kinds side by side.

The hybrid has no operator of its own: its backends are those of its parts, and
``verify`` checks both operators and the stacked block.  One exception: ``torch-mixed``
runs the Mamba-2 layers' mixed form and the attention layers' ``torch`` backend, whose
SDPA runs in the cell's dtype already (attention alone does not offer torch-mixed: it
would be its torch backend), so that every layer of a bf16 hybrid computes in bf16.
Its ``fused`` backend runs its parts' kernels, and is unavailable where either part's is
(:func:`fused_unavailable`).
Left out: Jamba's MoE MLPs (the benchmark's blocks have no MLP) and its sizes.
"""

from __future__ import annotations

import torch
from torch import nn

from ssmbench.matrix import Size
from ssmbench.models import attention, mamba2

# The backend an attention layer of the hybrid runs for the hybrid's backend, where not
# the same: torch-mixed means "every layer in the cell's half precision", which is what
# attention's torch backend does.
ATTENTION_BACKEND_OF = {"torch-mixed": "torch"}


def attention_backend(backend: str) -> str:
    """The backend the hybrid's attention layers run when the hybrid runs ``backend``."""
    return ATTENTION_BACKEND_OF.get(backend, backend)


class HybridAttentionMixer(attention.AttentionMixer):
    """An attention layer of the hybrid: :class:`~ssmbench.models.attention.AttentionMixer`
    with the hybrid's backend mapped by :func:`attention_backend` (same weights, same
    caches)."""

    def forward(self, x: torch.Tensor, backend: str):
        return super().forward(x, attention_backend(backend))

    def step(self, x_t: torch.Tensor, cache, backend: str):
        return super().step(x_t, cache, attention_backend(backend))

    def decode_cache(self, cache, capacity: int, backend: str):
        return super().decode_cache(cache, capacity, attention_backend(backend))


def fused_unavailable(device: str | torch.device, phase: str | None = None) -> str:
    """Why the fused backend cannot run ``phase`` on ``device`` ("" when it can): its
    attention layers' reason, else its Mamba-2 layers'."""
    return attention.fused_unavailable(device, phase) or mamba2.fused_unavailable(device, phase)


def fused_block_reason(head_dim: int, d_state: int) -> str:
    """Why a hybrid block of ``head_dim`` cannot run the fused kernels ("" when it can):
    its attention layers' (Mamba-2's kernels take any size)."""
    return attention.fused_block_reason(head_dim, d_state)


def build_mixer(size: Size, d_state: int, layer: int) -> nn.Module:
    """Layer ``layer`` of the hybrid: a Mamba-2 or an attention mixer (see module doc)."""
    if size.layer_kind(layer) == "A":
        return HybridAttentionMixer(size.d_model, size.n_heads, size.head_dim)
    return mamba2.build_mixer(size, d_state, layer)
