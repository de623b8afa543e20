"""S4D, the diagonal state space model, float64, one token at a time.

Gu, Gupta, Goel & Ré 2022 (arXiv 2206.11893), "On the Parameterization and Initialization
of Diagonal State Space Models".  Per channel h, n complex modes with diagonal A, B fixed
to 1 (folded into C, as the paper's S4D kernel does), zero-order hold with step
dt = exp(log_dt):

    dA = exp(dt A)                          (ZOH, S4D §2 "Discretization")
    dB = (exp(dt A) - 1) / A                (ZOH with B = 1: (dt A)^-1 (exp(dt A) - 1) dt)
    h_t = dA * h_{t-1} + dB * u_t           (the recurrence)
    y_t = 2 Re(sum_n C_n h_t[n]) + D u_t    (output: the n modes stand for 2n real states)

The ``2 Re`` is the conjugate-pair convention of S4D: a real state of size N = 2n whose
modes come in conjugate pairs gives the same output as n complex modes counted twice.
"""

from __future__ import annotations

import numpy as np

from ssmbench.reference.common import f64

# below this |z| the series of (e^z - 1) / z is used: its first dropped term, z^4 / 120,
# is then under 1e-18, far below float64's unit roundoff
SERIES_BELOW = 1e-4


def c128(x):
    """``x`` as a complex128 array, or None when ``x`` is None."""
    return None if x is None else np.asarray(x, dtype=np.complex128)


def expm1_over_z(z: np.ndarray) -> np.ndarray:
    """(e^z - 1) / z, elementwise for complex z, without dividing by a tiny z.

    np.expm1 keeps the digits that e^z - 1 would cancel; where |z| < SERIES_BELOW the
    Taylor series 1 + z/2 + z^2/6 + z^3/24 is used instead (and gives 1 at z = 0).
    """
    small = np.abs(z) < SERIES_BELOW
    safe_z = np.where(small, 1.0, z)
    series = 1 + z / 2 * (1 + z / 3 * (1 + z / 4))
    return np.where(small, series, np.expm1(safe_z) / safe_z)


def s4d(u, log_dt, A, C, D, initial_state=None) -> tuple[np.ndarray, np.ndarray]:
    """The S4D recurrence as a plain loop over time.

    Args:
        u: ``(b, t, h)`` real input; log_dt: ``(h,)`` log step sizes; A, C: ``(h, n)``
            complex (A with negative real part for a stable system); D: ``(h,)`` real
            skip; initial_state: ``(b, h, n)`` complex, or None for zeros.

    Returns:
        y ``(b, t, h)`` float64 and the final state ``(b, h, n)`` complex128.
    """
    u, log_dt, D = f64(u), f64(log_dt), f64(D)
    A, C = c128(A), c128(C)
    b, t, h = u.shape
    n = A.shape[1]
    dt = np.exp(log_dt)[:, None]  # (h 1)
    dA = np.exp(dt * A)  # (h n), ZOH
    dB = dt * expm1_over_z(dt * A)  # (h n), ZOH with B = 1: (exp(dt A) - 1) / A
    state = np.zeros((b, h, n), np.complex128) if initial_state is None else c128(initial_state)
    state = state.copy()
    y = np.zeros((b, t, h))
    for i in range(t):
        state = dA * state + dB * u[:, i, :, None]  # (b h n)
        y[:, i] = 2 * np.einsum("bhn,hn->bh", state, C).real + D * u[:, i]
    return y, state
