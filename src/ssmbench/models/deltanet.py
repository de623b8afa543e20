"""DeltaNet and Gated DeltaNet: the (gated) delta rule in three forms, and the block mixer.

Yang, Wang, Zhang, Shen & Kim 2024, "Parallelizing Linear Transformers with the Delta Rule
over Sequence Length" (arXiv 2406.06484); Yang, Kautz & Hatamizadeh 2024, "Gated Delta
Networks: Improving Mamba2 with Delta Rule" (arXiv 2412.06464).

Glossary (axis letter -> paper symbol):

    b  batch
    t  time                        (L in the papers; T is the sequence length)
    h  heads
    k  key / query head dim        d_k
    v  value head dim              d_v
    c  chunk index                 the [i] of the chunkwise form; T / C of them
    l  position inside a chunk     r in the papers; C of them (``chunk_size``)
    s  a second position in the same chunk

The recurrence, in this project's ``(d_k, d_v)`` state layout (the papers write the
transposed ``(d_v, d_k)``):

    a_t = exp(g_t)                 (Gated DeltaNet; a_t = 1 for plain DeltaNet, g = None)
    S_t = a_t (S_{t-1} - beta_t k_t (k_t^T S_{t-1})) + beta_t k_t v_t^T        (R)
    o_t = S_t^T q_t                                                            (O)

The decay comes first: the delta-rule correction reads the decayed state a_t S_{t-1}
(the Gated DeltaNet paper's S_t = S_{t-1} (a_t (I - beta_t k_t k_t^T)) + beta_t v_t k_t^T,
transposed).  The operator scales the queries by ``scale`` (1 unless told, as given; fla's
kernels take the same argument): the block L2-normalizes q and k and passes 1 / sqrt(d_k).

The chunkwise form (DeltaNet paper, section 3: the WY representation and the UT
transform; Gated DeltaNet paper, section 3: the same with the decays folded in).  Inside a
chunk of C tokens that starts from the state S_0, with the cumulative log-decay
gamma_l = g_1 + ... + g_l and Gamma_l = exp(gamma_l):

    A_ls  = beta_l exp(gamma_l - gamma_s) k_l^T k_s     for s < l, else 0         (1)
    T     = (I + A)^{-1} diag(beta)                     the UT transform          (2)
    W     = T diag(Gamma) K,   U~ = T V                 the WY factors            (3)
    U     = U~ - W S_0                                  the chunk's "new values"  (4)
    O     = diag(Gamma) Q S_0 + (Q K^T * L) U,   L_ls = exp(gamma_l - gamma_s) on s <= l  (5)
    S_C   = Gamma_C S_0 + (diag(Gamma_C / Gamma) K)^T U                           (6)

(Unrolling (R): u_l = beta_l (v_l - Gamma_l k_l^T S_0 - sum_{s<l} L_ls (k_l^T k_s) u_s),
which is the triangular system (I + A) U = diag(beta) (V - diag(Gamma) K S_0).)  T is
(diag(1 / beta) + tril(K K^T * L, -1))^{-1}, the same matrix, and is never formed: W and
U~ come from triangular solves with diag(Gamma) K and V as their right-hand sides.

Steps (1)-(3) and the intra-chunk part of (5) do not depend on the state: they run for
every chunk at once, as batched matmuls and batched triangular solves.  Steps (4) and
(6) carry the state from chunk to chunk; each chunk needs the state the previous one
left, so they run in a Python loop over chunks (T / C iterations of two small matmuls),
never over tokens.  On CPU the chunks go a segment at a time (see _CPU_SEGMENT_BYTES), so
that the intermediates of the memory-bound elementwise steps stay in cache.

Three forms that must agree (tests pin them to the NumPy reference):

- ``delta_rule_naive``: a Python loop over time, one rank-1 update per token (the style of
  flash-linear-attention's ``naive_recurrent`` reference).
- ``delta_rule_torch``: the chunkwise form above; ``chunk_size >= T`` is the fully
  parallel form (one chunk, no state passing), ``chunk_size = 1`` the recurrence again.
- ``delta_rule_step``: one token, for decode.

All three compute in float32 at least (half inputs are widened), return o in the dtype
of q and the state in the compute dtype.  ``delta_rule_mixed`` (the ``torch-mixed``
backend) is ``delta_rule_torch`` with its matmuls in bf16 (fp32 accumulation; decays,
the triangular solve and the state in fp32); its decode step is ``delta_rule_step``.

The ``fused`` backend wraps flash-linear-attention's Triton kernels behind the same
signatures (``delta_rule_fused``: ``chunk_gated_delta_rule`` / ``chunk_delta_rule``;
``delta_rule_step_fused``: ``fused_recurrent_(gated_)delta_rule``);
:func:`delta_rule_shape_reason` and :func:`fused_unavailable` say where they cannot run
(:mod:`ssmbench.models.kernels` holds what every family's fused wrappers share).

What this file leaves out: per-channel (vector) decays (GLA / KDA), the output gate of
flash-linear-attention's GatedDeltaNet layer, and the value expansion (d_v = 2 d_k) of
some Gated DeltaNet configurations.
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
    BackendUnavailable,
    CausalConv1d,
    RandomDraws,
    RMSNorm,
    dt_bias_init,
    mixed_matmul_dtype,
    pick_backend,
    widen,
)
from ssmbench.registry import FAMILY

# (q_conv_state, k_conv_state, v_conv_state) each (b, h*k or h*v, d_conv), then S (b, h, k, v)
DeltaNetCache = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _check_shapes(q, k, v, beta, g, state, op: str) -> None:
    """ValueError unless q, k ``(..., h, k)``, v ``(..., h, v)``, beta and g ``(..., h)``,
    state ``(b, h, k, v)`` agree (``...`` is ``(b, t)`` for a sequence, ``(b,)`` for a step)."""
    lead = q.shape[:-1]
    problems = []
    if k.shape != q.shape:
        problems.append(f"k {tuple(k.shape)} != q {tuple(q.shape)}")
    if v.shape[:-1] != lead:
        problems.append(f"v {tuple(v.shape)} does not start with {tuple(lead)}")
    if beta.shape != lead:
        problems.append(f"beta {tuple(beta.shape)} != {tuple(lead)}")
    if g is not None and g.shape != lead:
        problems.append(f"g {tuple(g.shape)} != {tuple(lead)}")
    if state is not None:
        expected = (q.shape[0], q.shape[-2], q.shape[-1], v.shape[-1])
        if tuple(state.shape) != expected:
            problems.append(f"state {tuple(state.shape)} != {expected}")
    if problems:
        raise ValueError(f"{op}: bad shapes: " + "; ".join(problems))


def _recurrent_update(
    state: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of (R) and (O) on widened tensors: state ``(b, h, k, v)``; q, k
    ``(b, h, k)``; v ``(b, h, v)``; beta, g ``(b, h)`` -> o ``(b, h, v)``, new state."""
    if g is not None:
        state = state * torch.exp(g)[..., None, None]  # a_t S_{t-1}, (b h k v)
    retrieved = (k[..., None, :] @ state).squeeze(-2)  # S'^T k_t, (b h v)
    delta = beta[..., None] * (v - retrieved)  # beta_t (v_t - S'^T k_t), (b h v)
    state = state + k[..., :, None] * delta[..., None, :]  # (R), (b h k v)
    o = (q[..., None, :] @ state).squeeze(-2)  # (O), (b h v)
    return o, state


