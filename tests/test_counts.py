"""Analytic counts against what the models actually hold and execute."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from ssmbench import counts
from ssmbench.matrix import Size
from ssmbench.measure.memory import tensor_bytes
from ssmbench.models import FAMILIES, build_model
from ssmbench.models.deltanet import delta_rule_torch

SIZES = [
    Size(d_model=32, n_layers=2, n_heads=2, head_dim=16, expand=2, d_conv=4, chunk=16),
    Size(
        d_model=48,
        n_layers=3,
        n_heads=3,
        head_dim=16,
        expand=2,
        d_conv=3,
        chunk=8,
        hybrid_pattern="MAM",
    ),
]
IDS = ["D32-L2", "D48-L3"]
D_STATE = 6


def module_flops(model: torch.nn.Module, x: torch.Tensor, kinds: tuple[type, ...]) -> int:
    """FLOPs torch's FlopCounterMode attributes to the modules of the given kinds."""
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    per_module = counter.get_flop_counts()
    return sum(
        sum(per_module.get(f"ResidualStack.{name}", {}).values())
        for name, module in model.named_modules()
        if isinstance(module, kinds)
    )


@pytest.mark.parametrize("size", SIZES, ids=IDS)
@pytest.mark.parametrize("model", FAMILIES)
def test_parameter_count_matches_the_model(model, size):
    m = build_model(model, size, D_STATE, "torch")
    assert counts.n_params(model, size, D_STATE) == sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("size", SIZES, ids=IDS)
@pytest.mark.parametrize("model", FAMILIES)
def test_projection_and_conv_flops_match_the_executed_modules(model, size):
    # FlopCounterMode counts the Linear layers exactly as our "proj" term; a depthwise conv
    # runs over the padded length T + k - 1 before it is cut to T.
    batch, seq_len = 2, 19
    m = build_model(model, size, D_STATE, "naive")
    x = torch.randn(batch, seq_len, size.d_model)
    terms = counts.prefill_terms(model, size, batch, seq_len, D_STATE)
    linear = terms["proj"]
    if model == "mamba":  # its block applies dt_proj's weight by einsum, outside the module
        linear -= size.n_layers * 2 * batch * seq_len * counts.dt_rank(size) * size.d_inner
    assert module_flops(m, x, (torch.nn.Linear,)) == linear
    conv = module_flops(m, x, (torch.nn.Conv1d,))
    assert conv == terms.get("conv", 0) * (seq_len + size.d_conv - 1) / seq_len


@pytest.mark.parametrize("size", SIZES, ids=IDS)
@pytest.mark.parametrize("batch, seq_len", [(1, 17), (2, 40)])
def test_attention_flops_match_the_executed_matmuls(size, batch, seq_len):
    # torch's FlopCounterMode counts the naive path's matmuls in full: the projections plus
    # QK^T and PV over the whole T x T square, i.e. twice our causal (halved) term.
    m = build_model("attention", size, 1, "naive")
    x = torch.randn(batch, seq_len, size.d_model)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        m(x)
    terms = counts.prefill_terms("attention", size, batch, seq_len, 0)
    assert counter.get_total_flops() == terms["proj"] + 2 * terms["attention"]


@pytest.mark.parametrize("batch, seq_len, d_state", [(1, 17, 4), (2, 33, 16)])
def test_mamba_scan_readout_is_the_only_other_matmul(batch, seq_len, d_state):
    # The naive Mamba-1 loop contracts the readout C h with einsum: 2 of the scan's 9 FLOPs
    # per (b, t, e, n) show up as matmuls, beside the projections and the conv.  (The torch
    # backend also runs its in-block prefix sums as matmuls: executed work beyond the
    # counted FLOPs, which scripts/bench_ratios.py reports as such.)
    size = SIZES[0]
    m = build_model("mamba", size, d_state, "naive")
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        m(torch.randn(batch, seq_len, size.d_model))
    seen = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    terms = counts.prefill_terms("mamba", size, batch, seq_len, d_state)
    readout = size.n_layers * 2 * batch * seq_len * size.d_inner * d_state
    assert seen["aten.mm"] + seen.get("aten.bmm", 0) == terms["proj"] + readout


