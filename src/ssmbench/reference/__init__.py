"""NumPy float64 ground truth for the core sequence operators.

Plain and slow on purpose: every operator loops over time one token at a time, in
float64, with no vectorisation tricks, so that it can be read against the paper.
Names, argument order and layouts match :mod:`ssmbench.ops`; inputs may be NumPy
arrays of any float dtype (they are upcast to float64), outputs are float64.

No torch here: the references must run where only NumPy is installed.
"""

from __future__ import annotations

import numpy as np


def _f64(x):
    """``x`` as a float64 array, or None when ``x`` is None."""
    return None if x is None else np.asarray(x, dtype=np.float64)


def _softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)), written so that large x does not overflow."""
    return np.logaddexp(0.0, x)


def _silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x)."""
    return x / (1.0 + np.exp(-x))


def attention(q, k, v, causal: bool = True) -> np.ndarray:
    """Scaled dot-product attention, one query position at a time.

    Args:
        q, k, v: ``(b, t, h, d)``, any float dtype.
        causal: query ``t`` sees keys ``0..t`` only when True, all keys otherwise.

    Returns:
        y: ``(b, t, h, d)`` float64.  The scale is ``1 / sqrt(d)``, the default of
        ``torch.nn.functional.scaled_dot_product_attention``.
    """
    q, k, v = _f64(q), _f64(k), _f64(v)
    T, d = q.shape[1], q.shape[3]
    scale = 1.0 / np.sqrt(d)
    y = np.zeros_like(q)
    for t in range(T):
        n_keys = t + 1 if causal else k.shape[1]
        scores = np.einsum("bhd,bshd->bhs", q[:, t], k[:, :n_keys]) * scale  # (b h s)
        scores = scores - scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights = weights / weights.sum(axis=-1, keepdims=True)
        y[:, t] = np.einsum("bhs,bshd->bhd", weights, v[:, :n_keys])  # (b h d)
    return y


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
    u, delta, A, B, C = _f64(u), _f64(delta), _f64(A), _f64(B), _f64(C)
    D, z, delta_bias = _f64(D), _f64(z), _f64(delta_bias)
    batch, T, d = u.shape
    n = A.shape[1]

    if delta_bias is not None:
        delta = delta + delta_bias
    if delta_softplus:
        delta = _softplus(delta)

    if initial_state is None:
        h = np.zeros((batch, d, n))
    else:
        h = _f64(initial_state).copy()
    y = np.zeros((batch, T, d))
    for t in range(T):
        dA = np.exp(delta[:, t, :, None] * A)  # (b d n)
        dB_u = delta[:, t, :, None] * B[:, t, None, :] * u[:, t, :, None]  # (b d n)
        h = dA * h + dB_u
        y[:, t] = np.einsum("bdn,bn->bd", h, C[:, t])  # (b d)
    if D is not None:
        y = y + u * D
    if z is not None:
        y = y * _silu(z)
    return y, h
