"""Mamba-3 SISO (Lahoti et al. 2026, "Mamba-3", arXiv 2603.15569): the operator in three
forms, and the block mixer.

Glossary (axis letter -> paper symbol):

    b  batch
    t  time (sequence length T); s a second index over the same sequence
    l  position inside a chunk of ``chunk_size`` tokens; c the chunk index
    h  heads                       (H)
    p  head dim                    (P, the "value" width)
    n  state size                  (N)
    g  groups of heads sharing B and C
    r  rotation angles per head    (n/2 for a fully complex state; mamba_ssm rotates n/4)

The recurrence (exponential-trapezoidal rule, complex state by rotating B and C):

    phi_t = phi_{t-1} + dt_t theta_t                          cumulative phase, (b h r)
    B~_t = R(phi_t) B_t,  C~_t = R(phi_t) C_t                 "RoPE trick"
    alpha_t = exp(dt_t A_t),  beta_t = (1 - lam_t) dt_t alpha_t,  gamma_t = lam_t dt_t
    h_t = alpha_t h_{t-1} + beta_t x_{t-1} B~_{t-1}^T + gamma_t x_t B~_t^T
    y_t = h_t C~_t + D x_t

R(phi) rotates the state channel pairs (2i, 2i+1) for i < r by phi_i (``(v0, v1) ->
(v0 cos - v1 sin, v0 sin + v1 cos)``, mamba_ssm's SISO convention); the other channels are
not rotated.  A_t < 0 is a decay rate per token and head (mamba_ssm's block projects it
from the token, as dt): the operator takes A ``(b, t, h)``, its step ``(b, h)``.  See
:mod:`ssmbench.reference.mamba3` for the float64 truth.  With lam = 1, theta = 0 and A the
same at every token this is exactly Mamba-2's SSD.

The state (:class:`Mamba3State`, a NamedTuple, also the mixer's cache) is
``(ssm (b, h, p, n), phase (b, h, r), B_prev (b, h, n), x_prev (b, h, p))``: the SSM state
in the rotated frame, the phase, and the last token's rotated B and its x, which the next
token's beta term needs.  Every op takes it as ``initial_state`` (or a bare ``(b, h, p, n)``
SSM state, the rest zero) and returns it as the final state.

Three forms that must agree (tests pin them to the NumPy reference):

- ``mamba3_naive``: discretise every token at once, then a Python loop over time with one
  small state update per token.
- ``mamba3_torch``: chunked, no Python loop over time or chunks.  The trapezoid's two input
  terms share one decay kernel, so they are summed into one SSD with a per-token input
  weight w_s and a diagonal correction (see :func:`mamba3_torch`); B and C are rotated by
  the cumulative phase (a cumsum); then Mamba-2's chunked SSD algorithm
  (:func:`ssmbench.models.mamba2.chunked_scan`).
- ``mamba3_step``: one token, for decode.

All forms compute in float32 at least (half inputs are widened), return y in the dtype of
x and the state in the compute dtype.  ``mamba3_mixed`` (the ``torch-mixed`` backend) is
``mamba3_torch`` with the SSD's in-chunk matmuls in bf16 (fp32 accumulation, decays and
state); its decode step is ``mamba3_step``.

What this file leaves out: MIMO (rank > 1) Mamba-3; more than one B/C group in the block
(mamba_ssm's ``ngroups``, 1 by default; the operator takes any g); the optional gated
output norm (``is_outproj_norm``, off by default in mamba_ssm); variable-length packed
batches; reduction of the phase mod 2 pi (mamba_ssm keeps it in [0, 2 pi); the rotation
is the same).

The ``fused`` backend wraps mamba_ssm's Mamba-3 SISO kernels behind the same signatures
(``mamba3_fused``: ``mamba3_siso_combined``; ``mamba3_step_fused``: ``mamba3_siso_step``;
Triton with PTX inline assembly and TMA descriptors, so CUDA only, and bf16);
:func:`mamba3_shape_reason` and :func:`fused_unavailable` say where they cannot run
(:mod:`ssmbench.models.kernels` holds what every family's fused wrappers share).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ssmbench import registry
from ssmbench.counts import rotation_pairs
from ssmbench.matrix import Size
from ssmbench.models import kernels
from ssmbench.models.common import (
    A_INIT_RANGE,
    DT_INIT_RANGE,
    BackendUnavailable,
    RandomDraws,
    RMSNorm,
    cumsum,
    dt_bias_init,
    mixed_matmul_dtype,
    pick_backend,
    widen,
)
from ssmbench.models.mamba2 import chunked_scan
from ssmbench.reference.mamba3 import Mamba3State

__all__ = [
    "FUSED_SHAPE_REASONS",
    "MAMBA3_BACKENDS",
    "MAMBA3_STEP_BACKENDS",
    "A_FLOOR",
    "Mamba3Mixer",
    "Mamba3State",
    "build_mixer",
    "fused_block_reason",
    "fused_unavailable",
    "mamba3_fused",
    "mamba3_mixed",
    "mamba3_naive",
    "mamba3_shape_reason",
    "mamba3_step",
    "mamba3_step_fused",
    "mamba3_torch",
    "rotate_pairs",
]


def _check_shapes(x, dt, A, B, C, theta, lam, D, token: bool = False) -> None:
    """ValueError naming the first argument whose shape does not fit (``token``: no t axis)."""
    lead = x.shape[:-2]  # (b, t) or (b,)
    if x.dim() != (3 if token else 4):
        raise ValueError(f"x must be {'(b, h, p)' if token else '(b, t, h, p)'}, got {x.shape}")
    h = x.shape[-2]
    if B.dim() != x.dim() or B.shape[:-2] != lead or B.shape != C.shape:
        raise ValueError(f"B {tuple(B.shape)} and C {tuple(C.shape)} must be {(*lead, 'g', 'n')}")
    g, n = B.shape[-2], B.shape[-1]
    if h % g:
        raise ValueError(f"heads h={h} are not divisible by groups g={g}")
    if dt.shape != (*lead, h) or lam.shape != (*lead, h):
        raise ValueError(f"dt {tuple(dt.shape)} and lam {tuple(lam.shape)} must be {(*lead, h)}")
    if A.shape != (*lead, h):
        raise ValueError(f"A must be {(*lead, h)} (per token and head), got {tuple(A.shape)}")
    if D is not None and D.shape != (h,):
        raise ValueError(f"D must be ({h},), got {tuple(D.shape)}")
    if theta.dim() != x.dim() or theta.shape[:-1] != (*lead, h) or 2 * theta.shape[-1] > n:
        raise ValueError(f"theta must be {(*lead, h, 'r')} with 2 r <= n={n}, got {theta.shape}")


def _initial_state(
    state: Mamba3State | tuple | torch.Tensor | None,
    b: int,
    h: int,
    p: int,
    n: int,
    r: int,
    like: torch.Tensor,
) -> Mamba3State:
    """The state as a :class:`Mamba3State` in the compute dtype: zeros for None, a bare
    ``(b, h, p, n)`` SSM state padded with a zero phase, B_prev and x_prev."""
    if state is None:
        state = like.new_zeros(b, h, p, n)
    if not isinstance(state, tuple):
        zeros = like.new_zeros
        state = (state, zeros(b, h, r), zeros(b, h, n), zeros(b, h, p))
    state = Mamba3State(*widen(*state))
    expected = Mamba3State((b, h, p, n), (b, h, r), (b, h, n), (b, h, p))
    for name, tensor, shape in zip(Mamba3State._fields, state, expected, strict=True):
        if tuple(tensor.shape) != shape:
            raise ValueError(f"state.{name} must be {shape}, got {tuple(tensor.shape)}")
    return state


def rotate_pairs(v: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
    """R(phase) v: rotate the channel pairs (2i, 2i+1), i < r, by phase[..., i]; the
    channels from 2r on pass through.

    v: ``(..., n)``; phase: ``(..., r)``, broadcastable, ``2 r <= n`` -> ``(..., n)``.
    """
    return _rotate(v, _turn(phase))


def _turn(phase: torch.Tensor) -> torch.Tensor:
    """exp(i phase), complex ``(..., r)``: a pair (v0, v1) read as v0 + i v1 and multiplied
    by it is R(phase) (v0, v1), the paper's complex state channel."""
    return torch.complex(phase.cos(), phase.sin())


