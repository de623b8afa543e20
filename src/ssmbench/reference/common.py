"""Helpers shared by the float64 references (NumPy only)."""

from __future__ import annotations

import numpy as np


def f64(x):
    """``x`` as a float64 array, or None when ``x`` is None."""
    return None if x is None else np.asarray(x, dtype=np.float64)


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)), written so that large x does not overflow."""
    return np.logaddexp(0.0, x)


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x)."""
    return x / (1.0 + np.exp(-x))
