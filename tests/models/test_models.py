"""Whole blocks of every family: the decode step against the forward pass, decode after prefill,
deterministic builds, unknown names refused; the shared causal conv's two forms.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ssmbench.matrix import Size
from ssmbench.models import BACKENDS, FAMILIES, build_model
from ssmbench.models.attention import valid_cache
from ssmbench.models.common import CausalConv1d
from ssmbench.numerics import assert_close
from ssmbench.verify import verify_backend

SMALL_SIZE = Size(d_model=40, n_layers=2, n_heads=3, head_dim=16, expand=2, d_conv=4, chunk=16)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model", FAMILIES)
def test_block_step_matches_forward(model, backend):
    net = build_model(model, SMALL_SIZE, d_state=5, backend=backend, seed=1)
    x = torch.randn(2, 23, SMALL_SIZE.d_model, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        y, caches = net(x)
        step_caches, ys = [None] * SMALL_SIZE.n_layers, []
        for t in range(x.shape[1]):
            y_t, step_caches = net.step(x[:, t], step_caches)
            ys.append(y_t)
    assert_close("y", y, torch.stack(ys, dim=1), "fp32")
    for layer, (cache, step_cache) in enumerate(zip(caches, step_caches, strict=True)):
        stepped_parts = valid_cache(step_cache)
        for part, (full, stepped) in enumerate(zip(cache, stepped_parts, strict=True)):
            assert_close(f"cache{layer}.{part}", full, stepped, "fp32")


@pytest.mark.parametrize("prefill_len", [2, 11], ids=lambda t: f"prefill{t}")
@pytest.mark.parametrize("model", FAMILIES)
def test_block_decode_continues_prefill(model, prefill_len):
    """Prefill (shorter and longer than the conv width), then decode == one forward."""
    net = build_model(model, SMALL_SIZE, d_state=5, backend="torch", seed=2)
    x = torch.randn(1, 16, SMALL_SIZE.d_model, generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        y, _ = net(x)
        y_prefill, caches = net(x[:, :prefill_len])
        ys = [y_prefill]
        for t in range(prefill_len, x.shape[1]):
            y_t, caches = net.step(x[:, t], caches)
            ys.append(y_t[:, None])
    assert_close("y", y, torch.cat(ys, dim=1), "fp32")


def test_build_model_is_deterministic():
    first = build_model("mamba", SMALL_SIZE, d_state=5, backend="naive", seed=3)
    again = build_model("mamba", SMALL_SIZE, d_state=5, backend="torch", seed=3)
    other = build_model("mamba", SMALL_SIZE, d_state=5, backend="naive", seed=4)
    for (name, p), q, r in zip(
        first.named_parameters(), again.parameters(), other.parameters(), strict=True
    ):
        assert torch.equal(p, q), name
        if name.endswith(("in_proj.weight", "dt_proj.bias")):
            assert not torch.equal(p, r), name
    assert again.backend == "torch"


def test_unknown_model_or_dtype_raises():
    with pytest.raises(ValueError, match="'rwkv'.*attention"):
        build_model("rwkv", SMALL_SIZE, d_state=5, backend="torch")
    with pytest.raises(ValueError, match="'rwkv'"):
        verify_backend("rwkv", "torch")
    with pytest.raises(ValueError, match="'fp8'"):
        verify_backend("mamba", "torch", dtype="fp8")


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize(
    "b, t, d", [(2, 1, 5), (2, 3, 5), (3, 37, 13)], ids=["B2-T1-D5", "B2-T3-D5", "B3-T37-D13"]
)
def test_causal_conv_under_autograd_matches_conv1d(b, t, d, bias):
    """fp64: the conv's form under autograd (shifted multiply-adds) == torch's conv1d, the
    form without gradients, in the output, the decode state and the gradients of x, the
    weight and the bias, for a random upstream gradient (t shorter than the width too)."""
    g = torch.Generator().manual_seed(30)
    conv = CausalConv1d(d, 4, bias=bias).double()
    x = torch.randn(b, t, d, generator=g, dtype=torch.float64, requires_grad=True)
    grad_y = torch.randn(b, t, d, generator=g, dtype=torch.float64)
    y, state = conv(x)  # under autograd: the shifted form
    with torch.no_grad():
        y_conv1d, state_conv1d = conv(x)
    assert_close("y", y_conv1d, y.detach(), "fp64")
    assert_close("state", state_conv1d, state, "fp64")
    leaves = [x, *conv.parameters()]
    shifted_grads = torch.autograd.grad(y, leaves, grad_y)
    x_t = x.transpose(1, 2)  # (b d t)
    y_ref = F.silu(F.conv1d(x_t, conv.weight, conv.bias, padding=3, groups=d)[..., :t])
    conv1d_grads = torch.autograd.grad(y_ref.transpose(1, 2), leaves, grad_y)
    names = ["x", *(name for name, _ in conv.named_parameters())]
    for name, ref, out in zip(names, conv1d_grads, shifted_grads, strict=True):
        assert_close(f"grad_{name}", ref, out, "fp64")