def _rotate(v: torch.Tensor, turn: torch.Tensor) -> torch.Tensor:
    """:func:`rotate_pairs` as one complex multiply (a fused kernel; the real form with
    four multiplies and an interleaving stack is several times slower on CPU).

    v: ``(..., n)`` real; turn: ``(..., r)`` complex from :func:`_turn`, broadcastable
    against v -> the broadcast shape ``(..., n)``.
    """
    r = turn.shape[-1]
    pairs = v[..., : 2 * r]
    if not pairs.is_contiguous() or pairs.storage_offset() % 2:
        pairs = pairs.clone(memory_format=torch.contiguous_format)  # view_as_complex needs it
    rotated = torch.view_as_complex(pairs.unflatten(-1, (r, 2))) * turn  # (... r) complex
    rotated = torch.view_as_real(rotated).flatten(-2)  # (... 2r)
    if 2 * r == v.shape[-1]:
        return rotated
    rest = v[..., 2 * r :].expand(*rotated.shape[:-1], -1)  # (... n-2r)
    return torch.cat([rotated, rest], dim=-1)  # (... n)


def _rotate_heads(v: torch.Tensor, turn: torch.Tensor) -> torch.Tensor:
    """R(phi) v per head, where the g groups of v are each shared by h/g heads (head i
    reads group i // (h/g)); no copy of v per head is made before the rotation does.

    v: ``(..., g, n)``; turn: ``(..., h, r)`` complex -> ``(..., h, n)``.
    """
    g, h = v.shape[-2], turn.shape[-2]
    turn = turn.unflatten(-2, (g, h // g))  # (... g h/g r)
    return _rotate(v.unsqueeze(-2), turn).flatten(-3, -2)  # (... h n)


def _rotated_inputs(x, dt, B, C, theta, phase0):
    """Rotate B, C ``(b, t, g, n)`` per head of x by the cumulative phase
    phi_t = phi_init + sum_{s <= t} dt_s theta_s.  Returns phi ``(b, t, h, r)``,
    B~ and C~ ``(b, t, h, n)``."""
    phase = phase0[:, None] + cumsum(dt[..., None] * theta, dim=1)  # (b t h r)
    turn = _turn(phase)  # (b t h r) complex
    return phase, _rotate_heads(B, turn), _rotate_heads(C, turn)


def mamba3_naive(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    theta: torch.Tensor,
    lam: torch.Tensor,
    D: torch.Tensor | None = None,
    chunk_size: int | None = None,
    initial_state: Mamba3State | torch.Tensor | None = None,
) -> tuple[torch.Tensor, Mamba3State]:
    """Mamba-3 as the seeds wrote their scans: discretise and rotate every token at once,
    then a Python loop over time with one small state update per token.

    Args:
        x: ``(b, t, h, p)``; dt: ``(b, t, h)``, positive; A: ``(b, t, h)``, negative;
            B, C: ``(b, t, g, n)``, h divisible by g; theta: ``(b, t, h, r)`` angle rates,
            ``2 r <= n``; lam: ``(b, t, h)`` in [0, 1]; D: ``(h,)`` or None.  One float
            dtype for all.
        chunk_size: unused; accepted so that every backend has one signature.
        initial_state: a :class:`Mamba3State`, a bare ``(b, h, p, n)`` SSM state, or None.

    Returns:
        y: ``(b, t, h, p)`` in the dtype of x, and the final :class:`Mamba3State` in
        float32 or wider.
    """
    _check_shapes(x, dt, A, B, C, theta, lam, D)
    out_dtype = x.dtype
    x, dt, A, B, C, theta, lam, D = widen(x, dt, A, B, C, theta, lam, D)
    b, T, h, p = x.shape
    state = _initial_state(initial_state, b, h, p, B.shape[-1], theta.shape[-1], x)
    phase, B_rot, C_rot = _rotated_inputs(x, dt, B, C, theta, state.phase)
    alpha = torch.exp(dt * A)  # alpha_t = exp(dt_t A_t), (b t h)
    beta = (1 - lam) * dt * alpha  # (b t h)
    gamma = lam * dt  # (b t h)

    ssm, B_prev, x_prev = state.ssm, state.B_prev, state.x_prev
    ys = []
    # one token at a time (unbind, not x[:, t]: see ssmbench.models.mamba2.ssd_naive)
    tokens = (x, B_rot, C_rot, alpha, beta, gamma)
    for x_t, B_t, C_t, alpha_t, beta_t, gamma_t in zip(*(v.unbind(1) for v in tokens), strict=True):
        previous = torch.einsum("bhp,bhn->bhpn", x_prev, B_prev)  # x_{t-1} B~_{t-1}^T
        current = torch.einsum("bhp,bhn->bhpn", x_t, B_t)  # x_t B~_t^T
        ssm = (
            alpha_t[..., None, None] * ssm
            + beta_t[..., None, None] * previous
            + gamma_t[..., None, None] * current
        )  # h_t, (b h p n)
        ys.append(torch.einsum("bhpn,bhn->bhp", ssm, C_t))  # y_t = h_t C~_t
        B_prev, x_prev = B_t, x_t
    y = torch.stack(ys, dim=1)  # (b t h p)
    if D is not None:
        y = y + D[:, None] * x
    last = Mamba3State(ssm, phase[:, -1], B_prev, x_prev)
    return y.to(out_dtype), Mamba3State(*(part.clone() for part in last))  # own storage


def mamba3_torch(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    theta: torch.Tensor,
    lam: torch.Tensor,
    D: torch.Tensor | None = None,
    chunk_size: int = 64,
    initial_state: Mamba3State | torch.Tensor | None = None,
) -> tuple[torch.Tensor, Mamba3State]:
    """Mamba-3, chunked: no Python loop over time or chunks.

    1. rotate B and C by the cumulative phase (a cumsum over t);
    2. fold the trapezoid's two input terms into one.  Unrolled, token s reaches token t > s
       through gamma_s x_s B~_s^T (decayed by alpha_{s+1} ... alpha_t) and through the
       shifted term beta_{s+1} x_s B~_s^T (decayed by alpha_{s+2} ... alpha_t); since
       beta_{s+1} = (1 - lam_{s+1}) dt_{s+1} alpha_{s+1}, both carry the same decay, so

           h_t = sum_{s <= t} exp(a_{s+1} + ... + a_t) w_s x_s B~_s^T  -  e_t x_t B~_t^T
           w_s = gamma_s + e_s,   e_s = (1 - lam_{s+1}) dt_{s+1}   (e_{T-1} = 0)

       with a_t = dt_t A_t: one SSD with input weight w (put on B) whose token-to-itself
       term is corrected by -e_t (C~_t . B~_t) x_t in y (mamba_ssm's SISO kernel does the
       same).  The state that the chunks pass on holds the e_t term already; the final one
       has e_{T-1} = 0.  The initial state's beta term beta_0 x_prev B_prev^T joins the
       initial SSM state before its alpha_0;
    3. Mamba-2's chunked SSD (:func:`ssmbench.models.mamba2.chunked_scan`) with input
       weight w, and the correction plus the skip D as its per-token skip term.

    Args:
        as :func:`mamba3_naive`; chunk_size: tokens per chunk of the SSD.

    Returns:
        y: ``(b, t, h, p)`` in the dtype of x, and the final :class:`Mamba3State` in
        float32 or wider.
    """
    return _mamba3_chunked(x, dt, A, B, C, theta, lam, D, chunk_size, initial_state, None)


def _mamba3_chunked(x, dt, A, B, C, theta, lam, D, chunk_size, initial_state, matmul_dtype):
    """:func:`mamba3_torch` with the SSD's in-chunk matmuls' operands in ``matmul_dtype``
    (None: the widened inputs' float32)."""
    _check_shapes(x, dt, A, B, C, theta, lam, D)
    out_dtype = x.dtype
    x, dt, A, B, C, theta, lam, D = widen(x, dt, A, B, C, theta, lam, D)
    b, T, h, p = x.shape
    state = _initial_state(initial_state, b, h, p, B.shape[-1], theta.shape[-1], x)

    # 1. B~_t = R(phi_t) B_t, C~_t = R(phi_t) C_t
    phase, B_rot, C_rot = _rotated_inputs(x, dt, B, C, theta, state.phase)  # (b t h .)

    # 2. the trapezoid as one weighted input plus a diagonal correction
    gamma = lam * dt  # (b t h)
    ahead = F.pad((1 - lam[:, 1:]) * dt[:, 1:], (0, 0, 0, 1))  # e_t: next beta / alpha, (b t h)
    # -e_t C~_t . B~_t: C~_t and B~_t turn by the same angles, which keep their dot product,
    # so C_t . B_t of a group serves each of its heads (head i reads group i // (h / g))
    dot = (C * B).sum(-1).repeat_interleave(h // B.shape[-2], dim=-1)  # C_t . B_t, (b t h)
    diagonal = -ahead * dot  # (b t h)
    if D is not None:
        diagonal = diagonal + D  # the skip D x_t
    beta0 = (1 - lam[:, 0]) * dt[:, 0]  # beta_0 / alpha_0, (b h)
    h0 = state.ssm + beta0[..., None, None] * torch.einsum(
        "bhp,bhn->bhpn", state.x_prev, state.B_prev
    )  # (b h p n)

    # 3. chunked SSD, with log-decay a_t = dt_t A_t, input weight w_t = gamma_t + e_t and
    #    the diagonal as its skip
    y, ssm = chunked_scan(
        x,
        dt * A,  # (b t h)
        B_rot,
        C_rot,
        chunk_size,
        h0,
        weight=gamma + ahead,
        skip=diagonal,
        matmul_dtype=matmul_dtype,
    )
    # the state in its own storage: slices would keep (b, t, ...) tensors alive
    last = Mamba3State(ssm, phase[:, -1], B_rot[:, -1], x[:, -1])
    return y.to(out_dtype), Mamba3State(*(part.clone() for part in last))


def mamba3_mixed(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    theta: torch.Tensor,
    lam: torch.Tensor,
    D: torch.Tensor | None = None,
    chunk_size: int = 64,
    initial_state: Mamba3State | torch.Tensor | None = None,
) -> tuple[torch.Tensor, Mamba3State]:
    """Mamba-3, chunked, in mixed precision (the ``torch-mixed`` backend):
    :func:`mamba3_torch` with the SSD's in-chunk matmuls on bf16 operands of x's dtype
    (fp32 accumulation); the rotation, the phase cumsum, the trapezoid's weights, the
    decays and every state stay fp32 (:func:`ssmbench.models.mamba2.chunked_scan`).  In
    fp32 it is :func:`mamba3_torch`; fp16 is unavailable
    (:func:`~ssmbench.models.common.mixed_matmul_dtype`).

    Args and returns as :func:`mamba3_torch`.
    """
    matmul_dtype = mixed_matmul_dtype(x)
    return _mamba3_chunked(x, dt, A, B, C, theta, lam, D, chunk_size, initial_state, matmul_dtype)


def mamba3_step(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    theta: torch.Tensor,
    lam: torch.Tensor,
    D: torch.Tensor | None = None,
    state: Mamba3State | torch.Tensor | None = None,
) -> tuple[torch.Tensor, Mamba3State]:
    """One token of Mamba-3 (the recurrent form, for decode); both backends share it.

    Args:
        x: ``(b, h, p)``; dt, A, lam: ``(b, h)``; D: ``(h,)``; B, C: ``(b, g, n)``;
            theta: ``(b, h, r)``; state: a :class:`Mamba3State`, a bare ``(b, h, p, n)``
            SSM state, or None for zeros (no previous token).

    Returns:
        y: ``(b, h, p)`` in the dtype of x and the new :class:`Mamba3State` in float32
        or wider.
    """
    _check_shapes(x, dt, A, B, C, theta, lam, D, token=True)
    out_dtype = x.dtype
    x, dt, A, B, C, theta, lam, D = widen(x, dt, A, B, C, theta, lam, D)
    b, h, p = x.shape
    state = _initial_state(state, b, h, p, B.shape[-1], theta.shape[-1], x)
    phase = state.phase + dt[..., None] * theta  # phi_t, (b h r)
    turn = _turn(phase)  # (b h r) complex
    B_rot, C_rot = _rotate_heads(B, turn), _rotate_heads(C, turn)  # (b h n)
    alpha = torch.exp(dt * A)  # alpha_t = exp(dt_t A_t), (b h)
    beta = (1 - lam) * dt * alpha  # (b h)
    gamma = lam * dt  # (b h)
    ssm = (
        alpha[..., None, None] * state.ssm
        + beta[..., None, None] * torch.einsum("bhp,bhn->bhpn", state.x_prev, state.B_prev)
        + gamma[..., None, None] * torch.einsum("bhp,bhn->bhpn", x, B_rot)
    )  # h_t, (b h p n)
    y = torch.einsum("bhpn,bhn->bhp", ssm, C_rot)  # (b h p)
    if D is not None:
        y = y + D[:, None] * x
    return y.to(out_dtype), Mamba3State(ssm, phase, B_rot, x.clone())  # x: own storage


# --- the fused backend: mamba_ssm's Mamba-3 SISO kernels --------------------------------

MAMBA3_NEEDS_CUDA = (
    "mamba_ssm's Mamba-3 kernels need a CUDA device "
    "(PTX inline assembly and TMA descriptors: the Triton interpreter cannot run them)"
)
MAMBA3_DTYPES = registry.FAMILY["mamba3"].fused_dtypes_why  # bf16 only


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def mamba3_shape_reason(p: int, n: int, r: int) -> str:
    """Why mamba_ssm's Mamba-3 SISO kernels cannot take head dim ``p``, state size ``n``
    and ``r`` rotation angles ("" when they can): p and n powers of two (the step kernel
    loads whole ``tl.arange(0, p)`` and ``(0, n)`` blocks unmasked, the chunked one builds
    TMA descriptors of them), r even and at most n / 2 (both kernels assert
    ``headdim_angles <= headdim_qk // 2 and headdim_angles % 2 == 0``)."""
    if not (_is_power_of_two(p) and _is_power_of_two(n)):
        return (
            f"mamba_ssm's Mamba-3 kernels need power-of-two head dim and state size "
            f"(TMA blocks), got p={p}, n={n}"
        )
    if r % 2 or r > n // 2:
        return f"mamba_ssm's Mamba-3 kernels need an even number of angles r <= n/2, r={r}, n={n}"
    return ""


def _mamba3_check(x: torch.Tensor, B: torch.Tensor, theta: torch.Tensor) -> None:
    """BackendUnavailable where mamba_ssm's Mamba-3 SISO kernels cannot take these inputs."""
    tensors = (x, B, theta)
    if not all(t.is_cuda for t in tensors):
        raise BackendUnavailable(MAMBA3_NEEDS_CUDA)
    if x.dtype != torch.bfloat16:
        raise BackendUnavailable(f"{MAMBA3_DTYPES}, not {x.dtype}")
    reason = mamba3_shape_reason(x.shape[-1], B.shape[-1], theta.shape[-1])
    if reason:
        raise BackendUnavailable(reason)


def _mamba3_inputs(dt, A, lam, theta, h: int, n: int):
    """Our (dt, A, lam, theta) as mamba_ssm's (ADT, DT, Trap, Angles) and a zero bias.

    - ADT = dt A per token and head and DT = dt, float32, time last: ``(b, h, t)`` (or
      ``(b, h)`` for a step), from dt and A ``(b, t, h)`` (or ``(b, h)``);
    - Trap: the kernel applies a sigmoid to it, so Trap = logit(lam), clamped to +-30
      (sigmoid(30) = 1 in float32) so that lam = 0 and 1 stay finite;
    - Angles: the kernel turns them into the rate pi tanh(angle), so Angles = atanh(theta
      / pi); theta must lie in (-pi, pi) (mamba_ssm's blocks produce only such rates).
    """
    dt32 = dt.float()
    adt = dt32 * A.float()  # dt_t A_t, (b t h) or (b h)
    trap = torch.logit(lam.float()).clamp(-30.0, 30.0)
    angles = torch.atanh(theta.float() / math.pi)  # (b t h r) or (b h r)
    bias = torch.zeros(h, n, device=dt.device, dtype=torch.float32)  # (h n)
    if dt.dim() == 3:  # (b t h) -> (b h t)
        adt, dt32, trap = (v.transpose(1, 2) for v in (adt, dt32, trap))
    return adt, dt32, trap, angles, bias


def _mamba3_state(state, b: int, h: int, p: int, n: int, r: int, like: torch.Tensor):
    """Our state (a Mamba3State, a bare ``(b, h, p, n)`` SSM state, or None) as the
    kernels' (angle, ssm, k, v) tuple in float32: the phase, the SSM state, B~ and x of
    the last token (mamba_ssm's K state is also taken after bias and rotation)."""
    if state is None:
        return None
    if not isinstance(state, tuple):
        zeros = like.new_zeros
        state = Mamba3State(state, zeros(b, h, r), zeros(b, h, n), zeros(b, h, p))
    ssm, phase, B_prev, x_prev = state
    return tuple(v.float().contiguous() for v in (phase, ssm, B_prev, x_prev))


def mamba3_fused(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    theta: torch.Tensor,
    lam: torch.Tensor,
    D: torch.Tensor | None = None,
    chunk_size: int = 64,
    initial_state: Mamba3State | torch.Tensor | None = None,
) -> tuple[torch.Tensor, Mamba3State]:
    """Mamba-3 SISO by mamba_ssm's Triton ``mamba3_siso_combined`` (CUDA only, bf16).

    Args:
        as :func:`ssmbench.ops.mamba3`: x ``(b, t, h, p)``; dt, A, lam ``(b, t, h)``; D
            ``(h,)``; B, C ``(b, t, g, n)``; theta ``(b, t, h, r)`` with |theta| < pi;
            initial_state a :class:`Mamba3State`, a bare ``(b, h, p, n)`` state or None.

    Returns:
        y ``(b, t, h, p)`` in the dtype of x and the final :class:`Mamba3State` float32;
        its phase is reduced mod 2 pi (the rotation is the same).

    The kernel's names: Q = C, K = B, V = x (same layouts), Q_bias = K_bias = 0; ADT, DT,
    Trap time last; see :func:`_mamba3_inputs` for Trap and Angles.
    """
    _mamba3_check(x, B, theta)
    module = kernels.mamba_ssm_module("ops.triton.mamba3.mamba3_siso_combined")
    b, _, h, p = x.shape
    n, r = B.shape[-1], theta.shape[-1]
    adt, dt32, trap, angles, bias = _mamba3_inputs(dt, A, lam, theta, h, n)
    out, phase, ssm, B_last, x_last = module.mamba3_siso_combined(
        C,
        B,
        x,
        adt,
        dt32,
        trap,
        bias,
        bias,
        angles,
        D=None if D is None else D.float(),
        Input_States=_mamba3_state(initial_state, b, h, p, n, r, x),
        chunk_size=chunk_size,
        return_final_states=True,
    )
    state = Mamba3State(ssm.float(), phase.float(), B_last.float(), x_last.float())
    return out.to(x.dtype), state


def mamba3_step_fused(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    theta: torch.Tensor,
    lam: torch.Tensor,
    D: torch.Tensor | None = None,
    state: Mamba3State | torch.Tensor | None = None,
) -> tuple[torch.Tensor, Mamba3State]:
    """One token of Mamba-3 by mamba_ssm's Triton ``mamba3_siso_step`` (CUDA only, bf16).

    Args:
        as :func:`ssmbench.ops.mamba3_step`: x ``(b, h, p)``; dt, A, lam ``(b, h)``; D
            ``(h,)``; B, C ``(b, g, n)``; theta ``(b, h, r)``; state as :func:`mamba3_fused`.

    Returns:
        y ``(b, h, p)`` in the dtype of x and the new :class:`Mamba3State` float32.
    """
    _mamba3_check(x, B, theta)
    module = kernels.mamba_ssm_module("ops.triton.mamba3.mamba3_siso_step")
    b, h, p = x.shape
    n, r = B.shape[-1], theta.shape[-1]
    adt, dt32, trap, angles, bias = _mamba3_inputs(dt, A, lam, theta, h, n)
    if state is None:
        state = x.new_zeros(b, h, p, n, dtype=torch.float32)  # the step needs a state
    y, (phase, ssm, B_last, x_last) = module.mamba3_siso_step(
        C,
        B,
        x,
        adt,
        dt32,
        trap,
        bias,
        bias,
        angles,
        D=None if D is None else D.float(),
        Input_States=_mamba3_state(state, b, h, p, n, r, x),
    )
    return y.to(x.dtype), Mamba3State(ssm.float(), phase.float(), B_last.float(), x_last.float())


def fused_block_reason(head_dim: int, d_state: int) -> str:
    """Why a Mamba-3 block of ``head_dim`` and ``d_state`` cannot run the fused kernels
    ("" when it can): p = head_dim, n = d_state, r = :func:`rotation_pairs` (n)."""
    return mamba3_shape_reason(head_dim, d_state, rotation_pairs(d_state))


# op of a verify shape -> why the kernel cannot take its dims (ssmbench.models.kernels)
FUSED_SHAPE_REASONS = {
    "mamba3": lambda p, n, r, **_: mamba3_shape_reason(p, n, r),
    "mamba3_step": lambda p, n, r, **_: mamba3_shape_reason(p, n, r),
    "mamba3_as_ssd": lambda p, n, r, **_: mamba3_shape_reason(p, n, r),
}


def fused_unavailable(device: str | torch.device, phase: str | None = None) -> str:
    """Why the fused backend cannot run on ``device`` ("" when it can; every phase alike):
    a CUDA device (no interpreter), then its packages."""
    if kernels.device_type(device) != "cuda":
        return MAMBA3_NEEDS_CUDA
    return kernels.package_reason(*registry.FAMILY["mamba3"].fused_packages)


MAMBA3_BACKENDS = {
    "naive": mamba3_naive,
    "torch": mamba3_torch,
    "torch-mixed": mamba3_mixed,
    "fused": mamba3_fused,  # mamba_ssm's Mamba-3 SISO kernels (GPU only)
}
# one token: no matmul worth running in half precision, torch-mixed takes torch's step
MAMBA3_STEP_BACKENDS = {
    "naive": mamba3_step,
    "torch": mamba3_step,
    "torch-mixed": mamba3_step,
    "fused": mamba3_step_fused,
}


# |theta| < pi: the rate mamba_ssm's blocks produce (pi tanh(.)); the fused wrapper maps it
# back through atanh(theta / pi), so random rates stay inside
THETA_MAX = 3.0


def random_inputs(
    draws: RandomDraws,
    b: int,
    t: int,
    h: int,
    g: int,
    p: int,
    n: int,
    r: int,
    dt_range: tuple[float, float] = (0.05, 0.5),
) -> dict[str, torch.Tensor | Mamba3State]:
    """Random arguments of :func:`mamba3_torch` (its other backends and its step alike) by
    name, drawn from ``draws`` in this order: x ``(b, t, h, p)`` standard normal; dt
    ``(b, t, h)`` uniform in ``dt_range``; A ``(b, t, h)`` (per token, as the block makes
    it) uniform in [-2, -0.5]; B, C ``(b, t, g, n)`` with variance 1 / n (C . B and the
    outputs O(1), as :func:`ssmbench.models.mamba2.random_inputs`); theta ``(b, t, h, r)``
    uniform in +-THETA_MAX; lam ``(b, t, h)`` uniform in [0, 1]; the initial
    :class:`Mamba3State` (ssm ``(b, h, p, n)``, phase ``(b, h, r)``, B_prev ``(b, h, n)``,
    x_prev ``(b, h, p)``) and D ``(h,)``, standard normal.  ``dt_range`` sets how steep
    the decays are, as in Mamba-2's."""
    x = draws.randn(b, t, h, p)
    dt = draws.rand(b, t, h, low=dt_range[0], high=dt_range[1])
    A = -draws.rand(b, t, h, low=0.5, high=2.0)
    B = draws.randn(b, t, g, n, scale=n**-0.5)
    C = draws.randn(b, t, g, n, scale=n**-0.5)
    theta = draws.rand(b, t, h, r, low=-THETA_MAX, high=THETA_MAX)
    lam = draws.rand(b, t, h, low=0.0, high=1.0)
    initial_state = Mamba3State(
        draws.randn(b, h, p, n), draws.randn(b, h, r), draws.randn(b, h, n), draws.randn(b, h, p)
    )
    D = draws.randn(h)
    return {
        "x": x,
        "dt": dt,
        "A": A,
        "B": B,
        "C": C,
        "theta": theta,
        "lam": lam,
        "D": D,
        "initial_state": initial_state,
    }


# -A_t >= A_FLOOR: the slowest decay a token may ask for (mamba_ssm's Mamba3 ``A_floor``)
A_FLOOR = 1e-4
# Mamba3Mixer's A_mode: mamba_ssm's data-dependent A, or one learned A per head
A_MODES = ("data", "per-head")
# Named variants of the block (the benchmark's ``mamba3`` is the block with none of these
# options): ssmbench.registry.VARIANTS, whose family is mamba3
MAMBA3_VARIANTS: dict[str, dict] = {
    v.name: v.options for v in registry.VARIANTS.values() if v.family == "mamba3"
}


class Mamba3Mixer(nn.Module):
    """The Mamba-3 SISO mixer: mamba_ssm 2.3.2's ``Mamba3`` module with its defaults
    (``is_mimo=False``, ``ngroups=1``, ``rope_fraction=0.5``, ``is_outproj_norm=False``);
    no short conv (Mamba-3 drops it).  Per token (u ``(..., d_model)``):

        z, x, B, C, dd_dt, dd_A, trap, angle = in_proj(u)   one projection, no bias
        B = RMSNorm(B) + B_bias,  C = RMSNorm(C) + C_bias    QK-norm-like, biases per head
        dt = softplus(dd_dt + dt_bias)                       (... h)
        A = min(-softplus(dd_A), -A_FLOOR)                   (... h): per token and head
        lam = sigmoid(trap),  theta = pi tanh(angle)         (... h), (... r) for all heads
        y, state = mamba3(x, dt, A, B, C, theta, lam, D)
        out = out_proj(y * silu(z))

    Sizes: p = head_dim, h = (expand * d_model) // p heads, d_inner = h p (the expanded
    width rounded down to whole heads; mamba_ssm asserts it divides), n = d_state, one
    B/C group (g = 1), which the per-head biases turn into per-head B and C (the op sees
    g = h); r = :func:`~ssmbench.counts.rotation_pairs` (n) = n/4 angles shared by all
    heads (mamba_ssm: rope_fraction 0.5 of n, made even, halved).  in_proj's outputs are
    in mamba_ssm's order, so its weight copies across row for row.

    Init as mamba_ssm: in_proj and out_proj as torch's ``nn.Linear`` (weights uniform in
    +-1/sqrt(fan_in), no bias); dd_A has no init of its own (rows of in_proj), so at init
    A = -softplus(w . u) with w . u near 0, about -log 2 = -0.69; dt log-uniform in
    DT_INIT_RANGE, at least DT_INIT_FLOOR, stored as softplus^-1 in dt_bias; B_bias =
    C_bias = 1; D = 1; RMSNorm weights 1, eps 1e-5.

    Options that change the block (each off by default, i.e. mamba_ssm's; the parity
    ablation of scripts/bench_mamba3_parity.py and :data:`MAMBA3_VARIANTS` use them):

    - ``dt_range``: dt's init range (mamba_ssm's ``dt_min``, ``dt_max``);
    - ``A_mode``: ``"data"`` (mamba_ssm's, above) or ``"per-head"``: one learned A per head,
      -A uniform in A_INIT_RANGE = [1, 16] stored as A_log (Mamba-2's), the same at every
      token; in_proj then has no dd_A rows;
    - ``angle_bound``: theta = angle_bound tanh(angle) (pi, mamba_ssm's), or None for the
      unbounded theta = angle.
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 16,
        expand: int = 2,
        head_dim: int = 64,
        chunk_size: int = 64,
        *,
        dt_range: tuple[float, float] = DT_INIT_RANGE,
        A_mode: str = "data",
        angle_bound: float | None = math.pi,
    ):
        super().__init__()
        if A_mode not in A_MODES:
            raise ValueError(f"unknown A_mode {A_mode!r}; known: {list(A_MODES)}")
        self.A_mode = A_mode
        self.angle_bound = angle_bound
        self.nheads = (expand * d_model) // head_dim  # H
        if self.nheads < 1:
            raise ValueError(f"expand * d_model = {expand * d_model} is less than one head")
        self.head_dim = head_dim  # P
        self.d_inner = self.nheads * head_dim
        self.d_state = d_state  # N
        self.n_angles = rotation_pairs(d_state)  # R
        self.chunk_size = chunk_size

        # mamba_ssm's order: [z, x, B, C, dd_dt, dd_A, trap, angle]
        self.split = [
            self.d_inner,
            self.d_inner,
            d_state,
            d_state,
            self.nheads,
            self.nheads if A_mode == "data" else 0,  # dd_A
            self.nheads,
            self.n_angles,
        ]
        # drawn in mamba_ssm's order (in_proj, dt, then out_proj; the rest draws nothing),
        # so that one seed gives both modules the same weights
        self.in_proj = nn.Linear(d_model, sum(self.split), bias=False)
        self.dt_bias = nn.Parameter(dt_bias_init(self.nheads, dt_range))
        self.B_bias = nn.Parameter(torch.ones(self.nheads, d_state))
        self.C_bias = nn.Parameter(torch.ones(self.nheads, d_state))
        self.B_norm = RMSNorm(d_state, eps=1e-5)
        self.C_norm = RMSNorm(d_state, eps=1e-5)
        self.D = nn.Parameter(torch.ones(self.nheads))
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)
        if A_mode == "per-head":
            A = torch.empty(self.nheads).uniform_(*A_INIT_RANGE)  # -A, (h)
            self.A_log = nn.Parameter(torch.log(A))

    def _op_inputs(self, u: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """z, x ``(..., h, p)``; B, C ``(..., h, n)``; dt, A, lam ``(..., h)``;
        theta ``(..., h, r)`` from the block input u ``(..., d_model)``."""
        z, x, B, C, dd_dt, dd_A, trap, angle = torch.split(self.in_proj(u), self.split, dim=-1)
        z = z.unflatten(-1, (self.nheads, self.head_dim))  # (... h p)
        x = x.unflatten(-1, (self.nheads, self.head_dim))  # (... h p)
        B = self.B_norm(B)[..., None, :] + self.B_bias  # (... h n)
        C = self.C_norm(C)[..., None, :] + self.C_bias  # (... h n)
        dt = F.softplus(dd_dt + self.dt_bias)  # (... h)
        if self.A_mode == "data":
            (dd_A,) = widen(dd_A)  # mamba_ssm takes A in float32
            A = (-F.softplus(dd_A)).clamp(max=-A_FLOOR)  # (... h)
        else:
            A = (-torch.exp(self.A_log)).expand_as(dt)  # (... h), the same at every token
        lam = torch.sigmoid(trap)  # (... h)
        if self.angle_bound is None:
            theta = angle  # (... r)
        else:
            theta = self.angle_bound * torch.tanh(angle)  # (... r)
        theta = theta[..., None, :].expand(*theta.shape[:-1], self.nheads, self.n_angles)
        return z, x, B, C, dt, A, lam, theta

    def forward(self, u: torch.Tensor, backend: str) -> tuple[torch.Tensor, Mamba3State]:
        """u: ``(b, t, d_model)`` -> y ``(b, t, d_model)`` and the cache, the op's final
        :class:`Mamba3State` ``(ssm (b, h, p, n), phase (b, h, r), B_prev (b, h, n),
        x_prev (b, h, p))``, which :meth:`step` continues from."""
        op = pick_backend(MAMBA3_BACKENDS, backend, "Mamba3Mixer")
        z, x, B, C, dt, A, lam, theta = self._op_inputs(u)
        y, state = op(x, dt, A, B, C, theta, lam, D=self.D, chunk_size=self.chunk_size)
        y = y * F.silu(z)  # (b t h p)
        return self.out_proj(y.flatten(-2)), state

    def step(
        self, u_t: torch.Tensor, cache: Mamba3State | None, backend: str
    ) -> tuple[torch.Tensor, Mamba3State]:
        """u_t: ``(b, d_model)``, cache from :meth:`forward` or the last step (or None for
        an empty one) -> y_t ``(b, d_model)`` and the updated cache."""
        step = pick_backend(MAMBA3_STEP_BACKENDS, backend, "Mamba3Mixer.step")
        z, x, B, C, dt, A, lam, theta = self._op_inputs(u_t)
        y, state = step(x, dt, A, B, C, theta, lam, D=self.D, state=cache)
        y = y * F.silu(z)  # (b h p)
        return self.out_proj(y.flatten(-2)), state


def build_mixer(size: Size, d_state: int, layer: int, **options) -> Mamba3Mixer:
    """The Mamba-3 mixer of a run's size preset (``layer`` unused): p = size.head_dim,
    h = size.expand * size.d_model // p, n = d_state, chunk = size.chunk; ``options`` are
    :class:`Mamba3Mixer`'s keyword options (none: mamba_ssm's block)."""
    return Mamba3Mixer(
        size.d_model,
        d_state=d_state,
        expand=size.expand,
        head_dim=size.head_dim,
        chunk_size=size.chunk,
        **options,
    )
