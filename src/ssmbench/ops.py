"""The core sequence operators as pure functions, one ``backend=`` switch each.

Same names, argument order and layouts as the NumPy references in
:mod:`ssmbench.reference`; the implementations live with their model family in
:mod:`ssmbench.models`, and each op dispatches through that family's one dict of
backends.  An unknown backend raises ValueError listing the known ones.

Shapes (b batch, t time, h heads, d channels or head dim, n state size):

- ``attention(q, k, v, causal=True)``: q, k, v ``(b, t, h, d)`` -> ``(b, t, h, d)``.
- ``selective_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state)``:
  u, delta, z ``(b, t, d)``; A ``(d, n)``; B, C ``(b, t, n)``; D, delta_bias ``(d,)``;
  state ``(b, d, n)`` -> ``(y (b, t, d), final_state (b, d, n))``.
- ``attention_step`` and ``selective_scan_step``: the same for one token (no t axis).
"""

from __future__ import annotations

import torch

from ssmbench.models.attention import ATTENTION_BACKENDS, KVCache
from ssmbench.models.attention import attention_step as _attention_step
from ssmbench.models.common import pick_backend
from ssmbench.models.mamba import SCAN_BACKENDS, SCAN_STEP_BACKENDS


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True, backend: str = "torch"
) -> torch.Tensor:
    """Softmax attention, scale ``1 / sqrt(d)``: q, k, v ``(b, t, h, d)`` -> ``(b, t, h, d)``."""
    return pick_backend(ATTENTION_BACKENDS, backend, "attention")(q, k, v, causal=causal)


def attention_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cache: KVCache | None = None,
    backend: str = "torch",
) -> tuple[torch.Tensor, KVCache]:
    """One decode token: q, k, v ``(b, h, d)``, cache ``(k, v)`` each ``(b, s, h, d)`` or
    None -> y ``(b, h, d)`` and the cache grown to ``s + 1`` tokens."""
    return _attention_step(q, k, v, cache, backend=backend)


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    initial_state: torch.Tensor | None = None,
    backend: str = "torch",
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mamba-1 selective scan -> ``(y (b, t, d), final_state (b, d, n))``; see
    :func:`ssmbench.reference.selective_scan` for the semantics.  ``chunk_size`` is used
    by the ``torch`` backend only."""
    scan = pick_backend(SCAN_BACKENDS, backend, "selective_scan")
    return scan(
        u,
        delta,
        A,
        B,
        C,
        D=D,
        z=z,
        delta_bias=delta_bias,
        delta_softplus=delta_softplus,
        initial_state=initial_state,
        chunk_size=chunk_size,
    )


def selective_scan_step(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    state: torch.Tensor | None = None,
    backend: str = "torch",
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the selective scan: u, delta, z ``(b, d)``; B, C ``(b, n)``; state
    ``(b, d, n)`` or None -> ``(y (b, d), state (b, d, n))``."""
    step = pick_backend(SCAN_STEP_BACKENDS, backend, "selective_scan_step")
    return step(
        u,
        delta,
        A,
        B,
        C,
        D=D,
        z=z,
        delta_bias=delta_bias,
        delta_softplus=delta_softplus,
        state=state,
    )
