"""Mamba-1 (Gu & Dao 2023, "Mamba: Linear-Time Sequence Modeling with Selective State
Spaces", arXiv 2312.00752): the selective scan in three forms, and the block mixer.

Glossary (axis letter -> paper symbol):

    b  batch                 B in the paper
    t  time                  L in the paper (sequence length T here)
    d  inner channels        D in Algorithm 2 (here d_inner = E * d_model)
    n  state size            N

The selective scan, with real diagonal A (eq. 2a-2b, discretised as in Algorithm 2 /
Section 3.5: zero-order hold for A, Euler for B, as ``mamba_ssm`` does):

    delta_t = softplus(delta_t + delta_bias)
    h_t = exp(delta_t A) * h_{t-1} + delta_t B_t u_t          (2a)
    y_t = C_t . h_t + D u_t,   then y_t *= silu(z_t)          (2b)

Three forms that must agree (tests pin them to the NumPy reference):

- ``selective_scan_naive``: a Python loop over time, one small update per token, in the
  style of mamba-minimal.
- ``selective_scan_torch``: the same recurrence, vectorised, in one of two forms.
  Without gradients (prefill, evaluation), with no loop over tokens: blocks of 16
  tokens, each in log space (an exp, a prefix-sum matmul and a division per block, see
  ``blocked_scan``); blocks with too steep a decay go through an exact parallel scan
  (``linear_scan``: pairwise odd-even recursion, Hillis-Steele doubling at the bottom).
  Under autograd (training), ``chunked_scan``: chunks of a few tokens whose (b, n, d)
  states stay in cache, (2a) as one multiply-add over the whole batch's state per token,
  and a backward of its own, the recurrence in reverse, that keeps only the state
  entering each chunk and recomputes the rest (as mamba_ssm's CUDA backward does).
- ``selective_scan_step``: one token, for decode.

All three compute in float32 at least (half inputs are widened), return y in the dtype
of u and the state in the compute dtype, as mamba_ssm's ``selective_scan_ref`` does.

The ``fused`` backend wraps mamba_ssm's kernels behind the same signatures:
``selective_scan_fused`` (its CUDA ``selective_scan_fn``, the initial state added by
superposition) and ``selective_scan_step_fused`` (its Triton ``selective_state_update``);
:func:`fused_unavailable` says where they cannot run, and :mod:`ssmbench.models.kernels`
holds what every family's fused wrappers share.

What this file leaves out: the complex-valued A of the S4D-lin variant and the
variable-length (packed) batches of mamba_ssm.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from ssmbench.matrix import Size
from ssmbench.models import kernels
from ssmbench.models.common import (
    LOG_DECAY_FLOOR,
    BackendUnavailable,
    CausalConv1d,
    RandomDraws,
    dt_bias_init,
    not_offered,
    pick_backend,
    widen,
)
from ssmbench.registry import FAMILY

MambaCache = tuple[torch.Tensor, torch.Tensor]  # (conv_state (b, d, d_conv), ssm_state (b, d, n))


def _discretise_delta(
    delta: torch.Tensor, delta_bias: torch.Tensor | None, delta_softplus: bool
) -> torch.Tensor:
    """delta + delta_bias, through softplus when asked: the step size of Algorithm 2."""
    if delta_bias is not None:
        delta = delta + delta_bias
    if delta_softplus:
        delta = F.softplus(delta)
    return delta


def _output_gate(
    y: torch.Tensor,
    u: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    in_place: bool = False,
) -> torch.Tensor:
    """The skip term and the gate of eq. 2b: (y + D u) * silu(z), each part optional;
    ``in_place`` for a y of our own that no autograd graph needs (each (b, t, d) tensor
    a CPU allocates afresh costs page faults as well as a pass)."""
    if D is not None:
        y = y.addcmul_(u, D) if in_place else y + u * D
    if z is not None:
        y = y.mul_(F.silu(z)) if in_place else y * F.silu(z)
    return y


def _needs_grad(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd records a graph through any of ``tensors`` (None for absent ones)."""
    return torch.is_grad_enabled() and any(v is not None and v.requires_grad for v in tensors)