@pytest.mark.parametrize("model", FAMILIES)
def test_cache_size_matches_what_prefill_returns(model):
    size = SIZES[1]
    m = build_model(model, size, D_STATE, "torch")
    with torch.no_grad():
        _, cache = m(torch.randn(2, 21, size.d_model))

    def elements(obj) -> int:
        if torch.is_tensor(obj):
            return obj.numel() * (2 if obj.is_complex() else 1)
        return sum(elements(o) for o in obj)

    assert elements(cache) == counts.cache_elements(model, size, 2, 21, D_STATE)
    # and that is all the cache keeps alive: no view into a (b, t, ...) activation
    held = tensor_bytes(cache)
    assert held == counts.cache_elements(model, size, 2, 21, D_STATE) * 4, (
        f"{model}: the cache holds {held} bytes of storage for "
        f"{counts.cache_elements(model, size, 2, 21, D_STATE) * 4} bytes of state"
    )


def test_minimum_bytes_and_intensity():
    size = SIZES[0]
    c = counts.counts("mamba", "prefill", size, 1, 64, 4, "fp32")
    io = 2 * 64 * size.d_model * 4
    assert c.bytes == c.weights_bytes + c.cache_bytes + io
    assert c.weights_bytes == counts.n_params("mamba", size, 4) * 4
    assert c.intensity == pytest.approx(c.flop / c.bytes)
    assert counts.counts("mamba", "prefill", size, 1, 64, 4, "bf16").bytes == c.bytes / 2
    with pytest.raises(ValueError, match="phase 'serve'"):
        counts.counts("mamba", "serve", size, 1, 64, 4, "fp32")
    with pytest.raises(ValueError, match="model 'rwkv'"):
        counts.n_params("rwkv", size, 4)


def test_hybrid_is_the_sum_of_its_layers():
    size = SIZES[1]  # pattern MAM over 3 layers
    hybrid = counts.prefill_terms("hybrid", size, 1, 32, D_STATE)
    one = Size(**{**vars(size), "n_layers": 1})
    m2 = counts.prefill_terms("mamba2", one, 1, 32, D_STATE)
    at = counts.prefill_terms("attention", one, 1, 32, D_STATE)
    assert hybrid["proj"] == 2 * m2["proj"] + at["proj"]
    assert hybrid["attention"] == at["attention"] and hybrid["scan"] == 2 * m2["scan"]


@pytest.mark.parametrize("model", FAMILIES)
def test_decode_step_flops_and_cache(model):
    """One step after a prefill of T tokens: the Linear layers see one token per sequence,
    attention's matmuls span the T cached keys and the new one, and the step returns the
    cache the counts expect."""
    size, batch, seq_len = SIZES[1], 2, 13
    m = build_model(model, size, D_STATE, "naive")
    with torch.no_grad():
        _, caches = m(torch.randn(batch, seq_len, size.d_model))
    x_t = torch.randn(batch, size.d_model)
    terms = counts.decode_terms(model, size, batch, seq_len, D_STATE)
    # step() bypasses the stack's __call__, so FlopCounterMode cannot name modules here:
    # hooks add up what each Linear executes (2 x rows x in x out).
    linear = []
    hooks = [
        mod.register_forward_hook(
            lambda mod, inp, out: linear.append(2 * inp[0].numel() * mod.out_features)
        )
        for mod in m.modules()
        if isinstance(mod, torch.nn.Linear)
    ]
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        _, new_caches = m.step(x_t, caches)
    for hook in hooks:
        hook.remove()
    executed = sum(linear)
    if model == "mamba":  # dt_proj's weight is applied by einsum, outside the module
        executed += size.n_layers * 2 * batch * counts.dt_rank(size) * size.d_inner
    assert executed == terms["proj"]
    if model == "attention":
        assert counter.get_total_flops() == terms["proj"] + terms["attention"]

    def elements(obj) -> int:
        if torch.is_tensor(obj):
            return obj.numel() * (2 if obj.is_complex() else 1)
        return sum(elements(o) for o in obj)

    step_cache = sum(x.cache for x in counts._layers(model, size, D_STATE, batch, seq_len, True))
    assert elements(new_caches) == step_cache


