"""The delta rule (DeltaNet) and its gated form (Gated DeltaNet), float64, one token at a time.

Yang, Wang, Zhang, Shen & Kim 2024, "Parallelizing Linear Transformers with the Delta
Rule over Sequence Length" (arXiv 2406.06484), section 2 (the delta rule); gated: Yang,
Kautz & Hatamizadeh 2024, "Gated Delta Networks" (arXiv 2412.06464), section 3 (the gated
delta rule).  The papers write the state as ``(d_v, d_k)``; here it is ``(d_k, d_v)``
(the project's one layout, ``(b, h, k, v)``), so every product is the papers' transposed:

    a_t = exp(g_t)                   (gated; a_t = 1 when g is None)
    S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T
        = a_t (S_{t-1} - beta_t k_t (k_t^T S_{t-1})) + beta_t k_t v_t^T
    o_t = S_t^T q_t

Order of decay and update: the decay a_t multiplies the previous state FIRST, and the
delta-rule correction then reads that decayed state:

    S' = a_t S_{t-1};   S_t = S' + beta_t k_t (v_t - S'^T k_t)^T

which is the Gated DeltaNet paper's S_t = S_{t-1} (a_t (I - beta_t k_t k_t^T)) + beta_t v_t
k_t^T transposed, and what flash-linear-attention's recurrent kernels compute.  The output
reads the updated state S_t.  No scaling of q or k here: the block normalizes and scales
them.
"""

from __future__ import annotations

import numpy as np

from ssmbench.reference.common import f64


def delta_rule(q, k, v, beta, g=None, chunk_size: int = 64, initial_state=None):
    """The (gated) delta rule as a plain loop over time.

    Args:
        q, k: ``(b, t, h, k)``; v: ``(b, t, h, v)``; beta: ``(b, t, h)`` in (0, 1);
            g: ``(b, t, h)`` log-decay (<= 0), or None for plain DeltaNet (no decay);
            initial_state: ``(b, h, k, v)`` or None for zeros.  Any float dtype.
        chunk_size: ignored (the chunked forms take it; the recurrence has no chunks).

    Returns:
        o ``(b, t, h, v)`` and the final state ``(b, h, k, v)``, float64.
    """
    q, k, v, beta, g = map(f64, (q, k, v, beta, g))
    b, t, h, dk = q.shape
    dv = v.shape[-1]
    state = np.zeros((b, h, dk, dv)) if initial_state is None else f64(initial_state).copy()
    o = np.zeros((b, t, h, dv))
    for i in range(t):
        if g is not None:
            state = np.exp(g[:, i])[:, :, None, None] * state  # a_t S_{t-1}
        k_i, q_i = k[:, i], q[:, i]  # (b h k)
        retrieved = np.einsum("bhkv,bhk->bhv", state, k_i)  # S'^T k_t
        delta = beta[:, i, :, None] * (v[:, i] - retrieved)  # (b h v)
        state = state + k_i[..., None] * delta[:, :, None, :]  # (b h k v)
        o[:, i] = np.einsum("bhkv,bhk->bhv", state, q_i)  # o_t = S_t^T q_t
    return o, state