def selective_scan_naive(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    initial_state: torch.Tensor | None = None,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The selective scan as the seeds wrote it: discretise every token at once, then a
    Python loop over time with one small state update per token.

    Args:
        u, delta: ``(b, t, d)``; A: ``(d, n)``; B, C: ``(b, t, n)``; D: ``(d,)``;
            z: ``(b, t, d)``; delta_bias: ``(d,)``; initial_state: ``(b, d, n)`` or
            None for zeros.  One float dtype for all but the state.
        chunk_size: unused; accepted so that every backend has one signature.

    Returns:
        y: ``(b, t, d)`` in the dtype of u, and the final state ``(b, d, n)`` in float32
        or wider.
    """
    out_dtype = u.dtype
    u, delta, A, B, C, D, z, delta_bias, initial_state = widen(
        u, delta, A, B, C, D, z, delta_bias, initial_state
    )
    delta = _discretise_delta(delta, delta_bias, delta_softplus)
    batch, T, d = u.shape
    n = A.shape[1]
    deltaA = torch.exp(torch.einsum("btd,dn->btdn", delta, A))  # (b t d n)
    deltaB_u = torch.einsum("btd,btn,btd->btdn", delta, B, u)  # (b t d n)

    if initial_state is None:
        h = torch.zeros(batch, d, n, dtype=u.dtype, device=u.device)  # (b d n)
    else:
        h = initial_state
    ys = []
    # one token at a time (unbind, not [:, t]: see ssmbench.models.mamba2.ssd_naive)
    for a_t, b_t, C_t in zip(deltaA.unbind(1), deltaB_u.unbind(1), C.unbind(1), strict=True):
        h = a_t * h + b_t  # (2a)
        ys.append(torch.einsum("bdn,bn->bd", h, C_t))  # (2b), (b d)
    y = torch.stack(ys, dim=1)  # (b t d)
    return _output_gate(y, u, D, z).to(out_dtype), h


def _doubling_scan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Inclusive scan of ``h_t = a_t * h_{t-1} + b_t`` along dim 1 (``h_{-1} = 0``) by
    Hillis-Steele doubling: ceil(log2(t)) passes, each over the whole sequence.

    After the pass with offset ``s``, step ``t`` holds the composition of the steps
    ``t - 2s + 1 .. t``: ``b_t <- a_t * b_{t-s} + b_t`` and ``a_t <- a_t * a_{t-s}``.

    Args:
        a, b: ``(batch, t, ...)``, the same shape and dtype.

    Returns:
        h: the shape of b.
    """
    T = a.shape[1]
    offset = 1
    while offset < T:
        b_rest = torch.addcmul(b[:, offset:], a[:, offset:], b[:, :-offset])
        b = torch.cat([b[:, :offset], b_rest], dim=1)
        a = torch.cat([a[:, :offset], a[:, offset:] * a[:, :-offset]], dim=1)
        offset *= 2
    return b


def linear_scan(a: torch.Tensor, b: torch.Tensor, chunk_size: int = 64) -> torch.Tensor:
    """Inclusive scan of ``h_t = a_t * h_{t-1} + b_t`` along dim 1 (``h_{-1} = 0``), with
    no Python loop over time: a pairwise (odd-even) recursion of depth log2(t / chunk_size)
    above Hillis-Steele doubling on sequences of at most ``chunk_size`` steps.

    One level of the recursion:

    1. fuse each pair of neighbouring steps (2i, 2i+1) into one step:
       ``h_{2i+1} = (a_{2i+1} a_{2i}) h_{2i-1} + (a_{2i+1} b_{2i} + b_{2i+1})``;
    2. scan that half-length sequence (recursively): it yields every odd ``h``;
    3. fill in the even steps from their odd left neighbours: ``h_{2i} = a_{2i} h_{2i-1} + b_{2i}``.

    Each level touches half the data of the one above, so the whole scan costs about two
    passes over ``(b, t, ...)``, against log2(t) passes for doubling alone.  Only
    products of the given ``a`` are formed: decays in (0, 1] stay in (0, 1], nothing is
    divided and no exponent grows.  Out of place throughout, so autograd differentiates
    through it.  An odd length is padded with the identity step (a = 1, b = 0).

    Args:
        a, b: ``(batch, t, ...)``, the same shape and dtype.
        chunk_size: sequences of at most this many steps are scanned by doubling.

    Returns:
        h: the shape of b.
    """
    T = a.shape[1]
    if T <= max(chunk_size, 1):
        return _doubling_scan(a, b)
    if T % 2:
        a = torch.cat([a, torch.ones_like(a[:, :1])], dim=1)  # (batch t+1 ...)
        b = torch.cat([b, torch.zeros_like(b[:, :1])], dim=1)  # (batch t+1 ...)
    a_even, a_odd = a[:, 0::2], a[:, 1::2]  # (batch t/2 ...)
    b_even, b_odd = b[:, 0::2], b[:, 1::2]  # (batch t/2 ...)
    h_odd = linear_scan(a_odd * a_even, torch.addcmul(b_odd, a_odd, b_even), chunk_size)
    h = torch.empty_like(b)  # (batch t ...), every element written below
    h[:, 1::2] = h_odd
    h[:, 0] = b[:, 0]
    h[:, 2::2] = torch.addcmul(b_even[:, 1:], a_even[:, 1:], h_odd[:, :-1])
    return h[:, :T]


# Tokens per time block of blocked_scan.  At d = 512 and n = 16 one block's (n, b, l, d)
# working tensors take 0.5 MB each, so they stay in the L2 cache from one step of the
# block to the next; the in-block prefix sum is a matmul of 2 l flops per element; and
# the factors of realistic decays stay in range (see LOG_DECAY_FLOOR).  8 would take
# twice the Python steps, 32 twice the matmul flops and three times the buffers.
TIME_BLOCK = 16


def _exact_block(
    x: torch.Tensor,
    delta: torch.Tensor,
    A_n: torch.Tensor,
    B_rows: torch.Tensor,
    h: torch.Tensor,
    chunk_size: int,
) -> torch.Tensor:
    """The states of one block of :func:`blocked_scan` by :func:`linear_scan` over its
    own tokens: exact for any decay, for the blocks too steep for the log-space form.

    Args:
        x, delta: ``(b, l, d)``; A_n: ``(n, 1, 1, d)``, A transposed; B_rows: ``(n, b, 1,
            l)``; h: ``(n, b, d)``, the state entering the block; chunk_size: as
            :func:`linear_scan`.

    Returns:
        h_l for every token of the block, ``(n, b, l, d)``.
    """
    n, batch, _, L = B_rows.shape
    decay = torch.exp(delta * A_n)  # (n b l d), exp(delta_t A)
    inputs = x * B_rows.transpose(-1, -2)  # (n b l d), x_t B_t
    inputs[:, :, 0] += decay[:, :, 0] * h  # h_0 folded into the first token (a fresh tensor)
    h_all = linear_scan(decay.flatten(0, 1), inputs.flatten(0, 1), chunk_size)  # (n*b l d)
    return h_all.view(n, batch, L, -1)


def blocked_scan(
    x: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    block_len: int = TIME_BLOCK,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``y_t = C_t . h_t`` for ``h_t = exp(delta_t A) h_{t-1} + x_t B_t`` (eq. 2a-2b with
    x = delta u), ``block_len`` tokens at a time, each block in log space.

    Inside a block that starts from the state h_0, with the in-block prefix sums of the
    step sizes ``Delta_l = delta_1 + ... + delta_l`` and their midpoint
    ``m = Delta_L / 2`` (per channel), (2a) unrolls to

        h_l = exp(A Delta_l) h_0 + sum_{s <= l} exp(A (Delta_l - Delta_s)) x_s B_s
            = exp(A (Delta_l - m)) [exp(A m) h_0 + sum_{s <= l} exp(A (m - Delta_s)) x_s B_s]

    the decay split around the middle of the block, as Mamba-2's ``chunked_scan`` splits
    its chunks'.  With ``Delta_0 = 0`` standing for the state, that is, per block:

    1. one exp, ``E_s = exp(A (m - Delta_s))`` for s = 0 .. L, and one product,
       ``W_s = E_s x_s`` (``W_0 = E_0 h_0``);
    2. the bracket, a prefix sum over s, as one matmul per (n, b) with the
       lower-triangular ``M_n[l, s] = B_s[n]`` (1 for the state's column 0): it applies
       B on the way;
    3. one division, since ``exp(A (Delta_l - m)) = 1 / E_l``: that is h_l;
    4. (2b) as one matmul per (b, l).  The state leaves the block as its last h_l.

    A few passes over a block that stays in cache, and a Python loop over blocks, not
    tokens.  A block's tensors are laid out ``(n, b, l, d)``: d innermost for the
    elementwise steps, n outermost so that 2. is a batched matmul.  Without autograd
    every block writes into the same preallocated buffers (``out=`` records no graph;
    under autograd each step allocates its result).

    With R = max |A| Delta_L over a block's channels, every factor lies within e^+-R/2.
    A block with R > ``-2 LOG_DECAY_FLOOR`` (a decay that float32 cannot split) is scanned
    exactly instead, by :func:`linear_scan` over its own tokens.

    Args:
        x, delta: ``(b, t, d)``, delta >= 0; A: ``(d, n)``, negative; B, C: ``(b, t, n)``;
            initial_state: ``(b, d, n)`` or None for zeros.  One float dtype of at least
            32 bits.
        block_len: tokens per block; any positive value gives the same result.
        chunk_size: the doubling length of :func:`linear_scan` in steep blocks.

    Returns:
        y ``(b, t, d)`` (before D and the gate) and the final state ``(b, d, n)``.
    """
    batch, T, d = x.shape
    n = A.shape[1]
    L = max(1, min(block_len, T))
    pad = -T % L
    if pad:  # delta = 0 and x = 0: padded tokens leave the state as it is
        x, delta, B, C = (F.pad(v, (0, 0, 0, pad)) for v in (x, delta, B, C))  # (b t+pad .)
    n_blocks = (T + pad) // L
    needs_grad = _needs_grad(x, delta, A, B, C, initial_state)

    def by_block(v: torch.Tensor) -> torch.Tensor:
        """(b, t, ...) -> (blocks, b, l, ...), contiguous: a block is one slice (and for
        b = 1 this is a view)."""
        return v.unflatten(1, (n_blocks, L)).movedim(1, 0).contiguous()

    # every block's inputs at once: none is larger than (t, d)
    delta = by_block(delta)  # (blocks b l d)
    # m - Delta_s for s = 0 .. L in one matmul: row 0 is m (Delta_0 = 0), row s + 1 has
    # weights 1/2 - [j <= s] on delta_j
    causal = torch.ones(L, L, dtype=x.dtype, device=x.device).tril()  # (s j): j <= s
    to_middle = F.pad(0.5 - causal, (0, 0, 1, 0), value=0.5)  # (1+l j)
    from_middle = torch.matmul(to_middle, delta)  # (blocks b 1+l d), m - Delta_s
    # R / 2 = max |A| m over a block's channels, (blocks)
    steep = (from_middle[:, :, 0] * -A.amin(dim=1)).amax(dim=(1, 2)) > -LOG_DECAY_FLOOR
    A_n = A.t()[:, None, None, :]  # (n 1 1 d)
    # (n 1 1+l d): a product that broadcasts both operands is ~3x slower on CPU
    A_block = A_n.expand(n, 1, L + 1, d).contiguous()
    x = F.pad(by_block(x), (0, 0, 1, 0), value=1.0)  # (blocks b 1+l d), x_0 = 1: see W_0
    B_rows = by_block(B).permute(0, 3, 1, 2)[..., None, :]  # (blocks n b 1 l)
    prefix = F.pad(B_rows, (1, 0), value=1.0) * F.pad(causal, (1, 0), value=1.0)
    prefix = prefix.contiguous().view(n_blocks, n * batch, L, L + 1)  # M_n[l, s]
    C = by_block(C).view(n_blocks, batch * L, 1, n)  # (blocks b*l 1 n)

    def buffer(*shape: int) -> torch.Tensor | None:
        """A buffer that every block writes into, or None (a fresh result) under autograd."""
        return None if needs_grad else x.new_empty(shape)

    E_buf = buffer(n, batch, L + 1, d)  # E_s
    W_buf = buffer(n, batch, L + 1, d)  # W_s
    H_buf = buffer(n * batch, L, d)  # h_l
    Y = buffer(n_blocks, batch * L, 1, d)
    if initial_state is None:
        h = x.new_zeros(n, batch, d)  # (n b d)
    else:
        h = initial_state.permute(2, 0, 1)  # (n b d)
    ys = []
    for i, is_steep in enumerate(steep.tolist()):
        if is_steep:
            H = _exact_block(x[i, :, 1:], delta[i], A_n, B_rows[i], h, chunk_size)
        else:
            E = torch.mul(from_middle[i], A_block, out=E_buf).exp_()  # 1. (n b 1+l d), E_s
            W = torch.mul(E, x[i], out=W_buf)  # (n b 1+l d), E_s x_s
            W[:, :, 0] *= h  # E_0 h_0, in place on a fresh (or reused) tensor
            H = torch.bmm(prefix[i], W.view(n * batch, L + 1, d), out=H_buf)  # 2.
            H = H.view(n, batch, L, d).div_(E[:, :, 1:])  # 3. (n b l d), h_l
        h = H[:, :, -1]  # (n b d), the state leaving the block
        H_t = H.view(n, batch * L, d).transpose(0, 1)  # (b*l n d), a strided view
        ys.append(torch.bmm(C[i], H_t, out=None if Y is None else Y[i]))  # 4. (b*l 1 d)
    y = torch.stack(ys) if Y is None else Y  # (blocks b*l 1 d)
    y = y.view(n_blocks, batch, L, d).movedim(0, 1).reshape(batch, -1, d)[:, :T]  # (b t d)
    return y, h.permute(1, 2, 0).contiguous()


# Elements of one chunk's (l, b, n, d) buffers in chunked_scan: a chunk takes this // (b n d)
# tokens (chunk_tokens).  At the case study's training sizes (b 64, n d = 4096) that is 4
# tokens and 4 MiB a buffer, and the backward's three buffers stay in the 32 MiB L3 from
# one pass to the next.  On the 2-core EPYC the scan's forward and backward at b 64, t 64,
# d 256, n 16 took 53 ms with chunks of 4, against 67 with 2 (more Python steps) and 66
# with 8 (out of cache).
CHUNK_ELEMENTS = 1 << 20
LOG2_E = 1.0 / math.log(2.0)


def chunk_tokens(batch: int, d: int, n: int) -> int:
    """Tokens per chunk of :func:`chunked_scan` at these sizes: ``CHUNK_ELEMENTS // (b d
    n)``, at least 1."""
    return max(1, CHUNK_ELEMENTS // (batch * d * n))


def _chunk_decays(
    delta: torch.Tensor, A2: torch.Tensor, floor: bool, out: torch.Tensor
) -> torch.Tensor:
    """``exp(delta_t A)`` for one chunk of :func:`chunked_scan`, into ``out``.

    Taken as exp2 of the log-decay times log2(e): torch's CPU exp2 is about 5x faster than
    its exp in fp32 (0.15 against 0.8 ms per 2^20 elements, AVX-512) and differs from it
    by the rounding of the scaled argument (relative 3e-7 for delta A in [-5, 0], 4e-6 at
    the floor).  With ``floor``, log-decays below LOG_DECAY_FLOOR are raised to it first.

    Args:
        delta: ``(l, b, d)``; A2: ``(n, d)``, A transposed, times log2(e); out:
            ``(l, b, n, d)``.

    Returns:
        out, holding the decays.
    """
    decay = torch.mul(delta[:, :, None, :], A2, out=out)  # (l b n d), delta_t A log2(e)
    if floor:
        decay.clamp_min_(LOG_DECAY_FLOOR * LOG2_E)
    return decay.exp2_()


def _chunk_states(
    x: torch.Tensor, B: torch.Tensor, decay: torch.Tensor, h: torch.Tensor, out: torch.Tensor
) -> torch.Tensor:
    """The states h_t of one chunk of :func:`chunked_scan`: (2a) token by token, each a
    fused multiply-add over the whole (b, n, d) state, into ``out``.

    Args:
        x: ``(l, b, d)``; B: ``(l, b, n)``; decay: ``(l, b, n, d)``; h: ``(b, n, d)``, the
            state entering the chunk; out: ``(l, b, n, d)``.

    Returns:
        out, holding h_t for each of the chunk's tokens.
    """
    states = torch.mul(B[..., None], x[:, :, None, :], out=out)  # (l b n d), x_t B_t
    rows, decays = states.unbind(0), decay.unbind(0)  # (b n d) each
    rows[0].addcmul_(decays[0], h)  # (2a) from the entering state
    for t in range(1, len(rows)):
        rows[t].addcmul_(decays[t], rows[t - 1])  # (2a)
    return states


def _contract_n(v: torch.Tensor, states: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``sum_n v_t[n] s_t[n, :]``, a (1, n) @ (n, d) matmul per token and batch row: the
    readout (2b) ``C_t . h_t``, or ``B_t . g_t`` in the backward.

    Args:
        v: ``(l, b, n)``, contiguous; states: ``(l, b, n, d)``; out: ``(l, b, d)``,
            contiguous.

    Returns:
        out.
    """
    l, batch, n, d = states.shape
    k = l * batch
    torch.bmm(v.view(k, 1, n), states.view(k, n, d), out=out.view(k, 1, d))
    return out


class _ChunkedScan(torch.autograd.Function):
    """:func:`chunked_scan`, ``L`` tokens a chunk: its forward, and its backward by the
    reverse recurrence."""

    @staticmethod
    def forward(ctx, x, delta, A, B, C, initial_state, L):
        batch, T, d = x.shape
        n = A.shape[1]

        def chunks(v: torch.Tensor) -> tuple[torch.Tensor, ...]:
            """(b, t, .) -> time-major views (l, b, .) of L tokens: a token's (b, n, d)
            state is then one block of the chunk buffers."""
            return v.transpose(0, 1).split(L)

        y = x.new_empty(batch, T, d)
        xs, deltas, ys = chunks(x), chunks(delta), chunks(y)  # (l b d) each
        # B and C time-major (tm), as the chunk buffers
        B_tm, C_tm = B.transpose(0, 1).contiguous(), C.transpose(0, 1).contiguous()  # (t b n)
        Bs, Cs = B_tm.split(L), C_tm.split(L)  # (l b n) each
        A2 = (A.t() * LOG2_E).contiguous()  # (n d)
        # raise log-decays to the floor only in calls that reach it (one check per call)
        floor = bool(delta.amax() * -A.amin() > -LOG_DECAY_FLOOR)
        entering = x.new_empty(len(xs), batch, n, d)  # the state entering each chunk
        if initial_state is None:
            entering[0].zero_()
        else:
            entering[0].copy_(initial_state.transpose(1, 2))
        decay_buf, states_buf = x.new_empty(L, batch, n, d), x.new_empty(L, batch, n, d)
        y_buf = x.new_empty(L, batch, d)
        for i in range(len(xs)):
            l = xs[i].shape[0]
            decay = _chunk_decays(deltas[i], A2, floor, decay_buf[:l])  # (l b n d)
            states = _chunk_states(xs[i], Bs[i], decay, entering[i], states_buf[:l])
            ys[i].copy_(_contract_n(Cs[i], states, y_buf[:l]))  # (2b), y_t = C_t . h_t
            if i + 1 < len(xs):
                entering[i + 1].copy_(states[-1])
        ctx.save_for_backward(x, delta, A, B_tm, C_tm, entering)
        ctx.floor, ctx.L = floor, L
        return y, states[-1].transpose(1, 2).contiguous()  # (b t d), (b d n)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y, grad_final):
        x, delta, A, B_tm, C_tm, entering = ctx.saved_tensors
        batch, T, d = x.shape
        count, _, n, _ = entering.shape
        L = ctx.L

        def chunks(v: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return v.transpose(0, 1).split(L)  # (l b .) views, as in forward

        if grad_y is None:  # only the final state was used
            grad_y = x.new_zeros(batch, T, d)
        dx, ddelta = torch.empty_like(x), torch.empty_like(delta)  # (b t d)
        dB_tm, dC_tm = torch.empty_like(B_tm), torch.empty_like(C_tm)  # (t b n)
        xs, deltas, dys, dxs, ddeltas = (chunks(v) for v in (x, delta, grad_y, dx, ddelta))
        Bs, Cs, dBs, dCs = (v.split(L) for v in (B_tm, C_tm, dB_tm, dC_tm))  # (l b n) each
        A_n = A.t().contiguous()  # (n d)
        A2 = A_n * LOG2_E  # (n d)
        dA = torch.zeros_like(A_n)  # (n d)
        # g carried into a chunk from the one after it: exp(delta A) g of that one's first
        # token (into the last chunk, the final state's gradient)
        carry = x.new_zeros(batch, n, d)
        if grad_final is not None:
            carry.copy_(grad_final.transpose(1, 2))
        decay_buf, states_buf, g_buf = (x.new_empty(L, batch, n, d) for _ in range(3))
        out_buf = x.new_empty(L, batch, d)
        for i in reversed(range(count)):
            l = xs[i].shape[0]
            h = entering[i]  # (b n d)
            x_i, delta_i, dy = (v[:, :, None, :] for v in (xs[i], deltas[i], dys[i]))  # (l b 1 d)
            # 1. the chunk's forward again, from its entering state
            decay = _chunk_decays(deltas[i], A2, ctx.floor, decay_buf[:l])  # (l b n d)
            states = _chunk_states(xs[i], Bs[i], decay, h, states_buf[:l])  # (l b n d)
            # 2. the reverse recurrence: g_t = C_t dy_t + exp(delta_{t+1} A) g_{t+1}
            g = torch.mul(Cs[i][..., None], dy, out=g_buf[:l])  # (l b n d), C_t dy_t
            g_rows, decays = g.unbind(0), decay.unbind(0)  # (b n d) each
            g_rows[-1].add_(carry)
            for t in range(l - 2, -1, -1):
                g_rows[t].addcmul_(decays[t + 1], g_rows[t + 1])
            torch.mul(decays[0], g_rows[0], out=carry)  # on to the chunk before
            # 3. the gradients; each buffer is overwritten once its contents are used
            dxs[i].copy_(_contract_n(Bs[i], g, out_buf[:l]))  # dx_t = B_t . g_t
            q = decay.mul_(g)  # (l b n d), exp(delta_t A) g_t
            torch.sum(g.mul_(x_i), -1, out=dBs[i])  # dB_t = sum_d x_t g_t
            q[1:].mul_(states[:-1])  # q_t = exp(delta_t A) g_t h_{t-1} = d/d(delta_t A)
            q[0].mul_(h)
            torch.sum(states.mul_(dy), -1, out=dCs[i])  # dC_t = sum_d dy_t h_t
            dA += torch.mul(q, delta_i, out=states).sum((0, 1))  # sum_{b, t} delta_t q_t
            ddeltas[i].copy_(torch.sum(q.mul_(A_n), 2, out=out_buf[:l]))  # sum_n A q_t
        grad_initial = carry.transpose(1, 2) if ctx.needs_input_grad[5] else None  # (b d n)
        dB, dC = dB_tm.transpose(0, 1).contiguous(), dC_tm.transpose(0, 1).contiguous()
        return dx, ddelta, dA.t().contiguous(), dB, dC, grad_initial, None


def chunked_scan(
    x: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    chunk_len: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``y_t = C_t . h_t`` for ``h_t = exp(delta_t A) h_{t-1} + x_t B_t`` (eq. 2a-2b with
    x = delta u), chunk by chunk, with a backward of its own: the torch backend's form
    under autograd, as :func:`blocked_scan` is its form without.

    Autograd through :func:`blocked_scan` keeps half a dozen (b, l, d, n) intermediates
    of every block, and its backward makes as many again, each tens of MB at a training
    batch, allocated afresh and streamed from memory.  Here the sequence is cut into
    chunks of ``chunk_len`` tokens whose ``(l, b, n, d)`` buffers stay in cache, and only
    the state entering each chunk is kept for the backward, which recomputes the chunk's
    decays and states from it and runs the recurrence in reverse (as mamba_ssm's CUDA
    ``selective_scan_bwd`` recomputes its chunks from their saved entering states).

    Per chunk, forward:

    1. the decays ``exp(delta_t A)`` and the inputs ``x_t B_t``, a pass each;
    2. (2a) token by token: one fused multiply-add over the (b, n, d) state per token, a
       Python loop over the chunk's tokens (at a training batch each step is a pass over
       a MB, and the loop's overhead is small beside it);
    3. (2b) ``y_t = C_t . h_t``, one batched (1, n) @ (n, d) matmul.

    Backward, with ``g_t = dL/dh_t`` (the final state's gradient joins at the last token):

        g_t      = C_t dy_t + exp(delta_{t+1} A) g_{t+1}      (the reverse recurrence)
        dx_t     = B_t . g_t      dB_t = sum_d x_t g_t      dC_t = sum_d dy_t h_t
        q_t      = exp(delta_t A) g_t h_{t-1}               (d/d(delta_t A))
        ddelta_t = sum_n A q_t    dA = sum_{b, t} delta_t q_t
        dh_{-1}  = exp(delta_0 A) g_0

    Nothing divides, so no decay is too steep: blocked_scan's exact fallback has no
    counterpart here.  In a call whose steepest step reaches LOG_DECAY_FLOOR, log-decays
    below it are raised to it, forward and backward alike (subnormal decays would send exp
    and the multiply-adds down slow paths); q is then that of the raised decay, off by at
    most e^-60 |g h| from the exact gradient, as y is off by at most e^-60 |C h|.

    Args:
        x, delta: ``(b, t, d)``, delta >= 0; A: ``(d, n)``; B, C: ``(b, t, n)``;
            initial_state: ``(b, d, n)`` or None for zeros.  One float dtype of at least
            32 bits.
        chunk_len: tokens per chunk, None for :func:`chunk_tokens`; any positive value
            gives the same result.

    Returns:
        y ``(b, t, d)`` (before D and the gate) and the final state ``(b, d, n)``, both
        differentiable once with respect to every input (the backward is not itself
        differentiable).
    """
    batch, T, d = x.shape
    if chunk_len is None:
        chunk_len = chunk_tokens(batch, d, A.shape[1])
    return _ChunkedScan.apply(x, delta, A, B, C, initial_state, max(1, min(chunk_len, T)))


def selective_scan_torch(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    initial_state: torch.Tensor | None = None,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The selective scan, vectorised, in one of two forms: without gradients (prefill,
    evaluation) :func:`blocked_scan`, a loop over blocks of ``TIME_BLOCK`` tokens, not over
    tokens; under autograd :func:`chunked_scan`, chunks whose backward is its own.

    1. discretise the step size (softplus of delta + delta_bias) and form x = delta u;
    2. without gradients, per block, every state in log space and every output by one
       matmul (exactly, by :func:`linear_scan`, for blocks whose decay is too steep to
       split); under autograd, per chunk, (2a) token by token over the whole (b, n, d)
       state, and the reverse recurrence in the backward, which keeps only each chunk's
       entering state (autograd through the blocks kept every block's (b, l, d, n)
       intermediates: the case study's Mamba-1 task models trained 3-4x slower);
    3. the skip term and the gate of eq. 2b, in place when no autograd graph needs y.

    Args:
        as :func:`selective_scan_naive`; chunk_size: the doubling length of
        :func:`linear_scan` in steep blocks without gradients, and the most tokens a
        chunk of :func:`chunked_scan` takes under autograd (it takes
        :func:`chunk_tokens` where that is fewer); any positive value gives the same
        result.

    Returns:
        y: ``(b, t, d)`` in the dtype of u, and the final state ``(b, d, n)`` in float32
        or wider.
    """
    out_dtype = u.dtype
    u, delta, A, B, C, D, z, delta_bias, initial_state = widen(
        u, delta, A, B, C, D, z, delta_bias, initial_state
    )
    delta = _discretise_delta(delta, delta_bias, delta_softplus)
    x = delta * u  # (b t d)
    if _needs_grad(x, delta, A, B, C, initial_state):
        batch, _, d = u.shape
        chunk_len = min(chunk_size, chunk_tokens(batch, d, A.shape[1]))
        y, h = chunked_scan(x, delta, A, B, C, initial_state, chunk_len)
    else:
        y, h = blocked_scan(x, delta, A, B, C, initial_state, chunk_size=chunk_size)
    in_place = not _needs_grad(y, u, D, z)
    return _output_gate(y, u, D, z, in_place).to(out_dtype), h


def selective_scan_step(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the selective scan (the recurrent form, for decode).

    Args:
        u, delta, z: ``(b, d)``; A: ``(d, n)``; B, C: ``(b, n)``; D, delta_bias: ``(d,)``;
            state: ``(b, d, n)`` or None for zeros.

    Returns:
        y: ``(b, d)`` in the dtype of u and the new state ``(b, d, n)`` in float32 or
        wider.  Both backends share this form:
        one token has no loop over time to vectorise.
    """
    out_dtype = u.dtype
    u, delta, A, B, C, D, z, delta_bias, state = widen(u, delta, A, B, C, D, z, delta_bias, state)
    delta = _discretise_delta(delta, delta_bias, delta_softplus)
    deltaA = torch.exp(torch.einsum("bd,dn->bdn", delta, A))  # (b d n)
    deltaB_u = torch.einsum("bd,bn->bdn", delta * u, B)  # (b d n)
    if state is None:
        state = deltaB_u  # (2a) from h_{-1} = 0
    else:
        state = torch.addcmul(deltaB_u, deltaA, state)  # (2a)
    y = torch.einsum("bdn,bn->bd", state, C)  # (2b), (b d)
    return _output_gate(y, u, D, z).to(out_dtype), state


# --- the fused backend: mamba_ssm's kernels ----------------------------------------------

SELECTIVE_SCAN_CUDA_MISSING = (
    "selective_scan_cuda not built: mamba_ssm's Mamba-1 prefill kernel is a CUDA extension, "
    "built by `make fused` where nvcc is found (MAMBA_SKIP_CUDA_BUILD=FALSE)"
)
SELECTIVE_SCAN_NEEDS_CUDA = "mamba_ssm's selective_scan_fn (a CUDA extension) needs a CUDA device"


def selective_scan_fused(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    initial_state: torch.Tensor | None = None,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mamba-1 selective scan by mamba_ssm's CUDA kernel ``selective_scan_fn``.

    Args:
        as :func:`ssmbench.ops.selective_scan`: u, delta, z ``(b, t, d)``; A ``(d, n)``;
            B, C ``(b, t, n)``; D, delta_bias ``(d,)``; initial_state ``(b, d, n)`` or None.
            chunk_size: ignored (the kernel's own blocking).

    Returns:
        y ``(b, t, d)`` in the dtype of u and the final state ``(b, d, n)`` float32.

    The kernel has no Triton form, so neither the Triton interpreter nor a build without
    nvcc can run it.
    """
    if not kernels.installed("mamba_ssm"):
        raise BackendUnavailable(kernels.missing("mamba_ssm"))
    if not kernels.installed("selective_scan_cuda"):
        raise BackendUnavailable(SELECTIVE_SCAN_CUDA_MISSING)
    if not all(x.is_cuda for x in (u, delta, A, B, C)):
        raise BackendUnavailable(SELECTIVE_SCAN_NEEDS_CUDA)
    kernels.check_tensors(u, delta, A, B, C, D, z, delta_bias, initial_state)
    kernel = kernels.mamba_ssm_module("ops.selective_scan_interface").selective_scan_fn
    return selective_scan_via(
        kernel, u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state
    )


def selective_scan_via(
    kernel: Callable,
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    delta_softplus: bool,
    initial_state: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Our selective scan through ``kernel``, a function with mamba_ssm's
    ``selective_scan_fn`` contract (``selective_scan_fn`` itself, or its
    ``selective_scan_ref``, which the tests use on CPU).

    Layouts: the kernel takes u, delta, z ``(b, d, t)`` and B, C ``(b, n, t)`` (time
    last), A, D and delta_bias in float32, and returns the final state ``(b, d, n)``.
    It has no initial-state input; the scan is linear in its state, so a given state h0
    enters by superposition: y_t += C_t . (exp(sum_{s<=t} delta_s A) * h0) and the final
    state gains exp(sum_s delta_s A) * h0, computed here in float32 with a ``(b, t, d, n)``
    intermediate (prefill cells start from zero and never take this path), and the output
    gate silu(z) is applied after the sum.
    """
    dtype = u.dtype
    u_, delta_, B_, C_ = (x.transpose(1, 2).to(dtype) for x in (u, delta, B, C))  # (b . t)
    A32, D32, bias32 = (None if x is None else x.float() for x in (A, D, delta_bias))
    z_ = None if z is None or initial_state is not None else z.transpose(1, 2).to(dtype)
    y, last_state = kernel(
        u_,
        delta_,
        A32,
        B_,
        C_,
        D=D32,
        z=z_,
        delta_bias=bias32,
        delta_softplus=delta_softplus,
        return_last_state=True,
    )  # (b d t), (b d n)
    y = y.transpose(1, 2)  # (b t d)
    if initial_state is None:
        return y, last_state.float()
    step = delta.float() + (0 if bias32 is None else bias32)  # (b t d)
    if delta_softplus:
        step = F.softplus(step)
    decay = torch.exp(torch.cumsum(torch.einsum("btd,dn->btdn", step, A32), dim=1))  # (b t d n)
    h0 = initial_state.float()  # (b d n)
    y = y.float() + torch.einsum("btdn,bdn,btn->btd", decay, h0, C.float())  # (b t d)
    if z is not None:
        y = y * F.silu(z.float())
    return y.to(dtype), last_state.float() + decay[:, -1] * h0


def selective_scan_step_fused(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the selective scan by mamba_ssm's Triton ``selective_state_update``.

    Args:
        as :func:`ssmbench.ops.selective_scan_step`: u, delta, z ``(b, d)``; A ``(d, n)``;
            B, C ``(b, n)``; D, delta_bias ``(d,)``; state ``(b, d, n)`` or None (zeros).

    Returns:
        y ``(b, d)`` in the dtype of u and the new state ``(b, d, n)`` float32.

    The kernel's layout is ours (its per-channel form); it updates the state in place, so
    the state is copied first (float32, as the ``torch`` step returns it).
    """
    kernels.check_tensors(u, delta, A, B, C, D, z, delta_bias, state)
    kernel = kernels.mamba_ssm_module("ops.triton.selective_state_update").selective_state_update
    b, d = u.shape
    new_state = kernels.state_copy(state, (b, d, A.shape[-1]), u.device)  # (b d n)
    y = kernel(
        new_state,
        u,
        delta,
        A,
        B,
        C,
        D=D,
        z=z,
        dt_bias=delta_bias,
        dt_softplus=delta_softplus,
    )
    return y, new_state


def fused_unavailable(device: str | torch.device, phase: str | None = None) -> str:
    """Why the fused backend cannot run ``phase`` on ``device`` ("" when it can): the
    prefill kernel (and so train) is CUDA C++, the decode step Triton; phase None asks for
    every phase."""
    packages = FAMILY["mamba"].fused_packages  # mamba_ssm, then triton
    if not kernels.installed("mamba_ssm"):
        return kernels.missing("mamba_ssm")
    if phase == "decode":
        return kernels.triton_reason(device) or kernels.package_reason(*packages)
    if not kernels.installed("selective_scan_cuda"):
        return SELECTIVE_SCAN_CUDA_MISSING
    if kernels.device_type(device) != "cuda":
        return SELECTIVE_SCAN_NEEDS_CUDA
    return kernels.package_reason(*packages)


# torch-mixed is not offered: the torch form's matmuls are the blocks' prefix sums of
# log-decays and their exps' products, which half precision cannot hold (mamba_ssm's
# selective_scan_cuda scans in fp32 too)
NO_MIXED_FORM = not_offered(
    "torch-mixed",
    "Mamba-1's torch form is a scan in log space whose matmuls are prefix sums of "
    "log-decays, which must stay fp32: it has no matmuls to run in half precision",
)
SCAN_BACKENDS = {
    "naive": selective_scan_naive,
    "torch": selective_scan_torch,
    "torch-mixed": NO_MIXED_FORM,
    "fused": selective_scan_fused,  # mamba_ssm's CUDA selective_scan_fn
}
SCAN_STEP_BACKENDS = {
    "naive": selective_scan_step,
    "torch": selective_scan_step,
    "torch-mixed": NO_MIXED_FORM,
    "fused": selective_scan_step_fused,  # mamba_ssm's Triton selective_state_update
}


def random_inputs(draws: RandomDraws, b: int, t: int, d: int, n: int) -> dict[str, torch.Tensor]:
    """Random arguments of :func:`selective_scan_torch` (its other backends and its step
    alike) by name, for ``d`` channels and state size ``n``, drawn from ``draws`` in this
    order: u, the raw step delta (std 1/2), z ``(b, t, d)``; A ``(d, n)`` uniform in
    [-2, -0.5]; B, C ``(b, t, n)``; D and delta_bias (std 1/2) ``(d,)``; initial_state
    ``(b, d, n)``.  All standard normal but A and the two noted; delta and delta_bias are
    meant for ``delta_softplus=True``."""
    u, delta, z = draws.randn(b, t, d), draws.randn(b, t, d, scale=0.5), draws.randn(b, t, d)
    A = -draws.rand(d, n, low=0.5, high=2.0)
    B, C = draws.randn(b, t, n), draws.randn(b, t, n)
    D, delta_bias = draws.randn(d), draws.randn(d, scale=0.5)
    initial_state = draws.randn(b, d, n)
    return {
        "u": u,
        "delta": delta,
        "A": A,
        "B": B,
        "C": C,
        "D": D,
        "z": z,
        "delta_bias": delta_bias,
        "initial_state": initial_state,
    }


class MambaMixer(nn.Module):
    """The Mamba block's mixer (Gu & Dao 2023, Fig. 3), as in mamba_simple / mamba-minimal:

        x, z = in_proj(x)                        two branches of width E * d_model
        x = silu(causal depthwise conv(x))       width d_conv
        delta, B, C = x_proj(x)                  delta through a rank-R bottleneck, R = ceil(D/16)
        y = selective_scan(x, delta, A, B, C, D, z, dt_proj.bias, softplus)
        out = out_proj(y)

    Init as the paper: A = -(1, 2, ..., N) per channel (S4D-real), D = 1, dt log-uniform
    in DT_INIT_RANGE stored as the inverse softplus in dt_proj.bias
    (:func:`~ssmbench.models.common.dt_bias_init`).
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 16,
        d_conv: int = 4,
        expand: int = 2,
        chunk_size: int = 64,
    ):
        super().__init__()
        self.d_inner = expand * d_model  # E * D
        self.d_state = d_state  # N
        self.d_conv = d_conv
        self.dt_rank = math.ceil(d_model / 16)  # R
        self.chunk_size = chunk_size

        self.in_proj = nn.Linear(d_model, 2 * self.d_inner, bias=False)
        self.conv1d = CausalConv1d(self.d_inner, d_conv, bias=True)
        self.x_proj = nn.Linear(self.d_inner, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, self.d_inner, bias=True)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

        # dt_proj: weight uniform in +-R^-1/2, bias = softplus^-1(dt), dt log-uniform
        # in DT_INIT_RANGE and at least DT_INIT_FLOOR (mamba_simple's "random" init)
        nn.init.uniform_(self.dt_proj.weight, -(self.dt_rank**-0.5), self.dt_rank**-0.5)
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt_bias_init(self.d_inner))

        # S4D-real: A_n = -(n + 1), stored as log so that A stays negative
        A = torch.arange(1, d_state + 1, dtype=torch.float32).repeat(self.d_inner, 1)  # (d n)
        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.ones(self.d_inner))

    def _ssm_inputs(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """delta ``(..., d)``, B and C ``(..., n)`` from the conv branch x ``(..., d)``."""
        x_dbl = self.x_proj(x)  # (... R+2N)
        dt, B, C = torch.split(x_dbl, [self.dt_rank, self.d_state, self.d_state], dim=-1)
        delta = torch.einsum("...r,dr->...d", dt, self.dt_proj.weight)  # (... d), bias in scan
        return delta, B, C

    def forward(self, x: torch.Tensor, backend: str) -> tuple[torch.Tensor, MambaCache]:
        """x: ``(b, t, d_model)`` -> y ``(b, t, d_model)`` and the cache
        ``(conv_state (b, d, d_conv), ssm_state (b, d, n))`` that decode continues from:
        conv_state holds the last d_conv conv inputs (zeros before the sequence)."""
        scan = pick_backend(SCAN_BACKENDS, backend, "MambaMixer")
        x, z = self.in_proj(x).chunk(2, dim=-1)  # (b t d) each
        x, conv_state = self.conv1d(x)  # (b t d), (b d d_conv)
        delta, B, C = self._ssm_inputs(x)
        A = -torch.exp(self.A_log)  # (d n)
        y, ssm_state = scan(
            x,
            delta,
            A,
            B,
            C,
            D=self.D,
            z=z,
            delta_bias=self.dt_proj.bias,
            delta_softplus=True,
            chunk_size=self.chunk_size,
        )  # (b t d), (b d n)
        return self.out_proj(y), (conv_state, ssm_state)

    def step(
        self, x_t: torch.Tensor, cache: MambaCache | None, backend: str
    ) -> tuple[torch.Tensor, MambaCache]:
        """x_t: ``(b, d_model)``, cache from :meth:`forward` or the last step (or None
        for an empty one) -> y_t ``(b, d_model)`` and the updated cache."""
        scan_step = pick_backend(SCAN_STEP_BACKENDS, backend, "MambaMixer.step")
        x, z = self.in_proj(x_t).chunk(2, dim=-1)  # (b d) each
        conv_state, ssm_state = (None, None) if cache is None else cache
        x, conv_state = self.conv1d.step(x, conv_state)  # (b d), (b d d_conv)
        delta, B, C = self._ssm_inputs(x)
        A = -torch.exp(self.A_log)  # (d n)
        y, ssm_state = scan_step(
            x,
            delta,
            A,
            B,
            C,
            D=self.D,
            z=z,
            delta_bias=self.dt_proj.bias,
            delta_softplus=True,
            state=ssm_state,
        )  # (b d), (b d n)
        return self.out_proj(y), (conv_state, ssm_state)


def build_mixer(size: Size, d_state: int, layer: int) -> MambaMixer:
    """The Mamba-1 mixer of a run's size preset (``layer`` unused)."""
    return MambaMixer(
        size.d_model,
        d_state=d_state,
        d_conv=size.d_conv,
        expand=size.expand,
        chunk_size=size.chunk,
    )