def delta_rule_naive(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    chunk_size: int | None = None,
    initial_state: torch.Tensor | None = None,
    scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (gated) delta rule as a Python loop over time, one rank-1 update per token.

    Args:
        q, k: ``(b, t, h, k)``; v: ``(b, t, h, v)``; beta: ``(b, t, h)`` in (0, 1);
            g: ``(b, t, h)`` log-decay (<= 0) or None for plain DeltaNet;
            initial_state: ``(b, h, k, v)`` or None for zeros.  One float dtype for all
            but the state.
        chunk_size: unused; accepted so that every backend has one signature.
        scale: the queries' scale: o_t = S_t^T (scale q_t), as flash-linear-attention's
            ``scale`` (the block passes 1 / sqrt(d_k); 1 scales nothing).

    Returns:
        o: ``(b, t, h, v)`` in the dtype of q, and the final state ``(b, h, k, v)`` in
        float32 or wider.
    """
    _check_shapes(q, k, v, beta, g, initial_state, "delta_rule")
    out_dtype = q.dtype
    q, k, v, beta, g, state = widen(q, k, v, beta, g, initial_state)
    b, T, h, dk = q.shape
    if state is None:
        state = q.new_zeros(b, h, dk, v.shape[-1])  # (b h k v)
    if scale != 1.0:
        q = q * scale
    outputs = []
    # one token at a time (unbind, not [:, t]: see ssmbench.models.mamba2.ssd_naive)
    gates = [None] * T if g is None else g.unbind(1)
    tokens = zip(q.unbind(1), k.unbind(1), v.unbind(1), beta.unbind(1), gates, strict=True)
    for q_t, k_t, v_t, beta_t, g_t in tokens:
        o_t, state = _recurrent_update(state, q_t, k_t, v_t, beta_t, g_t)
        outputs.append(o_t)
    o = torch.stack(outputs, dim=1)  # (b t h v)
    return o.to(out_dtype), state


def _exp(x: torch.Tensor, max: float | None = None) -> torch.Tensor:
    """exp(clamp(x, LOG_DECAY_FLOOR, max)): exp without the underflow slow path; the same
    bound keeps both factors of the in-chunk decays (Gamma_l and 1 / Gamma_s, see
    :func:`_chunks_forward`) within float32's normal range, and so their products
    (:data:`~ssmbench.models.common.LOG_DECAY_FLOOR`)."""
    return torch.exp(torch.clamp(x, min=LOG_DECAY_FLOOR, max=max))


# On CPU the chunks are processed a segment at a time, with about this many bytes per
# intermediate tensor of a segment, so that a long sequence's intermediates stay in cache
# (the elementwise steps are memory-bound).  scripts/bench_delta_segments.py measures it
# (the cpu preset's shapes; on the 2-core VM, 10 interleaved rounds): at T = 16384 and
# 65536, 4 MiB is level with 1 MiB (1 MiB / 4 MiB = 1.03 [0.98, 1.07] and 1.00
# [0.94, 1.09]) and 7-8% faster than 16 MiB or every chunk at once; at T = 4096, where
# 4 MiB is every chunk at once, 1 MiB / every chunk = 1.09 [1.07, 1.12].
# On GPUs every chunk goes at once.
_CPU_SEGMENT_BYTES = 1 << 22


def _chunk(x: torch.Tensor, chunk_size: int, pad_value: float = 0.0) -> torch.Tensor:
    """``(b, t, h, ...)`` -> ``(c, b*h, l, ...)``: time padded with ``pad_value`` to a
    multiple of ``chunk_size`` and cut into chunks, chunk-major so that the chunks of a
    segment are one contiguous block.  Always a fresh tensor (never a view of ``x``), which
    the caller may overwrite."""
    b, T, h = x.shape[:3]
    pad = -T % chunk_size
    if pad:
        x = torch.cat([x, x.new_full((b, pad, *x.shape[2:]), pad_value)], dim=1)  # (b t+pad h ...)
    x = x.unflatten(1, (-1, chunk_size))  # (b c l h ...)
    x = x.movedim((1, 3), (0, 2))  # (c b h l ...)
    out = x.new_empty(x.shape[0], b * h, *x.shape[3:])  # (c b*h l ...)
    out.unflatten(1, (b, h)).copy_(x)
    return out


def _tracks_grad(*tensors: torch.Tensor) -> bool:
    """Whether autograd records operations on any of ``tensors`` (then no ``out=`` and no
    in-place update may touch them)."""
    return torch.is_grad_enabled() and any(x.requires_grad for x in tensors)


def _chunks_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    gamma: torch.Tensor | None,
    state: torch.Tensor,
    scale: float = 1.0,
    matmul_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps (1)-(6) of the module docstring for consecutive chunks, with the queries
    scaled by ``scale``.

    With ``matmul_dtype`` bf16 (the ``torch-mixed`` backend) every matmul takes bf16
    operands (torch accumulates in fp32) and returns bf16, except that K K^T * L comes back
    to fp32 for the triangular solve, which runs in fp32, and so does the state update
    K_out^T U: the decays, the solve and the state carried across chunks stay fp32, as in
    flash-linear-attention's chunked kernels (which read the state as bf16 where it enters
    a matmul, as here).

    Args:
        q, k: ``(c, n, l, k)``; v: ``(c, n, l, v)``, contiguous, which the triangular
            solve overwrites unless autograd records it (V becomes U~, then U); beta:
            ``(c, n, l)``; gamma: ``(c, n, l)``, the cumulative log-decay inside each
            chunk, or None (no decay); state: ``(n, k, v)``, entering the first chunk.
            ``n`` is batch times heads.  Float32 or wider.
        scale: the queries' scale (it multiplies diag(Gamma) Q, where it costs nothing).
        matmul_dtype: the matmul operands' dtype; None for q's.

    Returns:
        o ``(c, n, l, v)`` in ``matmul_dtype`` and the state leaving the last chunk
        ``(n, k, v)`` in q's dtype.
    """
    C = q.shape[2]
    wide = q.dtype
    low = wide if matmul_dtype is None else matmul_dtype  # no copy when they agree
    if gamma is None:
        gk = k.clone()  # the solve overwrites it, and K_out^T below is K's transpose
        q_out = q if scale == 1.0 else q * scale  # scale diag(Gamma) Q with Gamma = 1
        k_inv_t = k.transpose(-1, -2)  # (c n k s)
        k_out_t = k.transpose(-1, -2)  # (diag(Gamma_C / Gamma) K)^T with Gamma = 1
        chunk_decay = None
    else:
        # L_ls = exp(gamma_l - gamma_s) = Gamma_l / Gamma_s on s <= l is rank one: Gamma_l
        # scales the rows' operand and 1 / Gamma_s the columns', so the matmuls apply L
        # and no (c, n, l, s) decay matrix is built.  Both factors stay within
        # e^+-LOG_DECAY_FLOOR; a chunk whose total decay is steeper (a head that forgets within
        # the chunk) gets its two products again from the exact L.
        gamma_exp = _exp(gamma)[..., None]  # Gamma_l, (c n l 1)
        gk = k * gamma_exp  # diag(Gamma) K, (c n l k)
        q_out = q * (gamma_exp if scale == 1.0 else gamma_exp * scale)  # scale diag(Gamma) Q
        k_inv_t = (k * _exp(-gamma, max=-LOG_DECAY_FLOOR)[..., None]).transpose(-1, -2)
        # K_out^T = (diag(Gamma_C / Gamma) K)^T, read transposed by the state loop's matmul
        decay_out = _exp(gamma[..., -1:] - gamma)[..., None]  # Gamma_C / Gamma, (c n l 1)
        k_out_t = (k * decay_out).transpose(-1, -2)  # (c n k l)
        chunk_decay = gamma_exp[:, :, -1:]  # Gamma_C, (c n 1 1)
    # two products, each into a fresh contiguous tensor: the solve would copy a strided A
    k_inv_t = k_inv_t.to(low)
    A = (gk.to(low) @ k_inv_t).to(wide)  # k_l^T k_s L_ls, (c n l s); reads s < l
    scores = q_out.to(low) @ k_inv_t  # q_l^T k_s L_ls, (c n l s); masked below
    if gamma is not None:
        steep = gamma[..., -1] < LOG_DECAY_FLOOR  # (c n)
        if steep.any():
            ic, i_n = steep.nonzero(as_tuple=True)  # j (chunk, head) pairs
            gamma_j = gamma[ic, i_n]  # (j l)
            causal = torch.ones(C, C, dtype=q.dtype, device=q.device).tril()  # (l s): s <= l
            decay_j = _exp(gamma_j[:, :, None] - gamma_j[:, None, :], max=0.0) * causal
            k_j, k_j_t = k[ic, i_n].to(low), k[ic, i_n].transpose(-1, -2).to(low)  # (j l k)
            A[ic, i_n] = (k_j @ k_j_t).to(wide) * decay_j  # (j l s)
            q_j = q[ic, i_n] if scale == 1.0 else q[ic, i_n] * scale  # (j l k)
            scores[ic, i_n] = ((q_j.to(low) @ k_j_t) * decay_j).to(low)  # (j l s)
    scores = scores.tril_()  # Q K^T * L on s <= l; zero above, whatever the product held

    # (1)-(3): with T = (diag(1 / beta) + tril(K K^T * L, -1))^{-1}, the WY factors
    # W = T diag(Gamma) K and U~ = T V are batched triangular solves for every chunk at
    # once: 1 / beta on the diagonal (which saves scaling K and V by beta) and diag(Gamma)
    # K and V as the right-hand sides, C^2 (k + v) FLOPs per chunk where forming T and
    # multiplying it out take C^3 + 2 C^2 (k + v).  The solves read only the lower
    # triangle of A.  Without autograd each solves in place (``out=`` its right-hand
    # side): LAPACK then takes the row-major system as the transposed column-major one and
    # copies nothing, which halves a solve's time on CPU.  That needs contiguous A and
    # right-hand sides, so there are two solves rather than one of [diag(Gamma) K | V]:
    # U~ then needs no copy to be updated in place into U by the state loop
    A.diagonal(dim1=-2, dim2=-1).copy_(1.0 / beta)  # (1), in place on a fresh tensor
    in_place = not _tracks_grad(A, gk, v)
    w = torch.linalg.solve_triangular(A, gk, upper=False, out=gk if in_place else None)
    u_tilde = torch.linalg.solve_triangular(A, v, upper=False, out=v if in_place else None)
    w, u_tilde = w.to(low), u_tilde.to(low)  # W (c n l k), U~ (c n l v)

    # (4) and (6), chunk after chunk; then (5) for every chunk at once
    new_values, states = _pass_state(w, u_tilde, k_out_t.to(low), chunk_decay, state)
    S0 = states[:-1].flatten(0, 1).to(low)  # S_0 per chunk, (c*n k v)
    o = torch.bmm(scores.flatten(0, 1), new_values.flatten(0, 1))  # (Q K^T * L) U, fresh
    o.baddbmm_(q_out.flatten(0, 1).to(low), S0)  # (5) + diag(Gamma) Q S_0, (c*n l v)
    return o.view_as(u_tilde), states[-1].clone()  # the last state, in its own storage


def _pass_state(
    w: torch.Tensor,
    u_tilde: torch.Tensor,
    k_out_t: torch.Tensor,
    chunk_decay: torch.Tensor | None,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps (4) and (6), the only ones that wait for the previous chunk: per chunk
    U = U~ - W S_0 and S_C = Gamma_C S_0 + K_out^T U, two small matmuls of every head at
    once (T / C iterations).

    Args:
        w, u_tilde: W ``(c, n, l, k)`` and U~ ``(c, n, l, v)`` in the matmul dtype (U~
            contiguous: without autograd it is updated into U in place); k_out_t: K_out^T
            = (diag(Gamma_C / Gamma) K)^T ``(c, n, k, l)`` in the same (any strides);
            chunk_decay: Gamma_C ``(c, n, 1, 1)`` or None (no decay); state: ``(n, k, v)``
            entering the first chunk, float32 or wider.

    Returns:
        U ``(c, n, l, v)`` in the matmul dtype and the states ``(c + 1, n, k, v)`` in
        ``state``'s dtype: entering each chunk, then leaving the last.  Without autograd
        U is ``u_tilde`` itself and every step writes into U and the states (in place or
        ``out=``, no allocation per chunk); the state's matmul is accumulated in place
        when its operands share the state's dtype.
    """
    low, n_chunks = w.dtype, w.shape[0]
    decays = [None] * n_chunks if chunk_decay is None else chunk_decay.unbind(0)
    if _tracks_grad(w, u_tilde, k_out_t, state):  # Gamma_C enters w as well
        values, states = [], [state]
        for c, decay in enumerate(decays):
            S = states[-1]
            values.append(torch.baddbmm(u_tilde[c], w[c], S.to(low), alpha=-1))  # (4)
            S = S if decay is None else S * decay
            states.append(S + torch.bmm(k_out_t[c], values[-1]))  # (6), (n k v)
        return torch.stack(values), torch.stack(states)
    values = u_tilde  # U~, then U, (c n l v)
    states = state.new_empty(n_chunks + 1, *state.shape)  # (c+1 n k v)
    states[0] = state
    # one view per chunk up front (indexing in the loop costs a dispatch each)
    W, U, S, K_out_t = w.unbind(0), values.unbind(0), states.unbind(0), k_out_t.unbind(0)
    for c, decay in enumerate(decays):
        U[c].baddbmm_(W[c], S[c].to(low), alpha=-1)  # (4), U = U~ - W S_0
        if decay is None:
            S[c + 1].copy_(S[c])
        else:
            torch.mul(S[c], decay, out=S[c + 1])  # Gamma_C S_0
        if low == states.dtype:
            S[c + 1].baddbmm_(K_out_t[c], U[c])  # (6)
        else:
            S[c + 1].add_(torch.bmm(K_out_t[c], U[c]))  # (6), fp32 += bf16 product
    return values, states


def delta_rule_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    chunk_size: int = 64,
    initial_state: torch.Tensor | None = None,
    scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (gated) delta rule, chunkwise: the WY representation / UT transform inside each
    chunk as batched matmuls and batched triangular solves, the state carried across
    chunks by a loop over chunks (steps (1)-(6) of the module docstring).

    The cumulative log-decay is summed in float32 (as flash-linear-attention does): the
    decay between two tokens then carries a relative error of about |gamma| * 6e-8, which
    for realistic decays (|gamma| < 200 in a chunk) stays below 1e-5, but grows for
    extreme ones (log-decays of -100 per token over 64-token chunks).

    Args:
        as :func:`delta_rule_naive`, with beta in (0, 1) and g <= 0 strictly required
            (the chunked form divides by beta and clamps the log-decays between two
            tokens to <= 0); chunk_size: tokens per chunk C (>= 1; C >= t is the fully
            parallel single-chunk form).  Any C gives the same result.  ``scale`` rides on
            the decays that scale the queries anyway (no pass of its own when gated).

    Returns:
        o: ``(b, t, h, v)`` in the dtype of q, and the final state ``(b, h, k, v)`` in
        float32 or wider.
    """
    return _delta_rule_chunked(q, k, v, beta, g, chunk_size, initial_state, scale, None)


def _delta_rule_chunked(q, k, v, beta, g, chunk_size, initial_state, scale, matmul_dtype):
    """:func:`delta_rule_torch` with the matmuls' operands in ``matmul_dtype`` (None: the
    widened inputs' float32)."""
    _check_shapes(q, k, v, beta, g, initial_state, "delta_rule")
    if chunk_size < 1:
        raise ValueError(f"delta_rule: chunk_size must be >= 1, got {chunk_size}")
    out_dtype = q.dtype
    q, k, v, beta, g, initial_state = widen(q, k, v, beta, g, initial_state)
    b, T, h, dk = q.shape
    dv = v.shape[-1]
    C = min(chunk_size, T)

    # padded tokens have k = v = 0 and g = 0: they leave the state as it is (beta is
    # padded with 1, so that 1 / beta stays finite)
    q, k, v = _chunk(q, C), _chunk(k, C), _chunk(v, C)  # (c b*h l k), (c b*h l v)
    beta = _chunk(beta, C, pad_value=1.0)  # (c b*h l)
    gamma = None if g is None else _chunk(g, C).cumsum(dim=-1)  # gamma_l, (c b*h l)
    if initial_state is None:
        state = q.new_zeros(b * h, dk, dv)  # (b*h k v)
    else:
        state = initial_state.reshape(b * h, dk, dv)  # (b*h k v)

    # on CPU, a segment of chunks at a time, so that its intermediates stay in cache
    n_chunks = q.shape[0]
    per_chunk_bytes = b * h * C * max(C, dk, dv) * q.element_size()
    segment = max(1, _CPU_SEGMENT_BYTES // per_chunk_bytes) if q.is_cpu else n_chunks
    outputs = []
    for start in range(0, n_chunks, segment):
        part = slice(start, start + segment)
        gamma_part = None if gamma is None else gamma[part]
        o, state = _chunks_forward(
            q[part], k[part], v[part], beta[part], gamma_part, state, scale, matmul_dtype
        )
        outputs.append(o.unflatten(1, (b, h)).movedim((0, 3), (1, 2)))  # (b c l h v)
    o = torch.cat(outputs, dim=1).reshape(b, -1, h, dv)[:, :T]  # (b t h v)
    return o.to(out_dtype), state.reshape(b, h, dk, dv)


def delta_rule_mixed(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    chunk_size: int = 64,
    initial_state: torch.Tensor | None = None,
    scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (gated) delta rule, chunkwise, in mixed precision (the ``torch-mixed``
    backend): :func:`delta_rule_torch` with its matmuls on bf16 operands of q's dtype (fp32
    accumulation); the decay cumsums and exps, the UT transform's triangular solve, the
    state recurrence across chunks and the final state are fp32, as in
    flash-linear-attention's ``chunk_gated_delta_rule``.  In fp32 it is
    :func:`delta_rule_torch`; fp16 is unavailable
    (:func:`~ssmbench.models.common.mixed_matmul_dtype`).

    Args and returns as :func:`delta_rule_torch`.
    """
    matmul_dtype = mixed_matmul_dtype(q)
    return _delta_rule_chunked(q, k, v, beta, g, chunk_size, initial_state, scale, matmul_dtype)


def delta_rule_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
    scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the (gated) delta rule (the recurrent form, for decode).

    Args:
        q, k: ``(b, h, k)``; v: ``(b, h, v)``; beta: ``(b, h)`` in (0, 1); g: ``(b, h)``
            log-decay or None; state: ``(b, h, k, v)`` or None for zeros; scale: the
            queries' scale, as :func:`delta_rule_naive`.

    Returns:
        o: ``(b, h, v)`` in the dtype of q and the new state ``(b, h, k, v)`` in float32
        or wider.  Both backends share this form: one token has no loop over time to
        vectorise.
    """
    _check_shapes(q, k, v, beta, g, state, "delta_rule_step")
    out_dtype = q.dtype
    q, k, v, beta, g, state = widen(q, k, v, beta, g, state)
    if state is None:
        state = q.new_zeros(*q.shape, v.shape[-1])  # (b h k v)
    o, state = _recurrent_update(state, q if scale == 1.0 else q * scale, k, v, beta, g)
    return o.to(out_dtype), state


# --- the fused backend: flash-linear-attention's Triton kernels ---------------------------


def delta_rule_impl(dtype: torch.dtype, gated: bool) -> str:
    """The fla kernel :func:`delta_rule_fused` runs for inputs of ``dtype``."""
    if gated or dtype not in kernels.HALF_DTYPES:
        return "fla.chunk_gated_delta_rule"
    return "fla.chunk_delta_rule"


FLA_MAX_HEAD_DIM = 256  # fla/ops/common/chunk_delta_h.py asserts K <= 256


def delta_rule_shape_reason(k: int, v: int) -> str:
    """Why fla's chunked delta-rule kernels cannot take key width ``k`` ("" when they
    can): their state kernel asserts ``K <= 256``; ``v`` is blocked and has no limit."""
    if k > FLA_MAX_HEAD_DIM:
        return f"fla's chunked delta-rule kernels take key widths up to {FLA_MAX_HEAD_DIM}, k={k}"
    return ""


def delta_rule_fused(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    chunk_size: int = 64,
    initial_state: torch.Tensor | None = None,
    scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(Gated) DeltaNet by fla's chunked Triton kernels.

    Args:
        as :func:`ssmbench.ops.delta_rule`: q, k ``(b, t, h, k)`` (already L2-normalized);
            v ``(b, t, h, v)``; beta ``(b, t, h)``; g ``(b, t, h)`` log-decay or None;
            initial_state ``(b, h, k, v)``; chunk_size: fla's chunk (16, 32 or 64; any
            other value runs 64, which gives the same result); scale: the queries' scale.

    Returns:
        o ``(b, t, h, v)`` in the dtype of q and the final state ``(b, h, k, v)`` float32.

    fla's layouts are ours (its default state layout is ``[N, H, K, V]``).  fla scales q
    by ``K ** -0.5`` unless told otherwise: it is told ours (1 by default).  g is passed in
    float32 (fla's own layers compute it so).  Without g, half precision runs
    ``chunk_delta_rule``; float32, which that kernel refuses, runs the gated kernel with
    g = 0, the same recurrence (:func:`delta_rule_impl` names the kernel).
    """
    kernels.check_tensors(q, k, v, beta, g, initial_state)
    reason = delta_rule_shape_reason(k.shape[-1], v.shape[-1])
    if reason:
        raise BackendUnavailable(reason)
    h0 = None if initial_state is None else initial_state.float().contiguous()
    chunk = chunk_size if chunk_size in (16, 32, 64) else 64
    common = dict(scale=scale, initial_state=h0, output_final_state=True, chunk_size=chunk)
    if delta_rule_impl(q.dtype, g is not None) == "fla.chunk_delta_rule":
        kernel = kernels.kernel_module("fla.ops.delta_rule", "fla").chunk_delta_rule
        o, final_state = kernel(q, k, v, beta, **common)
    else:
        kernel = kernels.kernel_module("fla.ops.gated_delta_rule", "fla").chunk_gated_delta_rule
        log_decay = q.new_zeros(beta.shape, dtype=torch.float32) if g is None else g.float()
        o, final_state = kernel(q, k, v, log_decay, beta, **common)
    return o, final_state.float()


def delta_rule_step_fused(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
    scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the (gated) delta rule by fla's fused recurrent Triton kernels.

    Args:
        as :func:`ssmbench.ops.delta_rule_step`: q, k ``(b, h, k)``; v ``(b, h, v)``;
            beta, g ``(b, h)``; state ``(b, h, k, v)`` or None (zeros); scale: the
            queries' scale.

    Returns:
        o ``(b, h, v)`` in the dtype of q and the new state ``(b, h, k, v)`` float32.

    The token gets a length-1 time axis (fla's ``(b, t, h, .)`` layout); scale passed as
    in :func:`delta_rule_fused`.  fla writes the new state to a fresh tensor.
    """
    kernels.check_tensors(q, k, v, beta, g, state)
    h0 = None if state is None else state.float().contiguous()
    tokens = [x[:, None] for x in (q, k, v, beta)]  # (b 1 h .)
    common = dict(scale=scale, initial_state=h0, output_final_state=True)
    if g is None:
        kernel = kernels.kernel_module("fla.ops.delta_rule", "fla").fused_recurrent_delta_rule
        o, new_state = kernel(*tokens[:3], beta=tokens[3], **common)
    else:
        kernel = kernels.kernel_module(
            "fla.ops.gated_delta_rule", "fla"
        ).fused_recurrent_gated_delta_rule
        o, new_state = kernel(*tokens[:3], g=g[:, None].float(), beta=tokens[3], **common)
    return o[:, 0], new_state.float()  # (b h v), (b h k v)


def fused_block_reason(head_dim: int, d_state: int) -> str:
    """Why a DeltaNet block of ``head_dim`` cannot run the fused kernels ("" when it can):
    k = v = head_dim (its state size is fixed by them, ``d_state`` is not used)."""
    return delta_rule_shape_reason(head_dim, head_dim)


# op of a verify shape -> why the kernel cannot take its dims (ssmbench.models.kernels)
FUSED_SHAPE_REASONS = {"delta_rule": lambda k, v, **_: delta_rule_shape_reason(k, v)}


def fused_unavailable(device: str | torch.device, phase: str | None = None) -> str:
    """Why the fused backend cannot run on ``device`` ("" when it can; every phase alike):
    Triton, so CUDA or the interpreter, and its packages."""
    return kernels.triton_reason(device) or kernels.package_reason(
        *FAMILY["deltanet"].fused_packages
    )


DELTA_RULE_BACKENDS = {
    "naive": delta_rule_naive,
    "torch": delta_rule_torch,
    "torch-mixed": delta_rule_mixed,
    "fused": delta_rule_fused,  # flash-linear-attention's chunk (gated) delta rule
}
# one token: no matmul worth running in half precision, torch-mixed takes torch's step
DELTA_RULE_STEP_BACKENDS = {
    "naive": delta_rule_step,
    "torch": delta_rule_step,
    "torch-mixed": delta_rule_step,
    "fused": delta_rule_step_fused,  # fla's fused recurrent kernel, one token
}


def _l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum x^2 + eps) over the last axis, in float32 at least (flash-linear-
    attention's ``l2norm``, eps included)."""
    (x_wide,) = widen(x)
    return (x_wide * torch.rsqrt(x_wide.pow(2).sum(-1, keepdim=True) + eps)).to(x.dtype)


def random_inputs(
    draws: RandomDraws,
    b: int,
    t: int,
    h: int,
    dk: int,
    dv: int,
    log_decay_range: tuple[float, float] = (0.0, 0.5),
) -> dict[str, torch.Tensor]:
    """Random arguments of :func:`delta_rule_torch` (its other backends and its step
    alike) by name, drawn from ``draws`` in this order: q, k ``(b, t, h, dk)`` and v
    ``(b, t, h, dv)`` standard normal, then q and k L2-normalized (in float32, rounded
    back); beta ``(b, t, h)`` uniform in [0.05, 0.95]; the log-decay g ``(b, t, h)``
    uniform in minus ``log_decay_range``; initial_state ``(b, h, dk, dv)`` standard normal.

    Unit keys and beta in (0, 1) make every step contract the state, so errors do not grow
    along the sequence; unit queries keep the outputs O(1) (the block's further
    1 / sqrt(d_k) on q is left out: it would shrink them below atol; with queries of norm
    sqrt(d_k) a plain DeltaNet's outputs reach 19, and bf16 matmuls miss atol on outputs
    whose terms cancel).  ``log_decay_range`` sets how steep the decays are (a chunk whose
    total is below LOG_DECAY_FLOOR takes an exact path)."""
    q, k, v = draws.randn(b, t, h, dk), draws.randn(b, t, h, dk), draws.randn(b, t, h, dv)
    q, k = (F.normalize(x.float(), dim=-1).to(x.dtype) for x in (q, k))  # (b t h k)
    beta = draws.rand(b, t, h, low=0.05, high=0.95)
    g = -draws.rand(b, t, h, low=log_decay_range[0], high=log_decay_range[1])
    initial_state = draws.randn(b, h, dk, dv)
    return {"q": q, "k": k, "v": v, "beta": beta, "g": g, "initial_state": initial_state}


class DeltaNetMixer(nn.Module):
    """The (Gated) DeltaNet token mixer, as flash-linear-attention's DeltaNet and
    GatedDeltaNet layers build it (without their output gate):

        q, k, v = silu(short causal depthwise conv(q_proj(x), k_proj(x), v_proj(x)))
        q, k    = l2_normalize(q, k) per head
        beta    = sigmoid(b_proj(x))                                   (b, t, h)
        g       = -exp(A_log) * softplus(a_proj(x) + dt_bias)          (gated only; <= 0)
        o, S    = delta_rule(q, k, v, beta, g, scale=1 / sqrt(d_k))
        out     = out_proj(RMSNorm(o) per head)

    ``gated=True`` is Gated DeltaNet (the benchmark's ``deltanet`` block, so that the
    family has decays); ``gated=False`` is DeltaNet (g = None).  d_k = d_v = head_dim.
    Init of the decay as Mamba-2 / Gated DeltaNet: A uniform in [1, 16], stored as log;
    dt log-uniform in DT_INIT_RANGE (at least DT_INIT_FLOOR), stored as the inverse
    softplus in dt_bias.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int,
        d_conv: int = 4,
        chunk_size: int = 64,
        gated: bool = True,
    ):
        super().__init__()
        self.n_heads = n_heads  # h
        self.head_dim = head_dim  # d_k = d_v
        self.d_conv = d_conv
        self.chunk_size = chunk_size
        self.gated = gated
        self.scale = head_dim**-0.5  # the queries' scale, passed to the operator
        inner = n_heads * head_dim

        self.q_proj = nn.Linear(d_model, inner, bias=False)
        self.k_proj = nn.Linear(d_model, inner, bias=False)
        self.v_proj = nn.Linear(d_model, inner, bias=False)
        # flash-linear-attention's ShortConvolution: depthwise, causal, no bias, then SiLU
        self.q_conv1d, self.k_conv1d, self.v_conv1d = (
            CausalConv1d(inner, d_conv, bias=False) for _ in range(3)
        )
        self.b_proj = nn.Linear(d_model, n_heads, bias=False)
        if gated:
            self.a_proj = nn.Linear(d_model, n_heads, bias=False)
            A = torch.empty(n_heads).uniform_(*A_INIT_RANGE)  # (h)
            self.A_log = nn.Parameter(torch.log(A))
            self.dt_bias = nn.Parameter(dt_bias_init(n_heads))
        self.o_norm = RMSNorm(head_dim)
        self.out_proj = nn.Linear(inner, d_model, bias=False)

    def _gates(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """beta ``(..., h)`` and the log-decay g ``(..., h)`` (None when not gated) of
        x ``(..., d_model)``; g in float32 at least."""
        beta = torch.sigmoid(self.b_proj(x))  # (... h)
        if not self.gated:
            return beta, None
        a, A_log, dt_bias = widen(self.a_proj(x), self.A_log, self.dt_bias)
        g = -torch.exp(A_log) * F.softplus(a + dt_bias)  # (... h)
        return beta, g

    def _heads(self, q, k, v):
        """Split ``(..., h*k)`` into heads ``(..., h, k)`` and L2-normalize q and k (the
        operator scales q by 1 / sqrt(d_k), :attr:`scale`)."""
        q, k, v = (x.unflatten(-1, (self.n_heads, self.head_dim)) for x in (q, k, v))
        return _l2_normalize(q), _l2_normalize(k), v  # (... h k), (... h k), (... h v)

    def forward(self, x: torch.Tensor, backend: str) -> tuple[torch.Tensor, DeltaNetCache]:
        """x: ``(b, t, d_model)`` -> y ``(b, t, d_model)`` and the cache
        ``(q_conv_state, k_conv_state, v_conv_state, S)``: three ``(b, h*head_dim,
        d_conv)`` conv states (the last d_conv conv inputs, zeros before the sequence)
        and the delta-rule state S ``(b, h, k, v)``."""
        delta_rule = pick_backend(DELTA_RULE_BACKENDS, backend, "DeltaNetMixer")
        batch, T, _ = x.shape
        q, q_state = self.q_conv1d(self.q_proj(x))  # (b t h*k), (b h*k d_conv)
        k, k_state = self.k_conv1d(self.k_proj(x))  # (b t h*k), (b h*k d_conv)
        v, v_state = self.v_conv1d(self.v_proj(x))  # (b t h*v), (b h*v d_conv)
        q, k, v = self._heads(q, k, v)  # (b t h k), (b t h k), (b t h v)
        beta, g = self._gates(x)  # (b t h) each
        o, state = delta_rule(
            q, k, v, beta, g=g, chunk_size=self.chunk_size, scale=self.scale
        )  # (b t h v)
        y = self.out_proj(self.o_norm(o).flatten(-2))  # (b t d_model)
        return y, (q_state, k_state, v_state, state)

    def step(
        self, x_t: torch.Tensor, cache: DeltaNetCache | None, backend: str
    ) -> tuple[torch.Tensor, DeltaNetCache]:
        """x_t: ``(b, d_model)``, cache from :meth:`forward` or the last step (or None
        for an empty one) -> y_t ``(b, d_model)`` and the updated cache."""
        step = pick_backend(DELTA_RULE_STEP_BACKENDS, backend, "DeltaNetMixer.step")
        q_state, k_state, v_state, state = (None,) * 4 if cache is None else cache
        q, q_state = self.q_conv1d.step(self.q_proj(x_t), q_state)  # (b h*k)
        k, k_state = self.k_conv1d.step(self.k_proj(x_t), k_state)  # (b h*k)
        v, v_state = self.v_conv1d.step(self.v_proj(x_t), v_state)  # (b h*v)
        q, k, v = self._heads(q, k, v)  # (b h k), (b h k), (b h v)
        beta, g = self._gates(x_t)  # (b h) each
        o, state = step(q, k, v, beta, g=g, state=state, scale=self.scale)  # (b h v), (b h k v)
        y_t = self.out_proj(self.o_norm(o).flatten(-2))  # (b d_model)
        return y_t, (q_state, k_state, v_state, state)


def build_mixer(size: Size, d_state: int, layer: int) -> DeltaNetMixer:
    """The Gated DeltaNet mixer of a run's size preset: ``size.n_heads`` heads of
    d_k = d_v = ``size.head_dim``, conv width ``size.d_conv``, chunks of ``size.chunk``.
    ``d_state`` and ``layer`` are unused (the state per head is head_dim x head_dim)."""
    return DeltaNetMixer(
        size.d_model,
        size.n_heads,
        size.head_dim,
        d_conv=size.d_conv,
        chunk_size=size.chunk,
        gated=True,
    )
