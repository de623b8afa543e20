"""Mamba-2 (Dao & Gu 2024, "Transformers are SSMs: Generalized Models and Efficient
Algorithms Through Structured State Space Duality", arXiv 2405.21060): the SSD operator
in three forms, and the block mixer.

Glossary (axis letter -> paper symbol):

    b  batch                 (batch)
    t  time                  T (the paper's sequence length), token index t
    h  heads                 H
    p  head dim              P
    n  state size            N
    g  groups of B and C     G (each group is shared by h / g heads, like GQA)
    r  heads of one group    H / G (head = g * H / G + r)
    c  chunks                T / Q
    l  time inside a chunk   Q (the chunk or block length), the "target" token
    s  time inside a chunk   Q again, the "source" token (l attends to s <= l)
    z  chunk boundaries      c + 1 (the initial state and the state after every chunk)

The SSD recurrence (eq. 1 with the scalar-times-identity A of section 3):

    h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T         state  (b, h, p, n)
    y_t = h_t C_t + D x_t                              output (b, h, p)

and its dual quadratic ("attention-like") form over a sequence (sections 3-5), with the
1-semiseparable mask L:

    y = (L o C B^T) (dt x),   L[t, s] = exp(A (dt_{s+1} + ... + dt_t)) for s <= t, else 0.

Three forms that must agree (tests pin them to the NumPy reference):

- ``ssd_naive``: a Python loop over time, one small update per token, as the seeds wrote it.
- ``ssd_chunked``: the chunked SSD algorithm of section 6 (Listing 1, "ssd_minimal"):
  the quadratic form inside chunks of Q tokens, the linear recurrence between chunks,
  all as batched matmuls, with no Python loop over time or over chunks.
- ``ssd_step``: one token, for decode.

All three compute in float32 at least (half inputs are widened), return y in the dtype
of x and the state in the compute dtype, as ``models/mamba.py`` does.

What this file leaves out: mamba_ssm's fused Triton kernels (the ``fused`` backend's
job), variable-length packed batches (``seq_idx``), the ``dt_limit`` clamp, and the
sequential state passing between chunks that the kernels use for very long sequences
(here the inter-chunk recurrence is the listing's quadratic-in-chunks matmul).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ssmbench.config import Size
from ssmbench.models.common import RMSNorm, inverse_softplus, pick_backend, widen

Mamba2Cache = tuple[torch.Tensor, torch.Tensor]  # (conv_state (b, conv_dim, d_conv),
#                                                   ssm_state (b, h, p, n))


def _check_shapes(
    x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor
) -> tuple[int, int]:
    """(g, h // g) after checking that the shapes of one SSD call fit together; x may
    have a t axis or not (the step), the others follow it."""
    *lead, h, p = x.shape
    if tuple(dt.shape) != (*lead, h):
        raise ValueError(f"dt has shape {tuple(dt.shape)}, expected {(*lead, h)} from x")
    if tuple(A.shape) != (h,):
        raise ValueError(f"A has shape {tuple(A.shape)}, expected ({h},): one per head")
    if B.dim() != x.dim() or tuple(B.shape[:-2]) != tuple(lead) or B.shape != C.shape:
        raise ValueError(
            f"B {tuple(B.shape)} and C {tuple(C.shape)} must both be {(*lead, 'g', 'n')}"
        )
    g = B.shape[-2]
    if g == 0 or h % g:
        raise ValueError(f"heads h={h} are not divisible by groups g={g}")
    return g, h // g


def ssd_naive(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    chunk_size: int = 64,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The SSD recurrence as the seeds wrote it: a Python loop over time, one small
    state update per token.

    Args:
        x: ``(b, t, h, p)``; dt: ``(b, t, h)``, already positive; A: ``(h,)``, negative;
            B, C: ``(b, t, g, n)`` with h divisible by g; D: ``(h,)`` or None;
            initial_state: ``(b, h, p, n)`` or None for zeros.  One float dtype for all
            but the state.
        chunk_size: unused; accepted so that every backend has one signature.

    Returns:
        y: ``(b, t, h, p)`` in the dtype of x, and the final state ``(b, h, p, n)`` in
        float32 or wider.
    """
    _, heads_per_group = _check_shapes(x, dt, A, B, C)
    out_dtype = x.dtype
    x, dt, A, B, C, D, initial_state = widen(x, dt, A, B, C, D, initial_state)
    b, T, h, p = x.shape
    n = B.shape[-1]
    B = B.repeat_interleave(heads_per_group, dim=2)  # (b t h n), head i reads group i // (h/g)
    C = C.repeat_interleave(heads_per_group, dim=2)  # (b t h n)
    decay = torch.exp(dt * A)  # (b t h), exp(dt A): ZOH of the scalar A
    x_dt = x * dt[..., None]  # (b t h p), dt x: Euler for B

    state = x.new_zeros(b, h, p, n) if initial_state is None else initial_state
    ys = []
    for t in range(T):
        update = x_dt[:, t, :, :, None] * B[:, t, :, None, :]  # (b h p n), dt x_t B_t^T
        state = decay[:, t, :, None, None] * state + update  # eq. 1, (b h p n)
        ys.append(torch.einsum("bhpn,bhn->bhp", state, C[:, t]))  # h_t C_t, (b h p)
    y = torch.stack(ys, dim=1)  # (b t h p)
    if D is not None:
        y = y + D[:, None] * x
    return y.to(out_dtype), state


# Log-decays below this are raised to it before the exp: exp(-60) = 8.7e-27 is zero next to
# any float32 sum it enters, yet far from float32's subnormal range (below exp(-87.3)).
# Subnormal or -inf arguments and results send torch's CPU exp and MKL's matmul down slow
# paths (measured 20-160x slower on an AVX-512 Xeon), which a realistic decay (dt A = -1.6 per
# token, so -100 within one 64-token chunk) would hit all the time.
LOG_DECAY_FLOOR = -60.0


def _decay(log_decay: torch.Tensor) -> torch.Tensor:
    """exp(log_decay) for ``log_decay <= 0``, with the argument clamped to
    [LOG_DECAY_FLOOR, 0]: never the exp of a positive number, never a subnormal result."""
    return log_decay.clamp(LOG_DECAY_FLOOR, 0.0).exp_()


def _causal_mask(length: int, device: torch.device) -> torch.Tensor:
    """``(length, length)`` bool, True on and below the diagonal (source s <= target l)."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def _segsum_decay(a_cumsum: torch.Tensor) -> torch.Tensor:
    """The decay matrix of one chunk from the prefix sums of its log-decays, unmasked.

    Out ``[..., l, s] = exp(a_{s+1} + ... + a_l) = exp(cumsum_l - cumsum_s)`` on and below
    the diagonal, the 1-semiseparable mask L inside one chunk; above it the
    difference is positive and the clamp in :func:`_decay` makes it exp(0) = 1: the caller
    applies the causal mask to C B^T (per group, h / g times smaller than L) rather than
    here.  On and below the diagonal the difference is <= 0 in floating point too (a
    cumsum of non-positive terms does not increase), and the prefix sums of one chunk
    stay short, so their differences lose little.

    Args:
        a_cumsum: ``(..., l)``, the inclusive cumsum of a non-positive log-decay.

    Returns:
        ``(..., l, l)``, the same dtype.
    """
    diff = a_cumsum[..., :, None] - a_cumsum[..., None, :]  # (... l s)
    return diff.clamp_(LOG_DECAY_FLOOR, 0.0).exp_()  # (... l s), in place: diff is ours


def _segsum_decay_exact(a: torch.Tensor) -> torch.Tensor:
    """The masked decay matrix of a sequence of log-decays, as the listing's ``segsum``.

    Out ``[..., i, j] = exp(a_{j+1} + ... + a_i)`` for ``j <= i``, 0 above the diagonal,
    each segment summed on its own (a cumsum down the columns of the masked square), not
    as a difference of two long prefix sums: exact over many chunks of strong decay.

    Args:
        a: ``(..., m)``, non-positive log-decays.

    Returns:
        ``(..., m, m)``, the same dtype.
    """
    m = a.shape[-1]
    causal = _causal_mask(m, a.device)
    terms = torch.where(causal.tril(-1), a[..., :, None], 0.0)  # (... i j), a_i where j < i
    segsum = torch.cumsum(terms, dim=-2)  # (... i j), a_{j+1} + ... + a_i
    return _decay(segsum) * causal  # (... i j)


def ssd_chunked(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    chunk_size: int = 64,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunked SSD algorithm (Dao & Gu 2024, section 6 and Listing 1).

    The sequence is cut into c chunks of Q = ``chunk_size`` tokens (the last one padded
    with dt = 0, which neither decays nor adds to the state).  The semiseparable matrix
    ``M = L o C B^T`` then splits into four blocks, numbered as in the listing:

    1. diagonal blocks: the quadratic (attention-like) form inside each chunk,
       ``Y_diag = (L o C B^T) (dt x)``;
    2. chunk states: the state each chunk would leave from a zero start,
       ``S_c = sum_s exp(A (dt_{s+1} + ... + dt_Q)) dt_s x_s B_s^T``;
    3. the recurrence between chunks, on the c + 1 chunk boundaries (the initial state
       first): ``H_z = sum_{c' <= z} exp(A (dt of chunks c'+1 .. z)) S_{c'}``, one matmul
       with the decay matrix of the chunk decays, not a loop over chunks;
    4. state to output: ``Y_off = exp(A (dt_1 + ... + dt_l)) C_l H_z`` from the state
       H_z entering each chunk z;

    and ``y = Y_diag + Y_off + D x``.  Every decay is the exp of a non-positive
    log-decay clamped at LOG_DECAY_FLOOR (a decay below exp(-60) counts as exp(-60)).
    Every block is a batched matmul over (batch, heads, chunks); inside, the heads are
    laid out first, ``(b, g, r, c, l, p)`` with head = (g r), so that each matmul reads
    its operands in place.

    Args:
        as :func:`ssd_naive`; chunk_size: Q, any positive value gives the same result
        (it trades the quadratic work inside chunks against the work between them).

    Returns:
        y: ``(b, t, h, p)`` in the dtype of x, and the final state ``(b, h, p, n)`` in
        float32 or wider.
    """
    g, r = _check_shapes(x, dt, A, B, C)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    out_dtype = x.dtype
    x, dt, A, B, C, D, initial_state = widen(x, dt, A, B, C, D, initial_state)
    # Without a backward pass to serve, two large products are made in place or straight
    # into their output (below): a fresh buffer of t h Q floats costs about as much as the
    # product itself on the CPU (page faults), and the op is memory-bound outside its matmuls
    inference = not torch.is_grad_enabled() or not any(
        v is not None and v.requires_grad for v in (x, dt, A, B, C, D, initial_state)
    )
    b, T, h, p = x.shape
    n = B.shape[-1]
    Q = chunk_size
    pad = -T % Q
    c = (T + pad) // Q

    # 0. cut into chunks, heads first; pad the time axis to c * Q tokens with dt = 0
    # (decay 1, no input) and discretise (eq. 1): dt x for the input, dt A for the decay
    x_in = F.pad(x, (0, 0, 0, 0, 0, pad)) if pad else x  # (b cQ h p)
    dt = F.pad(dt, (0, 0, 0, pad)) if pad else dt  # (b cQ h)
    B = F.pad(B, (0, 0, 0, 0, 0, pad)) if pad else B  # (b cQ g n)
    C = F.pad(C, (0, 0, 0, 0, 0, pad)) if pad else C  # (b cQ g n)
    dt = dt.reshape(b, c, Q, g, r).permute(0, 3, 4, 1, 2).contiguous()  # (b g r c l)
    X = dt[..., None] * x_in.reshape(b, c, Q, g, r, p).permute(0, 3, 4, 1, 2, 5)  # (b g r c l p)
    X = X.contiguous()  # already is: the contiguous dt came first
    B = B.reshape(b, c, Q, g, n).permute(0, 3, 1, 2, 4).contiguous()  # (b g c s n)
    C = C.reshape(b, c, Q, g, n).permute(0, 3, 1, 2, 4).contiguous()  # (b g c l n)
    a_cumsum = torch.cumsum(dt * A.view(g, r, 1, 1), dim=-1)  # (b g r c l), log decay <= 0

    # 1. diagonal blocks: Y_diag[l] = sum_{s <= l} (C_l . B_s) L[l, s] dt_s x_s
    CB = torch.einsum("bgcln,bgcsn->bgcls", C, B).tril_()  # (b g c l s), s <= l only;
    # shared by the r heads of a group (in place: no backward needs the matmul's output)
    L = _segsum_decay(a_cumsum)  # (b g r c l s)
    if inference:
        M = L.mul_(CB[:, :, None])  # (b g r c l s), L o C B^T, in place
    else:
        M = L * CB[:, :, None]  # (b g r c l s), L o C B^T; the backward of exp needs L
    Y_diag = torch.einsum("bgrcls,bgrcsp->bgrclp", M, X)  # (b g r c l p)

    # 2. chunk states: S_c = sum_s exp(a_{s+1} + ... + a_Q) dt_s x_s B_s^T
    decay_to_end = _decay(a_cumsum[..., -1:] - a_cumsum)  # (b g r c s)
    B_decayed = B[:, :, None] * decay_to_end[..., None]  # (b g r c s n)
    states = torch.einsum("bgrcsp,bgrcsn->bgrcpn", X, B_decayed)  # (b g r c p n)

    # 3. recurrence between chunks, on the boundaries z = 0 .. c: H_z, the state after z
    # chunks, is sum_{c' <= z} exp(a of chunks c'+1 .. z) S_c', with S_0 the initial state
    if initial_state is None:
        h0 = states.new_zeros(b, g, r, 1, p, n)  # (b g r 1 p n)
    else:
        h0 = initial_state.view(b, g, r, 1, p, n)  # (b g r 1 p n)
    states = torch.cat([h0, states], dim=3)  # (b g r c+1 p n)
    chunk_decay = _segsum_decay_exact(F.pad(a_cumsum[..., -1], (1, 0)))  # (b g r c+1 c+1)
    H = torch.einsum("bgrzc,bgrcpn->bgrzpn", chunk_decay[..., :-1, :], states)  # (b g r c p n)
    final_state = torch.einsum("bgrc,bgrcpn->bgrpn", chunk_decay[..., -1, :], states)
    final_state = final_state.reshape(b, h, p, n)  # (b h p n), H_c

    # 4. state to output: Y_off[l] = exp(a_1 + ... + a_l) C_l H_z from the state H_z
    # entering the chunk, added onto Y_diag in the same batched matmul, over (b g r c)
    C_decayed = C[:, :, None] * _decay(a_cumsum)[..., None]  # (b g r c l n)
    Y = Y_diag.flatten(0, 3).baddbmm_(
        C_decayed.flatten(0, 3), H.flatten(0, 3).transpose(1, 2)
    )  # (bgrc l p), in place: no backward needs Y_diag itself

    # the heads back inside each token: a strided view, copied once (with + D x)
    Y = Y.view(b, g, r, c * Q, p).permute(0, 3, 1, 2, 4).reshape(b, c * Q, h, p)[:, :T]
    if D is None:
        y = Y.contiguous()  # (b t h p)
    elif inference:
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # (b t h p), contiguous
        y = torch.addcmul(Y, x, D[:, None], out=y)  # + D x
    else:
        y = Y.contiguous().addcmul_(x, D[:, None])  # (b t h p), + D x
    return y.to(out_dtype), final_state


def ssd_step(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of SSD (the recurrent form, for decode).

    Args:
        x: ``(b, h, p)``; dt: ``(b, h)``, positive; A: ``(h,)``, negative;
            B, C: ``(b, g, n)``; D: ``(h,)`` or None; state: ``(b, h, p, n)`` or None
            for zeros.

    Returns:
        y: ``(b, h, p)`` in the dtype of x and the new state ``(b, h, p, n)`` in float32
        or wider.  Both backends share this form: one token has no loop over time to
        vectorise.
    """
    _, heads_per_group = _check_shapes(x, dt, A, B, C)
    out_dtype = x.dtype
    x, dt, A, B, C, D, state = widen(x, dt, A, B, C, D, state)
    B = B.repeat_interleave(heads_per_group, dim=1)  # (b h n)
    C = C.repeat_interleave(heads_per_group, dim=1)  # (b h n)
    update = (x * dt[..., None])[..., None] * B[:, :, None, :]  # (b h p n), dt x B^T
    if state is None:
        state = update  # eq. 1 from h_{-1} = 0
    else:
        state = torch.addcmul(update, torch.exp(dt * A)[..., None, None], state)  # eq. 1
    y = torch.einsum("bhpn,bhn->bhp", state, C)  # (b h p)
    if D is not None:
        y = y + D[:, None] * x
    return y.to(out_dtype), state


SSD_BACKENDS = {"naive": ssd_naive, "torch": ssd_chunked}


class Mamba2Mixer(nn.Module):
    """The Mamba-2 block's mixer (Dao & Gu 2024, figure 6), as mamba_ssm's Mamba2Simple:

        z, xBC, dt = in_proj(x)                 widths E*D, E*D + 2GN, H
        xBC = silu(causal depthwise conv(xBC))  width d_conv
        x, B, C = xBC                           x as H heads of P
        y = ssd(x, softplus(dt + dt_bias), -exp(A_log), B, C, D)
        out = out_proj(norm(y * silu(z)))       gated RMSNorm (norm after the gate)

    Init as mamba_ssm: A uniform in [1, 16] per head (stored as log), D = 1,
    dt log-uniform in [dt_min, dt_max] (at least dt_init_floor) stored as the inverse
    softplus in dt_bias.

    The inner width ``expand * d_model`` is cut into ``nheads = d_inner // head_dim`` heads;
    head_dim must divide it (as mamba_ssm requires), and nheads must be a multiple of
    ngroups.
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 64,
        d_conv: int = 4,
        expand: int = 2,
        head_dim: int = 64,
        ngroups: int = 1,
        chunk_size: int = 64,
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
        dt_init_floor: float = 1e-4,
        A_init_range: tuple[float, float] = (1.0, 16.0),
    ):
        super().__init__()
        self.d_inner = expand * d_model  # E * D
        if self.d_inner % head_dim:
            raise ValueError(
                f"head_dim={head_dim} does not divide d_inner = expand * d_model = {self.d_inner}"
            )
        self.nheads = self.d_inner // head_dim  # H
        if self.nheads % ngroups:
            raise ValueError(f"heads {self.nheads} are not divisible by ngroups={ngroups}")
        self.head_dim = head_dim  # P
        self.d_state = d_state  # N
        self.ngroups = ngroups  # G
        self.d_conv = d_conv
        self.chunk_size = chunk_size  # Q
        self.conv_dim = self.d_inner + 2 * ngroups * d_state  # x, B, C go through the conv

        self.in_proj = nn.Linear(d_model, self.d_inner + self.conv_dim + self.nheads, bias=False)
        self.conv1d = nn.Conv1d(
            self.conv_dim,
            self.conv_dim,
            kernel_size=d_conv,
            groups=self.conv_dim,
            padding=d_conv - 1,
            bias=True,
        )
        log_dt = torch.rand(self.nheads) * (math.log(dt_max) - math.log(dt_min))
        dt = torch.exp(log_dt + math.log(dt_min)).clamp(min=dt_init_floor)  # (h)
        self.dt_bias = nn.Parameter(inverse_softplus(dt))
        A = torch.empty(self.nheads).uniform_(*A_init_range)  # (h)
        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.ones(self.nheads))
        self.norm = RMSNorm(self.d_inner)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def _split_xBC(self, xBC: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x ``(..., h, p)``, B and C ``(..., g, n)`` from the conv output ``(..., conv_dim)``."""
        gn = self.ngroups * self.d_state
        x, B, C = torch.split(xBC, [self.d_inner, gn, gn], dim=-1)
        x = x.unflatten(-1, (self.nheads, self.head_dim))  # (... h p)
        B = B.unflatten(-1, (self.ngroups, self.d_state))  # (... g n)
        C = C.unflatten(-1, (self.ngroups, self.d_state))  # (... g n)
        return x, B, C

    def _gate_out(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """out_proj(norm(y * silu(z))): y ``(..., h, p)``, z ``(..., d_inner)``."""
        y = y.flatten(-2)  # (... d_inner)
        return self.out_proj(self.norm(y * F.silu(z)))

    def forward(self, u: torch.Tensor, backend: str) -> tuple[torch.Tensor, Mamba2Cache]:
        """u: ``(b, t, d_model)`` -> y ``(b, t, d_model)`` and the cache
        ``(conv_state (b, conv_dim, d_conv), ssm_state (b, h, p, n))`` that decode
        continues from: conv_state holds the last d_conv conv inputs (zeros before the
        sequence)."""
        ssd = pick_backend(SSD_BACKENDS, backend, "Mamba2Mixer")
        T = u.shape[1]
        z, xBC, dt = torch.split(
            self.in_proj(u), [self.d_inner, self.conv_dim, self.nheads], dim=-1
        )  # (b t d_inner), (b t conv_dim), (b t h)
        xBC = xBC.transpose(1, 2)  # (b conv_dim t)
        conv_state = F.pad(xBC, (max(self.d_conv - T, 0), 0))[..., -self.d_conv :]
        xBC = F.silu(self.conv1d(xBC)[..., :T]).transpose(1, 2)  # (b t conv_dim), causal
        x, B, C = self._split_xBC(xBC)  # (b t h p), (b t g n), (b t g n)
        dt = F.softplus(dt + self.dt_bias)  # (b t h)
        A = -torch.exp(self.A_log)  # (h)
        y, ssm_state = ssd(x, dt, A, B, C, D=self.D, chunk_size=self.chunk_size)
        return self._gate_out(y, z), (conv_state, ssm_state)

    def step(
        self, u_t: torch.Tensor, cache: Mamba2Cache | None, backend: str
    ) -> tuple[torch.Tensor, Mamba2Cache]:
        """u_t: ``(b, d_model)``, cache from :meth:`forward` or the last step (or None for
        an empty one) -> y_t ``(b, d_model)`` and the updated cache."""
        pick_backend(SSD_BACKENDS, backend, "Mamba2Mixer.step")  # one step for both
        z, xBC, dt = torch.split(
            self.in_proj(u_t), [self.d_inner, self.conv_dim, self.nheads], dim=-1
        )  # (b d_inner), (b conv_dim), (b h)
        if cache is None:
            conv_state = xBC.new_zeros(xBC.shape[0], self.conv_dim, self.d_conv)
            ssm_state = None
        else:
            conv_state, ssm_state = cache
        conv_state = torch.cat([conv_state[..., 1:], xBC[..., None]], dim=-1)  # (b conv_dim w)
        xBC = torch.einsum("bdw,dw->bd", conv_state, self.conv1d.weight[:, 0])
        xBC = F.silu(xBC + self.conv1d.bias)  # (b conv_dim)
        x, B, C = self._split_xBC(xBC)  # (b h p), (b g n), (b g n)
        dt = F.softplus(dt + self.dt_bias)  # (b h)
        A = -torch.exp(self.A_log)  # (h)
        y, ssm_state = ssd_step(x, dt, A, B, C, D=self.D, state=ssm_state)  # (b h p)
        return self._gate_out(y, z), (conv_state, ssm_state)


def build_mixer(size: Size, d_state: int, layer: int) -> Mamba2Mixer:
    """The Mamba-2 mixer of a run's size preset (``layer`` unused; one group of B, C)."""
    return Mamba2Mixer(
        size.d_model,
        d_state=d_state,
        d_conv=size.d_conv,
        expand=size.expand,
        head_dim=size.head_dim,
        ngroups=1,
        chunk_size=size.chunk,
    )
