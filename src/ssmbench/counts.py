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
* Minimum bytes move each input once and each output once and nothing else (a perfectly
  fused kernel with on-chip intermediates): the weights, the input ``x (b, T, D)``, the
  output ``y (b, T, D)`` and the state or KV cache the prefill returns.

Sizes follow the blocks in ``ssmbench.models``: attention has fused QKV and an output
projection; the Mamba block has in_proj, a depthwise causal conv, x_proj, dt_proj, the scan
and out_proj (Gu & Dao 2023, arXiv 2312.00752, figure 3).  Both stack ``n_layers`` residual
blocks with an RMSNorm each and a final RMSNorm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ssmbench.config import DTYPE_BYTES, Size


@dataclass(frozen=True)
class Counts:
    flop: float
    bytes: float
    weights_bytes: float
    cache_bytes: float
    tokens: int

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per byte."""
        return self.flop / self.bytes


def dt_rank(size: Size) -> int:
    """Rank of the Mamba block's delta projection: ceil(d_model / 16) (Mamba's default)."""
    return math.ceil(size.d_model / 16)


def n_params(model: str, size: Size, d_state: int) -> int:
    """Parameters of the residual stack (blocks, their norms and the final norm)."""
    D, L = size.d_model, size.n_layers
    if model == "attention":
        inner = size.n_heads * size.head_dim
        per_layer = D + 3 * D * inner + inner * D
    elif model == "mamba":
        E, N, R, k = size.expand * D, d_state, dt_rank(size), size.d_conv
        per_layer = (
            D  # norm
            + D * 2 * E  # in_proj (x and z)
            + E * k
            + E  # depthwise conv weight and bias
            + E * (R + 2 * N)  # x_proj -> (delta, B, C)
            + R * E
            + E  # dt_proj weight and bias
            + E * N
            + E  # A_log and D
            + E * D  # out_proj
        )
    else:
        raise ValueError(f"no counts for model {model!r}")
    return L * per_layer + D


def cache_elements(model: str, size: Size, batch: int, seq_len: int, d_state: int) -> int:
    """Elements of the state (SSM) or KV cache (attention) that a prefill returns."""
    if model == "attention":
        return size.n_layers * 2 * batch * seq_len * size.n_heads * size.head_dim
    if model == "mamba":
        E = size.expand * size.d_model
        # ssm state (b, E, N) + conv state (b, E, d_conv): mamba_ssm's decode layout keeps
        # d_conv inputs (one more than the d_conv - 1 a convolution strictly needs).
        return size.n_layers * batch * E * (d_state + size.d_conv)
    raise ValueError(f"no counts for model {model!r}")


def prefill_terms(model: str, size: Size, batch: int, seq_len: int, d_state: int) -> dict:
    """FLOPs of a forward pass over ``seq_len`` tokens, term by term (module docstring)."""
    b, T, D, L = batch, seq_len, size.d_model, size.n_layers
    if model == "attention":
        h, d = size.n_heads, size.head_dim
        return {
            "proj": L * (2 * b * T * D * 3 * h * d + 2 * b * T * h * d * D),
            "attention": L * 4 * b * h * T * T * d / 2,  # causal: half of QK^T + PV
        }
    if model == "mamba":
        E, N, R, k = size.expand * D, d_state, dt_rank(size), size.d_conv
        return {
            "proj": L * 2 * b * T * (D * 2 * E + E * (R + 2 * N) + R * E + E * D),
            "conv": L * 2 * b * T * E * k,
            "scan": L * (9 * b * T * E * N + 2 * b * T * E),  # + D skip and z gate
        }
    raise ValueError(f"no counts for model {model!r}")


def prefill_flop(model: str, size: Size, batch: int, seq_len: int, d_state: int) -> float:
    """FLOPs of a forward pass over ``seq_len`` tokens: the sum of :func:`prefill_terms`."""
    return float(sum(prefill_terms(model, size, batch, seq_len, d_state).values()))


def counts(
    model: str, phase: str, size: Size, batch: int, seq_len: int, d_state: int, dtype: str
) -> Counts:
    """FLOPs, minimum bytes and tokens of one cell."""
    if phase != "prefill":
        raise ValueError(f"no counts for phase {phase!r} yet")
    width = DTYPE_BYTES[dtype]
    weights = n_params(model, size, d_state) * width
    cache = cache_elements(model, size, batch, seq_len, d_state) * width
    activations_io = 2 * batch * seq_len * size.d_model * width  # x in, y out
    return Counts(
        flop=prefill_flop(model, size, batch, seq_len, d_state),
        bytes=float(weights + activations_io + cache),
        weights_bytes=float(weights),
        cache_bytes=float(cache),
        tokens=batch * seq_len,
    )
