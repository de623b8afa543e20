"""Mamba-2's state-space dual (SSD) recurrence, float64, one token at a time.

Dao & Gu 2024 (arXiv 2405.21060), eq. 1 with the scalar-times-identity A of section 3:

    h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T         (b, h, p, n)
    y_t = h_t C_t + D x_t                               (b, h, p)

B and C are shared by the ``h / g`` heads of a group (head ``i`` reads group
``i // (h / g)``).
"""

from __future__ import annotations

import numpy as np

from ssmbench.reference.common import f64


def ssd(x, dt, A, B, C, D=None, chunk_size: int = 64, initial_state=None):
    """The SSD recurrence as a plain loop over time.

    Args:
        x: ``(b, t, h, p)``; dt: ``(b, t, h)``, already positive; A: ``(h,)``, negative;
            B, C: ``(b, t, g, n)`` with h divisible by g; D: ``(h,)`` or None;
            initial_state: ``(b, h, p, n)`` or None for zeros.
        chunk_size: ignored (the chunked forms take it; the recurrence has no chunks).

    Returns:
        y ``(b, t, h, p)`` and the final state ``(b, h, p, n)``, float64.
    """
    x, dt, A, B, C, D = map(f64, (x, dt, A, B, C, D))
    b, t, h, p = x.shape
    g, n = B.shape[2], B.shape[3]
    if h % g:
        raise ValueError(f"heads h={h} are not divisible by groups g={g}")
    heads_per_group = h // g
    B = np.repeat(B, heads_per_group, axis=2)  # (b t h n)
    C = np.repeat(C, heads_per_group, axis=2)  # (b t h n)
    state = np.zeros((b, h, p, n)) if initial_state is None else f64(initial_state).copy()
    y = np.zeros((b, t, h, p))
    for i in range(t):
        decay = np.exp(dt[:, i] * A)  # (b h)
        update = dt[:, i, :, None, None] * x[:, i, :, :, None] * B[:, i, :, None, :]  # (b h p n)
        state = decay[:, :, None, None] * state + update
        y[:, i] = np.einsum("bhpn,bhn->bhp", state, C[:, i])
        if D is not None:
            y[:, i] += D[None, :, None] * x[:, i]
    return y, state
