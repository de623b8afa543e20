"""Softmax attention, float64, one query position at a time."""

from __future__ import annotations

import numpy as np

from ssmbench.reference.common import f64


def attention(q, k, v, causal: bool = True) -> np.ndarray:
    """Scaled dot-product attention, one query position at a time.

    Args:
        q, k, v: ``(b, t, h, d)``, any float dtype.
        causal: query ``t`` sees keys ``0..t`` only when True, all keys otherwise.

    Returns:
        y: ``(b, t, h, d)`` float64.  The scale is ``1 / sqrt(d)``, the default of
        ``torch.nn.functional.scaled_dot_product_attention``.
    """
    q, k, v = f64(q), f64(k), f64(v)
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
