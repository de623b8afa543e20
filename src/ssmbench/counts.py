"""Analytic FLOP and minimum-byte counts per (family, phase, shape).

Conventions (stated once, used everywhere):

* A multiply-add is 2 FLOPs; a dense ``(m, k) @ (k, n)`` is ``2 m k n``.
* Elementwise work (norms, activations, softplus, residual adds, softmax) is not counted:
  it is small next to the matmuls and the scan, and counting it differs between sources.
* Causal attention is counted at half of the full ``4 b h T^2 d`` (QK^T and PV), the
  convention of the FlashAttention benchmarks (Dao 2023, arXiv 2307.08691, section 4.1).
* The Mamba-1 selective scan is ``9 b T E N`` FLOPs (VMamba's ``flops_selective_scan_fn``,
  Liu et al. 2024, arXiv 2401.10166): per (b, t, e, n) the discretization
  ``exp(delta A)`` and ``delta B u`` (3), the state update ``h = dA h + dBu`` (2), the readout
  ``C h`` (2), and 2 for the exponential and the sum; plus ``b T E`` each for the ``D u`` skip
  and the ``z`` gate.
* The recurrent families (S4D, Mamba-2, Mamba-3, the delta rule) are counted by their
  recurrent form, the least arithmetic that produces the output; the chunked and FFT forms
  execute more (intra-chunk quadratic terms) or differently (FFTs), and
  ``scripts/bench_ratios.py`` reports those executed counts separately (``*_op_flop``).
  Per token and head (p head dim, n state size, k/v key and value dims):
  Mamba-2 SSD ``5 p n + 3 p``: dt x (p), its outer product with B (p n), the decay
  times h (p n), their sum (p n), the readout C h (2 p n) and the D skip (2 p);
  Mamba-3 ``7 p n + 4 p + 14 r`` for r rotated pairs (the same plus the trapezoid's second
  outer product and its weights, the phase update and two complex rotations; its decay
  rate A per token is a projection, counted with the others, and elementwise after it);
  the gated delta rule ``7 k v + 2 v``, written S' = a S, S = S' + beta k (v - S'^T k)^T:
  the decay (k v), S'^T k (2 k v), v minus it and times beta (2 v), the rank-1 update
  (2 k v) and the readout S^T q (2 k v);
  S4D ``18 n + 2`` per channel for n complex modes: dB u (2), the complex update
  dA h + dB u (8) and the complex readout 2 Re(C h) (8) per mode, and D u (2).
* Minimum bytes move each input once and each output once and nothing else (a perfectly
  fused kernel with on-chip intermediates): the weights, the input ``x (b, T, D)``, the
  output ``y (b, T, D)`` and the state or KV cache the prefill returns.  They split into
  bytes read (weights, inputs, a cache given) and bytes written (outputs, a cache
  returned or updated).

Sizes follow the blocks in ``ssmbench.models`` (each module's docstring draws its block):
every model stacks ``n_layers`` residual blocks with an RMSNorm each and a final RMSNorm;
the hybrid's layers are Mamba-2 or attention by ``Size.hybrid_pattern``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ssmbench.matrix import DTYPE_BYTES, Size


@dataclass(frozen=True)
class Counts:
    flop: float
    bytes: float  # bytes_read + bytes_written
    weights_bytes: float
    cache_bytes: float
    tokens: int
    bytes_read: float = 0.0
    bytes_written: float = 0.0

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per byte."""
        return self.flop / self.bytes


def dt_rank(size: Size) -> int:
    """Rank of the Mamba block's delta projection: ceil(d_model / 16) (Mamba's default)."""
    return math.ceil(size.d_model / 16)


