"""A Jamba-style hybrid: Mamba-2 and attention layers in the shared residual skeleton.

Lieber et al. 2024 ("Jamba", arXiv 2403.19887) interleave one attention layer per seven
Mamba layers (``MMMAMMMM``).  Here the layer pattern is ``Size.hybrid_pattern``, cycled
over ``n_layers`` (:meth:`ssmbench.config.Size.layer_kind`): layer ``i`` is a Mamba-2 mixer
where ``pattern[i % len(pattern)]`` is ``M`` and an attention mixer where it is ``A``.
Each layer keeps its own cache (the SSM state and conv window, or the KV cache), so
decode carries both kinds side by side.

The hybrid has no operator of its own: its backends are those of its parts, and
``verify`` checks both operators and the stacked block.  Left out: Jamba's MoE MLPs (the
benchmark's blocks have no MLP) and its sizes.
"""

from __future__ import annotations

from torch import nn

from ssmbench.config import Size
from ssmbench.models import attention, mamba2


def build_mixer(size: Size, d_state: int, layer: int) -> nn.Module:
    """Layer ``layer`` of the hybrid: a Mamba-2 or an attention mixer (see module doc)."""
    if size.layer_kind(layer) == "A":
        return attention.build_mixer(size, d_state, layer)
    return mamba2.build_mixer(size, d_state, layer)
