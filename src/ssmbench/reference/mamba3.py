"""Mamba-3 SISO recurrence, float64, one token at a time.

Lahoti et al. 2026, "Mamba-3" (arXiv 2603.15569): Mamba-2's scalar-decay SSM with two
changes, written here as ``mamba_ssm``'s reference (``mamba3_siso_step_ref``) computes them.

1. Exponential-trapezoidal discretisation (the paper's eq. for h_t with lambda_t): the input
   integral is a lambda-weighted trapezoid of the current and the previous token, with a
   data-dependent decay rate A_t < 0 per token and head (mamba_ssm's block projects it from
   the token, as it does dt),

       alpha_t = exp(dt_t A_t)
       beta_t  = (1 - lam_t) dt_t alpha_t
       gamma_t = lam_t dt_t
       h_t = alpha_t h_{t-1} + beta_t x_{t-1} B~_{t-1}^T + gamma_t x_t B~_t^T    (b, h, p, n)

   lam = 1 is Mamba-2's exponential-Euler rule (beta = 0): then, with A_t the same at
   every t (Mamba-2's A is one value per head), this is exactly
   :func:`ssmbench.reference.ssd`.

2. Complex (rotating) state, by the "RoPE trick": a complex diagonal transition
   exp(dt_t (A_t + i theta_t)) on pairs of state channels is the same as rotating B and C by
   the cumulative phase and keeping the real decay,

       phi_t = phi_{t-1} + dt_t theta_t                                           (b, h, r)
       B~_t = R(phi_t) B_t,   C~_t = R(phi_t) C_t
       y_t = h_t C~_t + D x_t

   R(phi) rotates the adjacent pairs (2i, 2i+1), i < r, of the n state channels:
   ``(v0, v1) -> (v0 cos phi_i - v1 sin phi_i, v0 sin phi_i + v1 cos phi_i)``; channels
   2r .. n-1 are not rotated (mamba_ssm rotates the first ``rope_fraction * n`` channels).
   B and C get the same rotation, so C~_t . B~_s = C_t . R(phi_s - phi_t) B_s: the state
   channel pair turns by -(phi_t - phi_s) between token s and token t.  theta is the angle
   rate in radians per unit of dt (the mamba_ssm block feeds pi * tanh(projection)).

The state carries everything the next token needs (:class:`Mamba3State`): the SSM state in
the rotated frame, the phase phi, and the previous token's rotated B~ and x for the
trapezoid's beta term.  A zero state (no previous token) gives beta_0 a zero to multiply.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ssmbench.reference.common import f64


class Mamba3State(NamedTuple):
    """What Mamba-3 carries from one token to the next (arrays or tensors, float32 or wider).

    ssm:    ``(b, h, p, n)``  h_t, in the rotated frame (as Mamba-2's state)
    phase:  ``(b, h, r)``     phi_t, the cumulative rotation angle (not reduced mod 2 pi)
    B_prev: ``(b, h, n)``     B~_t = R(phi_t) B_t of the last token, per head
    x_prev: ``(b, h, p)``     x_t of the last token
    """

    ssm: Any
    phase: Any
    B_prev: Any
    x_prev: Any


def rotate_pairs(v: np.ndarray, phase: np.ndarray) -> np.ndarray:
    """R(phase) v: rotate the channel pairs (2i, 2i+1), i < r, by phase[..., i].

    v: ``(..., n)``; phase: ``(..., r)`` with ``2 r <= n`` -> ``(..., n)``.
    """
    r = phase.shape[-1]
    v0, v1 = v[..., 0 : 2 * r : 2], v[..., 1 : 2 * r : 2]  # (... r) each
    cos, sin = np.cos(phase), np.sin(phase)
    out = v.copy()
    out[..., 0 : 2 * r : 2] = v0 * cos - v1 * sin
    out[..., 1 : 2 * r : 2] = v0 * sin + v1 * cos
    return out


def mamba3(
    x, dt, A, B, C, theta, lam, D=None, chunk_size: int = 64, initial_state=None
) -> tuple[np.ndarray, Mamba3State]:
    """The Mamba-3 SISO recurrence as a plain loop over time (see the module docstring).

    Args:
        x: ``(b, t, h, p)``; dt: ``(b, t, h)``, already positive; A: ``(b, t, h)``,
            negative (one decay rate per token and head);
            B, C: ``(b, t, g, n)`` with h divisible by g (head ``i`` reads group
            ``i // (h / g)``); theta: ``(b, t, h, r)`` angle rates, ``2 r <= n``;
            lam: ``(b, t, h)`` in [0, 1]; D: ``(h,)`` or None.
        initial_state: a :class:`Mamba3State` (any 4-tuple in its order), a bare SSM
            state ``(b, h, p, n)`` (phase, B_prev and x_prev zero), or None for zeros.
        chunk_size: ignored (the chunked forms take it; the recurrence has no chunks).

    Returns:
        y ``(b, t, h, p)`` and the final :class:`Mamba3State`, all float64.
    """
    x, dt, A, B, C, theta, lam, D = map(f64, (x, dt, A, B, C, theta, lam, D))
    b, t, h, p = x.shape
    g, n = B.shape[2], B.shape[3]
    r = theta.shape[3]
    if A.shape != (b, t, h):
        raise ValueError(f"A must be {(b, t, h)} (per token and head), got {A.shape}")
    if h % g:
        raise ValueError(f"heads h={h} are not divisible by groups g={g}")
    if 2 * r > n:
        raise ValueError(f"theta has r={r} angles, more than n/2 for n={n}")
    B = np.repeat(B, h // g, axis=2)  # (b t h n)
    C = np.repeat(C, h // g, axis=2)  # (b t h n)

    if initial_state is None:
        initial_state = np.zeros((b, h, p, n))
    if not isinstance(initial_state, tuple):
        zeros = (np.zeros(shape) for shape in ((b, h, r), (b, h, n), (b, h, p)))
        initial_state = (initial_state, *zeros)
    state, phase, B_prev, x_prev = (f64(s).copy() for s in initial_state)

    y = np.zeros((b, t, h, p))
    for i in range(t):
        phase = phase + dt[:, i, :, None] * theta[:, i]  # phi_t, (b h r)
        B_rot = rotate_pairs(B[:, i], phase)  # B~_t, (b h n)
        C_rot = rotate_pairs(C[:, i], phase)  # C~_t, (b h n)
        alpha = np.exp(dt[:, i] * A[:, i])  # (b h)
        beta = (1.0 - lam[:, i]) * dt[:, i] * alpha  # (b h)
        gamma = lam[:, i] * dt[:, i]  # (b h)
        previous = x_prev[:, :, :, None] * B_prev[:, :, None, :]  # x_{t-1} B~_{t-1}^T, (b h p n)
        current = x[:, i, :, :, None] * B_rot[:, :, None, :]  # x_t B~_t^T, (b h p n)
        state = (
            alpha[:, :, None, None] * state
            + beta[:, :, None, None] * previous
            + gamma[:, :, None, None] * current
        )
        y[:, i] = np.einsum("bhpn,bhn->bhp", state, C_rot)
        if D is not None:
            y[:, i] += D[None, :, None] * x[:, i]
        B_prev, x_prev = B_rot, x[:, i]
    return y, Mamba3State(state, phase, B_prev, x_prev.copy())
