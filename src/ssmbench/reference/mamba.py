"""Mamba-1 selective scan, float64, one token at a time (Gu & Dao 2023, eq. 2a-2b)."""

from __future__ import annotations

import numpy as np

from ssmbench.reference.common import f64, silu, softplus


def selective_scan(
    u,
    delta,
    A,
    B,
    C,
    D=None,
    z=None,
    delta_bias=None,
    delta_softplus: bool = False,
    initial_state=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Mamba-1 selective scan (Gu & Dao 2023, arXiv 2312.00752, eq. 2a-2b, Algorithm 2).

    The same semantics as ``mamba_ssm``'s ``selective_scan_ref``, with real A:

        delta_t = softplus(delta_t + delta_bias)      (softplus only if delta_softplus)
        h_t     = exp(delta_t * A) * h_{t-1} + delta_t * B_t * u_t   (eq. 2a, ZOH A, Euler B)
        y_t     = sum_n C_t h_t + D * u_t                            (eq. 2b, plus skip)
        y_t     = y_t * silu(z_t)                                    (only if z is given)

    Args:
        u, delta: ``(b, t, d)``; A: ``(d, n)``; B, C: ``(b, t, n)``; D: ``(d,)``;
            z: ``(b, t, d)``; delta_bias: ``(d,)``; initial_state: ``(b, d, n)``
            (zeros when None).  Any float dtype.

    Returns:
        y: ``(b, t, d)`` float64 and the final state ``(b, d, n)`` float64.
    """
    u, delta, A, B, C = f64(u), f64(delta), f64(A), f64(B), f64(C)
    D, z, delta_bias = f64(D), f64(z), f64(delta_bias)
    batch, T, d = u.shape
    n = A.shape[1]

    if delta_bias is not None:
        delta = delta + delta_bias
    if delta_softplus:
        delta = softplus(delta)

    if initial_state is None:
        h = np.zeros((batch, d, n))
    else:
        h = f64(initial_state).copy()
    y = np.zeros((batch, T, d))
    for t in range(T):
        dA = np.exp(delta[:, t, :, None] * A)  # (b d n)
        dB_u = delta[:, t, :, None] * B[:, t, None, :] * u[:, t, :, None]  # (b d n)
        h = dA * h + dB_u
        y[:, t] = np.einsum("bdn,bn->bd", h, C[:, t])  # (b d)
    if D is not None:
        y = y + u * D
    if z is not None:
        y = y * silu(z)
    return y, h
