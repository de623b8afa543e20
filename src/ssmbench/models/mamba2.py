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
of x and the state in the compute dtype, as ``models/mamba.py`` does.  ``ssd_mixed`` (the
``torch-mixed`` backend) is ``ssd_chunked`` with its in-chunk matmuls in bf16 (fp32
accumulation, decays and state), as mamba_ssm's kernels run them; its decode step is
``ssd_step``.

The ``fused`` backend wraps mamba_ssm's Triton kernels behind the same signatures:
``ssd_fused`` (``mamba_chunk_scan_combined``) and ``ssd_step_fused`` (the per-head form of
``selective_state_update``); :func:`fused_unavailable` says where they cannot run
(:mod:`ssmbench.models.kernels` holds what every family's fused wrappers share).

What this file leaves out: variable-length packed batches (``seq_idx``), the ``dt_limit``
clamp, and the sequential state passing between chunks that the kernels use for very long
sequences (here the inter-chunk recurrence is the listing's quadratic-in-chunks matmul).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ssmbench.matrix import Size
from ssmbench.models import kernels
from ssmbench.models.common import (
    A_INIT_RANGE,
    LOG_DECAY_FLOOR,
    CausalConv1d,
    RandomDraws,
    RMSNorm,
    cumsum,
    dt_bias_init,
    mixed_matmul_dtype,
    pick_backend,
    widen,
)
from ssmbench.registry import FAMILY

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
    # one token at a time (unbind, not x[:, t]: the backward of indexing would write a
    # zero gradient of the whole sequence for every token, T^2 work in training)
    tokens = zip(x_dt.unbind(1), B.unbind(1), C.unbind(1), decay.unbind(1), strict=True)
    for x_t, B_t, C_t, decay_t in tokens:
        update = x_t[..., None] * B_t[:, :, None, :]  # (b h p n), dt x_t B_t^T
        state = decay_t[..., None, None] * state + update  # eq. 1, (b h p n)
        ys.append(torch.einsum("bhpn,bhn->bhp", state, C_t))  # h_t C_t, (b h p)
    y = torch.stack(ys, dim=1)  # (b t h p)
    if D is not None:
        y = y + D[:, None] * x
    return y.to(out_dtype), state


def _decay(log_decay: torch.Tensor) -> torch.Tensor:
    """exp(log_decay) for ``log_decay <= 0``, with the argument clamped to
    [LOG_DECAY_FLOOR, 0]: never the exp of a positive number, never a subnormal result
    (see :data:`~ssmbench.models.common.LOG_DECAY_FLOOR`)."""
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
    segsum = cumsum(terms, dim=-2)  # (... i j), a_{j+1} + ... + a_i
    return _decay(segsum) * causal  # (... i j)


def _exp_within(log_value: torch.Tensor) -> torch.Tensor:
    """exp(log_value) with the argument clamped to [LOG_DECAY_FLOOR, -LOG_DECAY_FLOOR]
    first: one factor of a split in-chunk decay (see :func:`chunked_scan`), in float32's
    normal range, and so is its product with any input it scales."""
    return log_value.clamp(LOG_DECAY_FLOOR, -LOG_DECAY_FLOOR).exp_()


def _matmul(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``a @ b`` with both operands in ``dtype`` (bf16: torch accumulates in fp32), the
    product in a's dtype; the plain product when a and b are in ``dtype`` already."""
    if a.dtype == dtype and b.dtype == dtype:
        return a @ b
    return (a.to(dtype) @ b.to(dtype)).to(a.dtype)


def chunked_scan(
    x: torch.Tensor,
    log_decay: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    initial_state: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    skip: torch.Tensor | None = None,
    matmul_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunked SSD algorithm (Dao & Gu 2024, section 6 and Listing 1) for

        h_t = exp(a_t) h_{t-1} + w_t x_t B_t^T,    y_t = h_t C_t + k_t x_t,

    shared by Mamba-2 (w = dt, a = dt A, k = D) and Mamba-3 (w and k from the trapezoid).

    The sequence is cut into c chunks of Q = ``chunk_size`` tokens (the last one padded
    with a = 0 and x = 0, which leave the state alone), and the listing's four blocks
    are batched matmuls:

    1. inside a chunk, ``Y_diag[l] = sum_{s <= l} exp(cum_l - cum_s) (C_l . B_s) w_s x_s``,
       ``cum`` the chunk's inclusive prefix sum of a.  The decay is split around the
       middle m of the chunk's log-decay range, ``exp(cum_l - m) exp(m - cum_s)`` (the
       rank-one form of a semiseparable block; GLA, Yang et al. 2023, section 4, splits
       its decays the same way), so no ``(head, l, s)`` decay matrix is built: the
       factors scale x and y when a group of r > 1 heads shares B and C (then one
       ``(l, s) @ (s, r p)`` matmul serves the group), else B and C themselves;
    2. each chunk's state from a zero start, ``S = exp(m) B^T (exp(m - cum_s) w_s x_s)``;
    3. between chunks, the state entering each chunk: one matmul with the decay matrix of
       the chunk totals (a stable segment sum, exact over many chunks);
    4. state to output, ``Y_off[l] = exp(cum_l - m) C_l (exp(m) H)``, added to Y_diag.

    For a chunk of total log-decay -R the factors lie within e^+-R/2.  Where R exceeds
    ``-2 LOG_DECAY_FLOOR`` (a head that forgets within the chunk: float32 cannot hold its
    factors) that head's chunk is recomputed with the exact decay matrix,
    ``exp(cum_l - cum_s)``, floored at e^LOG_DECAY_FLOOR.

    With ``matmul_dtype`` bf16 (the ``torch-mixed`` backend) the operands of blocks 1, 2
    and 4 are rounded to bf16 once their decay factors are on them, and torch multiplies
    them with fp32 accumulation, as mamba_ssm's chunk kernels do; the prefix sums, the
    exps, block 3 (the state passed between chunks) and the state stay in fp32.  C B^T
    stays bf16 as the next product's operand, Y_diag until block 4 adds the state's part in
    the same bf16 GEMM; the chunk states and Y come back to fp32.

    Args:
        x: ``(b, t, h, p)``; log_decay: ``(b, t, h)``, a_t <= 0; B, C: ``(b, t, g, n)``,
            h divisible by g (head = g * (h / g) + r); initial_state: ``(b, h, p, n)`` or
            None for zeros; weight: ``(b, t, h)`` or None for 1; skip: ``(h,)``,
            ``(b, t, h)`` or None.  One float dtype of at least 32 bits.
        chunk_size: Q; any positive value gives the same result.
        matmul_dtype: the dtype of the in-chunk matmuls' operands; None for x's.

    Returns:
        y ``(b, t, h, p)`` and the final state ``(b, h, p, n)``.
    """
    b, T, h, p = x.shape
    g, n = B.shape[-2:]
    r = h // g
    Q = max(1, min(chunk_size, T))  # a short sequence is one chunk, unpadded
    pad = -T % Q
    c = (T + pad) // Q
    if pad:
        x, B, C = (F.pad(v, (0, 0, 0, 0, 0, pad)) for v in (x, B, C))  # (b cQ . .)
        log_decay = F.pad(log_decay, (0, 0, 0, pad))  # (b cQ h)
        if weight is not None:
            weight = F.pad(weight, (0, 0, 0, pad))  # (b cQ h)
        if skip is not None and skip.dim() == 3:
            skip = F.pad(skip, (0, 0, 0, pad))  # (b cQ h)
    bgc = b * g * c
    low = x.dtype if matmul_dtype is None else matmul_dtype  # the matmul operands' dtype

    def by_group(v: torch.Tensor) -> torch.Tensor:
        """(b c l g ...) -> (bgc, l, ...): a matmul operand; a view when g == 1."""
        return v.movedim(3, 1).reshape(bgc, Q, -1)

    # token-major chunked views: (b c l g r .)
    X = x.view(b, c, Q, g, r, p)
    B = B.view(b, c, Q, g, n)
    C = C.view(b, c, Q, g, n)
    cum = cumsum(log_decay.view(b, c, Q, g, r), dim=2)  # (b c l g r), <= 0
    total = cum[:, :, -1:]  # (b c 1 g r), the chunk's log-decay -R
    middle = 0.5 * total  # (b c 1 g r), m
    w_in = _exp_within(middle - cum)  # (b c l g r), exp(m - cum_s)
    if weight is not None:
        w_in = w_in * weight.view(b, c, Q, g, r)  # (b c l g r), w_s exp(m - cum_s)
    w_out = _exp_within(cum - middle)  # (b c l g r), exp(cum_l - m)
    # per (b g c r): exp(m), with m floored so that a steep chunk's stays normal
    to_mid = _exp_within(middle[:, :, 0]).movedim(2, 1)  # (b g c r)
    if r == 1:  # B and C per head: scale them (n wide) rather than x and y (p wide)
        Bs, Cs, Xs = B * w_in, C * w_out, X[..., 0, :]  # (b c l g n), (b c l g n), (b c l g p)
    else:
        Bs, Cs, Xs = B, C, X * w_in[..., None]  # (b c l g n), (b c l g n), (b c l g r p)

    Cs, Xs = by_group(Cs).to(low), by_group(Xs).to(low)  # (bgc l n), (bgc l rp)
    # B^T in its own storage: both products that read it then take a row-major operand,
    # which CPU GEMMs run faster than a transposed one (1.8x for C B^T here)
    Bs_t = Bs.permute(0, 3, 1, 4, 2).reshape(bgc, n, Q).to(low)  # (bgc n s)

    # 1. diagonal blocks: tril(C B^T) x, with the split decay on the operands
    CB = torch.bmm(Cs, Bs_t).tril_()  # (bgc l s), s <= l
    Y = torch.bmm(CB, Xs)  # (bgc l rp)

    # 2. chunk states, transposed (n, r p): S = exp(m) B^T x  (the factors from 1.)
    S = torch.bmm(Bs_t, Xs).to(x.dtype).view(b, g, c, n, r, p)
    S = S.mul_(to_mid[:, :, :, None, :, None])  # (b g c n r p)

    steep = (total[:, :, 0] < 2 * LOG_DECAY_FLOOR).movedim(2, 1)  # (b g c r)
    if steep.any():
        ib, ig, ic, ir = steep.nonzero(as_tuple=True)  # k (chunk, head) pairs
        cum_k = cum[ib, ic, :, ig, ir]  # (k l)
        x_k = X[ib, ic, :, ig, ir]  # (k s p)
        if weight is not None:
            x_k = x_k * weight.view(b, c, Q, g, r)[ib, ic, :, ig, ir][..., None]
        B_k, C_k = B[ib, ic, :, ig], C[ib, ic, :, ig]  # (k s n), (k l n)
        to_end = _decay(cum_k[:, -1:] - cum_k)  # (k s), exp(cum_Q - cum_s)
        S[ib, ig, ic, :, ir] = _matmul(B_k.mT, x_k * to_end[..., None], low)  # (k n p), exact

    # 3. between chunks: H_z = sum_{j <= z} exp(total of chunks j+1 .. z) S'_j on the
    # chunk boundaries z = 0 .. c, with S'_0 the initial state and S'_j = S_{j-1}
    S = S.permute(0, 1, 4, 2, 3, 5)  # (b g r c n p)
    if initial_state is None:
        h0 = S.new_zeros(b, g, r, 1, n, p)
    else:
        h0 = initial_state.view(b, g, r, 1, p, n).transpose(-1, -2)  # (b g r 1 n p)
    S = torch.cat([h0, S], dim=3).flatten(-2)  # (b g r c+1 np)
    totals = F.pad(total[:, :, 0].permute(0, 2, 3, 1), (1, 0))  # (b g r c+1), 0 first
    W = _segsum_decay_exact(totals)  # (b g r c+1 c+1)
    H = (W[..., :-1, :] @ S).view(b, g, r, c, n, p)  # (b g r c n p), entering each chunk
    final = (W[..., -1:, :] @ S).view(b, g, r, n, p)  # (b g r n p), after the last chunk

    # 4. state to output, Y += exp(cum_l - m) C_l (exp(m) H), r heads of a group at once
    H = H.permute(0, 1, 3, 4, 2, 5)  # (b g c n r p)
    H_mid = (H * to_mid[:, :, :, None, :, None]).reshape(bgc, n, r * p).to(low)
    Y = Y.baddbmm_(Cs, H_mid).to(x.dtype)  # (bgc l rp), Y_diag + Y_off in one accumulator
    Y = Y.view(b, g, c, Q, r, p).movedim(1, 3)  # (b c l g r p)
    if r > 1:
        Y = Y.mul_(w_out[..., None])  # (b c l g r p)
    if steep.any():
        L = _segsum_decay(cum_k)  # (k l s), exp(cum_l - cum_s), 1 above the diagonal
        CB_k = _matmul(C_k, B_k.mT, low).tril_()  # (k l s)
        Y_k = _matmul(L * CB_k, x_k, low)  # (k l p), exact Y_diag
        Y_off = _matmul(C_k, H[ib, ig, ic, :, ir], low)  # (k l p)
        Y_k = Y_k.addcmul_(_decay(cum_k)[..., None], Y_off)  # + Y_off
        Y[ib, ic, :, ig, ir] = Y_k

    # y = Y + k x, token-major (b t h p); the pass that adds k x also does the layout
    final = final.transpose(-1, -2).reshape(b, h, p, n)
    Y = Y.flatten(3, 4)  # (b c l h p), a view; token-major in memory when g == 1
    if skip is None:
        return Y.reshape(b, c * Q, h, p)[:, :T].contiguous(), final
    k_x = skip.view(1, 1, 1, h, 1) if skip.dim() == 1 else skip.view(b, c, Q, h, 1)
    x = x.view(b, c, Q, h, p)
    if torch.is_grad_enabled() and any(v.requires_grad for v in (Y, x, k_x)):
        y = (x * k_x).add_(Y)  # (b c l h p), laid out as x
    else:
        y = torch.addcmul(Y, x, k_x, out=torch.empty_like(x))  # (b c l h p)
    return y.view(b, c * Q, h, p)[:, :T].contiguous(), final


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
    """SSD by the chunked algorithm (Dao & Gu 2024, section 6): :func:`chunked_scan` with
    the input ``dt x`` and the log-decay ``dt A`` (eq. 1's discretisation), plus ``D x``.

    Args:
        as :func:`ssd_naive`; chunk_size: Q, any positive value gives the same result
        (it trades the quadratic work inside chunks against the work between them).

    Returns:
        y: ``(b, t, h, p)`` in the dtype of x, and the final state ``(b, h, p, n)`` in
        float32 or wider.
    """
    return _ssd_chunked(x, dt, A, B, C, D, chunk_size, initial_state, matmul_dtype=None)


def _ssd_chunked(x, dt, A, B, C, D, chunk_size, initial_state, matmul_dtype):
    """:func:`ssd_chunked` with the in-chunk matmuls' operands in ``matmul_dtype`` (None:
    the widened inputs' float32)."""
    _check_shapes(x, dt, A, B, C)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    out_dtype = x.dtype
    x, dt, A, B, C, D, initial_state = widen(x, dt, A, B, C, D, initial_state)
    # eq. 1 discretised: the input dt x (Euler for B), the decay exp(dt A)
    y, final_state = chunked_scan(
        x, dt * A, B, C, chunk_size, initial_state, weight=dt, skip=D, matmul_dtype=matmul_dtype
    )
    return y.to(out_dtype), final_state


def ssd_mixed(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    chunk_size: int = 64,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SSD by the chunked algorithm in mixed precision (the ``torch-mixed`` backend): the
    in-chunk matmuls (C B^T, its product with x, the chunk states B^T x and the state's
    output C H) take operands in x's dtype, bf16, and accumulate in fp32; the log-decay
    cumsums and exps, the state passed between chunks and the final state are fp32, as in
    mamba_ssm's ``mamba_chunk_scan_combined``.  In fp32 it is :func:`ssd_chunked`; fp16
    is unavailable (:func:`~ssmbench.models.common.mixed_matmul_dtype`).

    Args and returns as :func:`ssd_chunked`.
    """
    matmul_dtype = mixed_matmul_dtype(x)
    return _ssd_chunked(x, dt, A, B, C, D, chunk_size, initial_state, matmul_dtype)


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


# --- the fused backend: mamba_ssm's Triton kernels --------------------------------------


def ssd_fused(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    chunk_size: int = 64,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mamba-2 SSD by mamba_ssm's Triton ``mamba_chunk_scan_combined``.

    Args:
        as :func:`ssmbench.ops.ssd`: x ``(b, t, h, p)``; dt ``(b, t, h)`` already positive;
            A ``(h,)``; B, C ``(b, t, g, n)``; D ``(h,)``; initial_state ``(b, h, p, n)``;
            chunk_size: the kernel's chunk length.

    Returns:
        y ``(b, t, h, p)`` in the dtype of x and the final state ``(b, h, p, n)`` float32.

    The kernel's layouts are ours.  dt goes in as given: no ``dt_bias``, no softplus
    (``dt_softplus=False``), no clamp (the default ``dt_limit`` of (0, inf) is not applied).
    """
    kernels.check_tensors(x, dt, A, B, C, D, initial_state)
    kernel = kernels.mamba_ssm_module("ops.triton.ssd_combined").mamba_chunk_scan_combined
    h0 = None if initial_state is None else initial_state.float().contiguous()
    y, final_state = kernel(
        x,
        dt,
        A.float(),
        B,
        C,
        chunk_size,
        D=D,
        initial_states=h0,
        dt_softplus=False,
        return_final_states=True,
    )
    return y, final_state.float()


def ssd_step_fused(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of SSD by mamba_ssm's Triton ``selective_state_update`` (per-head form).

    Args:
        as :func:`ssmbench.ops.ssd_step`: x ``(b, h, p)``; dt ``(b, h)``; A ``(h,)``;
            B, C ``(b, g, n)``; D ``(h,)``; state ``(b, h, p, n)`` or None (zeros).

    Returns:
        y ``(b, h, p)`` in the dtype of x and the new state ``(b, h, p, n)`` float32.

    The kernel takes dt ``(b, h, p)``, A ``(h, p, n)``, D and dt_bias ``(h, p)``: they are
    broadcast as stride-0 views, which is also what selects its tied-head-dim path (one dt
    and one exp(dt A) per head, as mamba_ssm's Mamba2 decode does).  That path reads
    dt_bias, so a zero one is passed.  The state is copied first (the kernel updates it in
    place).
    """
    kernels.check_tensors(x, dt, A, B, C, D, state)
    kernel = kernels.mamba_ssm_module("ops.triton.selective_state_update").selective_state_update
    b, h, p = x.shape
    n = B.shape[-1]
    new_state = kernels.state_copy(state, (b, h, p, n), x.device)  # (b h p n)
    y = kernel(
        new_state,
        x,
        dt[..., None].expand(b, h, p),  # (b h p), stride 0 over p
        A.float()[:, None, None].expand(h, p, n),  # (h p n), stride 0 over p n
        B,
        C,
        D=None if D is None else D[:, None].expand(h, p),  # (h p)
        dt_bias=dt.new_zeros(()).expand(h, p),  # (h p), zeros
        dt_softplus=False,
    )
    return y, new_state


def fused_unavailable(device: str | torch.device, phase: str | None = None) -> str:
    """Why the fused backend cannot run on ``device`` ("" when it can; every phase alike):
    Triton, so CUDA or the interpreter, and its packages."""
    return kernels.triton_reason(device) or kernels.package_reason(*FAMILY["mamba2"].fused_packages)


SSD_BACKENDS = {
    "naive": ssd_naive,
    "torch": ssd_chunked,
    "torch-mixed": ssd_mixed,
    "fused": ssd_fused,  # mamba_ssm's Triton mamba_chunk_scan_combined
}
# One token has no loop over time to vectorise, and no matmul worth running in half
# precision: naive, torch and torch-mixed share ssd_step (widened to float32)
SSD_STEP_BACKENDS = {
    "naive": ssd_step,
    "torch": ssd_step,
    "torch-mixed": ssd_step,
    "fused": ssd_step_fused,  # mamba_ssm's Triton selective_state_update
}


def random_inputs(
    draws: RandomDraws,
    b: int,
    t: int,
    h: int,
    p: int,
    g: int,
    n: int,
    dt_range: tuple[float, float] = (0.01, 1.0),
) -> dict[str, torch.Tensor]:
    """Random arguments of :func:`ssd_chunked` (its other backends and its step alike) by
    name, drawn from ``draws`` in this order: x ``(b, t, h, p)`` standard normal; dt
    ``(b, t, h)`` uniform in ``dt_range`` (positive, as after softplus); A ``(h,)`` uniform
    in [-2, -0.5]; B, C ``(b, t, g, n)`` with variance 1 / n, so that C . B ~ N(0, 1) and
    the outputs are O(1) (with unit variance they reach 40, and a form with bf16 matmuls
    misses atol on outputs whose terms cancel); D ``(h,)`` and initial_state
    ``(b, h, p, n)`` standard normal.

    ``dt_range`` sets how steep the decays are, the one choice of values that changes the
    work (a chunk steeper than ``-2 LOG_DECAY_FLOOR`` is recomputed exactly): the default
    reaches steep decays, for correctness; a timing takes steps inside the block's init
    range, DT_INIT_RANGE = [0.001, 0.1]."""
    x = draws.randn(b, t, h, p)
    dt = draws.rand(b, t, h, low=dt_range[0], high=dt_range[1])
    A = -draws.rand(h, low=0.5, high=2.0)
    B, C = (draws.randn(b, t, g, n, scale=n**-0.5) for _ in "BC")  # C . B ~ N(0, 1)
    D, initial_state = draws.randn(h), draws.randn(b, h, p, n)
    return {"x": x, "dt": dt, "A": A, "B": B, "C": C, "D": D, "initial_state": initial_state}


class Mamba2Mixer(nn.Module):
    """The Mamba-2 block's mixer (Dao & Gu 2024, figure 6), as mamba_ssm's Mamba2Simple:

        z, xBC, dt = in_proj(x)                 widths E*D, E*D + 2GN, H
        xBC = silu(causal depthwise conv(xBC))  width d_conv
        x, B, C = xBC                           x as H heads of P
        y = ssd(x, softplus(dt + dt_bias), -exp(A_log), B, C, D)
        out = out_proj(norm(y * silu(z)))       gated RMSNorm (norm after the gate)

    Init as mamba_ssm: A uniform in [1, 16] per head (stored as log), D = 1,
    dt log-uniform in DT_INIT_RANGE (at least DT_INIT_FLOOR) stored as the inverse
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
        self.conv1d = CausalConv1d(self.conv_dim, d_conv, bias=True)
        self.dt_bias = nn.Parameter(dt_bias_init(self.nheads))
        A = torch.empty(self.nheads).uniform_(*A_INIT_RANGE)  # (h)
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
        z, xBC, dt = torch.split(
            self.in_proj(u), [self.d_inner, self.conv_dim, self.nheads], dim=-1
        )  # (b t d_inner), (b t conv_dim), (b t h)
        xBC, conv_state = self.conv1d(xBC)  # (b t conv_dim), (b conv_dim d_conv)
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
        step = pick_backend(SSD_STEP_BACKENDS, backend, "Mamba2Mixer.step")
        z, xBC, dt = torch.split(
            self.in_proj(u_t), [self.d_inner, self.conv_dim, self.nheads], dim=-1
        )  # (b d_inner), (b conv_dim), (b h)
        conv_state, ssm_state = (None, None) if cache is None else cache
        xBC, conv_state = self.conv1d.step(xBC, conv_state)  # (b conv_dim), (b conv_dim w)
        x, B, C = self._split_xBC(xBC)  # (b h p), (b g n), (b g n)
        dt = F.softplus(dt + self.dt_bias)  # (b h)
        A = -torch.exp(self.A_log)  # (h)
        y, ssm_state = step(x, dt, A, B, C, D=self.D, state=ssm_state)  # (b h p)
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
