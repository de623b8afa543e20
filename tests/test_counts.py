"""Analytic counts against what the models actually hold and execute."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from ssmbench import counts
from ssmbench.config import Size
from ssmbench.models import build_model

SIZES = [
    Size(d_model=32, n_layers=1, n_heads=2, head_dim=16, expand=2, d_conv=4, chunk=16),
    Size(d_model=48, n_layers=3, n_heads=3, head_dim=10, expand=3, d_conv=3, chunk=8),
]
IDS = ["D32-L1", "D48-L3"]


@pytest.mark.parametrize("size", SIZES, ids=IDS)
@pytest.mark.parametrize("model, d_state", [("attention", 0), ("mamba", 5)])
def test_parameter_count_matches_the_model(model, d_state, size):
    m = build_model(model, size, max(d_state, 1), "torch")
    assert counts.n_params(model, size, d_state) == sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("size", SIZES, ids=IDS)
@pytest.mark.parametrize("batch, seq_len", [(1, 17), (2, 40)])
def test_attention_flops_match_the_executed_matmuls(size, batch, seq_len):
    # torch's FlopCounterMode counts the naive path's matmuls in full: the projections plus
    # QK^T and PV over the whole T x T square, i.e. twice our causal (halved) term.
    m = build_model("attention", size, 1, "naive")
    x = torch.randn(batch, seq_len, size.d_model)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        m(x)
    ours = counts.prefill_flop("attention", size, batch, seq_len, 0)
    attn = size.n_layers * 4 * batch * size.n_heads * seq_len**2 * size.head_dim / 2
    assert counter.get_total_flops() == ours + attn


@pytest.mark.parametrize("size", SIZES, ids=IDS)
@pytest.mark.parametrize("backend", ["naive", "torch"])
@pytest.mark.parametrize("batch, seq_len, d_state", [(1, 17, 4), (2, 33, 16)])
def test_mamba_flops_match_the_executed_matmuls_and_conv(size, backend, batch, seq_len, d_state):
    # FlopCounterMode sees the matmuls (the projections, and the scan's readout C h, which
    # both backends contract with einsum: 2 of the scan's 9 FLOPs per (b, t, e, n)) and the
    # depthwise conv, which runs over the padded length T + k - 1 before it is cut to T.
    m = build_model("mamba", size, d_state, backend)
    x = torch.randn(batch, seq_len, size.d_model)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        m(x)
    seen = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    terms = counts.prefill_terms("mamba", size, batch, seq_len, d_state)
    E, k, L = size.expand * size.d_model, size.d_conv, size.n_layers
    readout = L * 2 * batch * seq_len * E * d_state
    assert seen["aten.mm"] + seen.get("aten.bmm", 0) == terms["proj"] + readout
    assert seen["aten.convolution"] == terms["conv"] * (seq_len + k - 1) / seq_len


@pytest.mark.parametrize("model, d_state", [("attention", 0), ("mamba", 6)])
def test_cache_size_matches_what_prefill_returns(model, d_state):
    size = SIZES[1]
    m = build_model(model, size, max(d_state, 1), "torch")
    with torch.no_grad():
        _, cache = m(torch.randn(2, 21, size.d_model))
    flat = [t for layer in cache for t in (layer if isinstance(layer, (tuple, list)) else [layer])]
    held = sum(t.numel() for t in flat)
    assert held == counts.cache_elements(model, size, 2, 21, d_state)


def test_minimum_bytes_and_intensity():
    size = SIZES[0]
    c = counts.counts("mamba", "prefill", size, 1, 64, 4, "fp32")
    io = 2 * 64 * size.d_model * 4
    assert c.bytes == c.weights_bytes + c.cache_bytes + io
    assert c.weights_bytes == counts.n_params("mamba", size, 4) * 4
    assert c.intensity == pytest.approx(c.flop / c.bytes)
    assert counts.counts("mamba", "prefill", size, 1, 64, 4, "bf16").bytes == c.bytes / 2
    with pytest.raises(ValueError, match="phase 'decode'"):
        counts.counts("mamba", "decode", size, 1, 64, 4, "fp32")
    with pytest.raises(ValueError, match="model 'rwkv'"):
        counts.n_params("rwkv", size, 4)