def rotation_pairs(d_state: int) -> int:
    """State pairs the Mamba-3 block rotates (the block uses this function too): mamba_ssm's
    default ``rope_fraction = 0.5`` rotates half the state channels, n/4 pairs, at least
    one pair when n >= 2."""
    return min(d_state // 2, max(1, d_state // 4))


@dataclass(frozen=True)
class Layer:
    """One residual block: its parameters (its RMSNorm included), the cache it returns
    (elements, complex counted as two), its forward FLOPs term by term, and the cache
    elements one decode step writes (``None``: the whole cache, as an SSM rewrites its
    state); ``kv``: the cache is keys and values that grow with T (attention), not a
    fixed-size state."""

    params: int
    cache: int
    terms: dict
    step_writes: int | None = None
    kv: bool = False


def layer(
    model: str,
    size: Size,
    d_state: int,
    index: int,
    batch: int,
    seq_len: int,
    decode: bool = False,
) -> Layer:
    """Counts of block ``index`` of ``model`` over ``batch x seq_len`` tokens, or with
    ``decode`` for one new token per sequence after ``seq_len`` cached ones (the cache
    counted is then the one the step returns)."""
    bT = batch if decode else batch * seq_len  # tokens this pass computes
    D, N = size.d_model, d_state
    E, k = size.expand * D, size.d_conv
    if model == "hybrid":
        model = "attention" if size.layer_kind(index) == "A" else "mamba2"
    if model == "attention":
        h, d = size.n_heads, size.head_dim
        if decode:  # one query against the T cached keys and its own: QK^T and PV
            attention = 4 * batch * h * (seq_len + 1) * d
        else:
            attention = 4 * batch * h * seq_len * seq_len * d / 2  # causal: half
        return Layer(
            params=D + 3 * D * h * d + h * d * D,
            cache=2 * batch * (seq_len + decode) * h * d,
            terms={
                "proj": 2 * bT * D * 3 * h * d + 2 * bT * h * d * D,
                "attention": attention,
            },
            step_writes=2 * batch * h * d,  # the new token's key and value
            kv=True,
        )
    if model == "mamba":
        R = dt_rank(size)
        return Layer(
            params=D + D * 2 * E + E * k + E + E * (R + 2 * N) + R * E + E + E * N + E + E * D,
            cache=batch * E * (N + k),  # ssm state + mamba_ssm's d_conv-wide conv window
            terms={
                "proj": 2 * bT * (D * 2 * E + E * (R + 2 * N) + R * E + E * D),
                "conv": 2 * bT * E * k,
                "scan": 9 * bT * E * N + 2 * bT * E,  # + D skip and z gate
            },
        )
    if model == "s4d":
        n = N // 2  # complex modes
        return Layer(
            params=D + D + 2 * D * n + 2 * D * n + D + 2 * D * D + 2 * D,
            cache=batch * D * 2 * n,
            terms={"proj": 2 * bT * D * 2 * D, "scan": bT * D * (18 * n + 2)},
        )
    if model == "mamba2":
        P = size.head_dim
        H, G = E // P, 1
        conv_dim = E + 2 * G * N
        return Layer(
            params=D + D * (E + conv_dim + H) + conv_dim * k + conv_dim + 3 * H + E + E * D,
            cache=batch * (conv_dim * k + H * P * N),
            terms={
                "proj": 2 * bT * (D * (E + conv_dim + H) + E * D),
                "conv": 2 * bT * conv_dim * k,
                "scan": bT * H * (5 * P * N + 3 * P),
            },
        )
    if model == "mamba3":
        P = size.head_dim
        H = E // P
        r = rotation_pairs(N)
        # in_proj: z, x (H P each), B, C (N each), dt, A, lam (H each: A per token), r angles
        in_proj = D * (2 * H * P + 2 * N + 3 * H + r)
        return Layer(
            params=D + in_proj + 2 * N + 2 * H * N + 2 * H + H * P * D,
            cache=batch * H * (P * N + r + N + P),  # ssm, phase, last B and x
            terms={
                "proj": 2 * bT * (in_proj + H * P * D),
                "scan": bT * H * (7 * P * N + 4 * P + 14 * r),
            },
        )
    if model == "deltanet":
        h, dk = size.n_heads, size.head_dim
        inner = h * dk
        return Layer(
            params=D + 3 * D * inner + 3 * inner * k + 2 * D * h + 2 * h + dk + inner * D,
            cache=batch * (3 * inner * k + h * dk * dk),
            terms={
                "proj": 2 * bT * (3 * D * inner + 2 * D * h + inner * D),
                "conv": 3 * 2 * bT * inner * k,
                "scan": bT * h * (7 * dk * dk + 2 * dk),
            },
        )
    raise ValueError(f"no counts for model {model!r}")


def _layers(
    model: str, size: Size, d_state: int, batch: int, seq_len: int, decode: bool = False
) -> list[Layer]:
    return [layer(model, size, d_state, i, batch, seq_len, decode) for i in range(size.n_layers)]


def n_params(model: str, size: Size, d_state: int) -> int:
    """Parameters of the residual stack (blocks, their norms and the final norm)."""
    return sum(x.params for x in _layers(model, size, d_state, 1, 1)) + size.d_model


def cache_elements(
    model: str, size: Size, batch: int, seq_len: int, d_state: int, decode: bool = False
) -> int:
    """Elements of the states (SSM) or KV caches (attention) a prefill returns, or with
    ``decode`` the ones a decode step after ``seq_len`` tokens reads: attention's buffer
    holds the new token's slot too (T + 1 tokens, written in place)."""
    return sum(x.cache for x in _layers(model, size, d_state, batch, seq_len, decode))


def cache_split(
    model: str, size: Size, batch: int, seq_len: int, d_state: int, decode: bool = False
) -> tuple[int, int]:
    """:func:`cache_elements` split into (fixed-size state, KV cache): the SSM layers'
    states and conv windows, which do not grow with T, and the attention layers' keys and
    values, which do (a hybrid has both)."""
    layers = _layers(model, size, d_state, batch, seq_len, decode)
    return sum(x.cache for x in layers if not x.kv), sum(x.cache for x in layers if x.kv)


def prefill_terms(model: str, size: Size, batch: int, seq_len: int, d_state: int) -> dict:
    """FLOPs of a forward pass over ``seq_len`` tokens, term by term, summed over layers."""
    terms: dict[str, float] = {}
    for x in _layers(model, size, d_state, batch, seq_len):
        for name, value in x.terms.items():
            terms[name] = terms.get(name, 0) + value
    return terms


def prefill_flop(model: str, size: Size, batch: int, seq_len: int, d_state: int) -> float:
    """FLOPs of a forward pass over ``seq_len`` tokens: the sum of :func:`prefill_terms`."""
    return float(sum(prefill_terms(model, size, batch, seq_len, d_state).values()))


def decode_terms(model: str, size: Size, batch: int, seq_len: int, d_state: int) -> dict:
    """FLOPs of one decode step per sequence after ``seq_len`` cached tokens, by term: the
    projections and convs of one token, the recurrence of one token (the per-token counts
    of the module docstring), and for attention ``4 b h (T + 1) d`` (QK^T and PV of one
    query over T + 1 keys; nothing is halved)."""
    terms: dict[str, float] = {}
    for x in _layers(model, size, d_state, batch, seq_len, decode=True):
        for name, value in x.terms.items():
            terms[name] = terms.get(name, 0) + value
    return terms


# Operators alone, as executed by their `torch` forms (scripts/bench_ratios.py).


def attention_op_flop(b: int, t: int, h: int, d: int, causal: bool = True) -> float:
    """QK^T and PV, ``4 b h t^2 d``, halved when causal (FlashAttention's convention)."""
    return 4 * b * h * t * t * d / (2 if causal else 1)


def selective_scan_op_flop(b: int, t: int, d: int, n: int) -> float:
    """The 9 b t d n selective-scan convention plus D skip and z gate (module docstring)."""
    return 9 * b * t * d * n + 2 * b * t * d


def s4d_op_flop(b: int, t: int, h: int, n: int) -> float:
    """The recurrent count ``b t h (18 n + 2)`` (the FFT form's work differs; see docstring)."""
    return b * t * h * (18 * n + 2)


def ssd_op_flop(b: int, t: int, h: int, p: int, n: int, g: int, chunk: int) -> float:
    """Executed FLOPs of chunked SSD (Dao & Gu 2024, section 6) with chunk length Q and
    c = ceil(t / Q) chunks: C B^T per group and chunk (2 Q^2 n), its masked product with X
    per head (2 Q^2 p), the chunk states B^T X (2 Q p n) and the state readout C h
    (2 Q p n) per head and chunk, and the inter-chunk pass over chunk states as one
    (c+1) x (c+1) decay matmul per head (2 (c+1)^2 p n)."""
    c = -(-t // chunk)
    per_chunk = 2 * g * chunk * chunk * n + h * (2 * chunk * chunk * p + 4 * chunk * p * n)
    return b * (c * per_chunk + h * 2 * (c + 1) ** 2 * p * n)


def mamba3_op_flop(b: int, t: int, h: int, p: int, n: int, g: int, chunk: int) -> float:
    """Chunked Mamba-3 executes one SSD (the trapezoid folded into per-token weights), with
    C B^T per head because the rotations are per head: :func:`ssd_op_flop` with g = h."""
    return ssd_op_flop(b, t, h, p, n, h, chunk)


def delta_rule_op_flop(b: int, t: int, h: int, dk: int, dv: int, chunk: int) -> float:
    """Executed FLOPs of the chunked (WY / UT) delta rule per chunk of length C and head
    (DeltaNet paper, section 3, as :func:`ssmbench.models.deltanet.delta_rule_torch` runs
    it): K K^T and Q K^T (2 C^2 dk each), the triangular solves for W and U~ with
    C^2 FLOPs per right-hand-side column (C^2 (dk + dv)), the product of Q K^T with U
    (2 C^2 dv), and W S, Q S and the state update K^T U (2 C dk dv each)."""
    C = min(chunk, t)  # a chunk longer than the sequence runs as one chunk of t tokens
    c = -(-t // C)
    per_chunk = 4 * C * C * dk + C * C * (dk + dv) + 2 * C * C * dv + 6 * C * dk * dv
    return b * h * c * per_chunk


def counts(
    model: str, phase: str, size: Size, batch: int, seq_len: int, d_state: int, dtype: str
) -> Counts:
    """FLOPs, minimum bytes and tokens of one cell.

    * prefill: the forward pass; bytes = weights + x in + y out + the cache it returns.
    * decode: one token per sequence given a cache of ``seq_len`` tokens; bytes = weights
      + x_t in + y_t out + the cache read + what the step writes (an SSM rewrites its
      whole state; attention writes one key and value per layer in place, into a buffer
      of T + 1 tokens, and reads the buffer once: the cache counted is that buffer).
    * train: forward and backward, counted as 3x the forward (the backward pass costs
      twice the forward: Kaplan et al. 2020, arXiv 2001.08361, section 2.1); bytes =
      weights read + their gradients written + x in.
    """
    width = DTYPE_BYTES[dtype]
    weights = n_params(model, size, d_state) * width
    cache = cache_elements(model, size, batch, seq_len, d_state, phase == "decode") * width
    D = size.d_model
    if phase == "prefill":
        flop = prefill_flop(model, size, batch, seq_len, d_state)
        read = weights + batch * seq_len * D * width  # weights, x in
        written = batch * seq_len * D * width + cache  # y out, cache out
        tokens = batch * seq_len
    elif phase == "decode":
        flop = float(sum(decode_terms(model, size, batch, seq_len, d_state).values()))
        step_writes = sum(
            x.cache if x.step_writes is None else x.step_writes
            for x in _layers(model, size, d_state, batch, seq_len)
        )
        read = weights + batch * D * width + cache  # weights, x_t in, the cache
        written = batch * D * width + step_writes * width  # y_t out, the cache's update
        tokens = batch
    elif phase == "train":
        flop = 3 * prefill_flop(model, size, batch, seq_len, d_state)
        read = weights + batch * seq_len * D * width  # weights, x in
        written = weights  # the weights' gradients
        tokens = batch * seq_len
    else:
        raise ValueError(f"no counts for phase {phase!r}; known: prefill, decode, train")
    return Counts(
        flop=float(flop),
        bytes=float(read + written),
        weights_bytes=float(weights),
        cache_bytes=float(cache),
        tokens=tokens,
        bytes_read=float(read),
        bytes_written=float(written),
    )