def test_train_and_decode_bytes():
    size = SIZES[0]
    fwd = counts.counts("attention", "prefill", size, 2, 64, 0, "fp32")
    train = counts.counts("attention", "train", size, 2, 64, 0, "fp32")
    assert train.flop == 3 * fwd.flop and train.tokens == fwd.tokens == 128
    assert train.bytes == 2 * fwd.weights_bytes + 2 * 64 * size.d_model * 4
    dec = counts.counts("attention", "decode", size, 2, 64, 0, "fp32")
    new_kv = size.n_layers * 2 * 2 * size.n_heads * size.head_dim * 4
    # the buffer a step reads holds the prefill's 64 tokens and the new token's slot
    assert dec.tokens == 2 and dec.cache_bytes == fwd.cache_bytes + new_kv
    assert dec.bytes == dec.weights_bytes + 2 * 2 * size.d_model * 4 + dec.cache_bytes + new_kv
    ssm = counts.counts("mamba2", "decode", size, 2, 64, 6, "fp32")
    assert ssm.bytes == ssm.weights_bytes + 2 * 2 * size.d_model * 4 + 2 * ssm.cache_bytes


class ExecutedFlops(TorchDispatchMode):
    """FLOPs of the matmuls (2 m k n per product) and triangular solves (C^2 per
    right-hand-side column of a C x C system) that ATen runs."""

    def __init__(self):
        super().__init__()
        self.flop = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__.rstrip("_")  # in place or not
        if name in ("mm", "bmm", "baddbmm", "addmm"):
            a, b = args[1:3] if name in ("baddbmm", "addmm") else args[:2]
            batch = a.shape[0] if a.dim() == 3 else 1
            self.flop += 2 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1]
        elif name.startswith("linalg_solve_triangular"):
            system, rhs = args[:2]
            self.flop += system.shape[-1] ** 2 * rhs.numel() // rhs.shape[-2]
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    "b, t, h, dk, dv, chunk",
    [(2, 70, 3, 12, 10, 16), (1, 64, 2, 8, 8, 16), (1, 40, 2, 8, 6, 64)],
    ids=["B2-T70-C16", "B1-T64-C16", "B1-T40-C64"],
)
def test_delta_rule_op_flop_is_what_the_torch_backend_executes(b, t, h, dk, dv, chunk):
    """The chunked delta rule's executed-FLOP count equals the matmul and triangular-solve
    FLOPs the torch backend runs: padded chunks included (T = 70 in chunks of 16), and a
    chunk longer than the sequence counted as one chunk of T tokens.  Gentle decays: a
    chunk that forgets within itself adds two exact products that the count leaves out."""
    gen = torch.Generator().manual_seed(0)
    q, k = (
        torch.nn.functional.normalize(torch.randn(b, t, h, dk, generator=gen), dim=-1) for _ in "qk"
    )
    v, state = torch.randn(b, t, h, dv, generator=gen), torch.randn(b, h, dk, dv, generator=gen)
    beta, g = (
        0.05 + 0.9 * torch.rand(b, t, h, generator=gen),
        -0.1 * torch.rand(b, t, h, generator=gen),
    )
    with ExecutedFlops() as executed, torch.no_grad():
        delta_rule_torch(q, k, v, beta, g=g, chunk_size=chunk, initial_state=state)
    assert executed.flop == counts.delta_rule_op_flop(b, t, h, dk, dv, chunk)
