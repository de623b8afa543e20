"""The core operators: reference == naive == torch, step == scan, gradients, errors.

fp32 unless a test says otherwise; every comparison goes through
:func:`ssmbench.numerics.assert_close`.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from ssmbench import counts, ops, reference
from ssmbench.config import Size
from ssmbench.models import BACKENDS, FAMILIES, build_model
from ssmbench.models.attention import CONCAT_BACKENDS, KVBuffer, kv_buffer, valid_cache
from ssmbench.models.common import LOG_DECAY_FLOOR
from ssmbench.models.mamba import TIME_BLOCK, blocked_scan, linear_scan, selective_scan_naive
from ssmbench.numerics import assert_close, to_numpy
from ssmbench.verify import verify_backend

# (b, t, h, d): T = 1, lengths that are not powers of two, odd head dims
ATTENTION_SHAPES = [(1, 1, 1, 8), (2, 63, 3, 60), (2, 37, 4, 17)]
# (b, t, d, n): T = 1, lengths that no chunk size below divides, non-power-of-two widths
SCAN_SHAPES = [(1, 1, 4, 3), (2, 63, 24, 5), (2, 70, 13, 16)]
CHUNK_SIZES = [1, 7, 16, 64]
SMALL_SIZE = Size(d_model=40, n_layers=2, n_heads=3, head_dim=16, expand=2, d_conv=4, chunk=16)


def attention_id(shape: tuple[int, ...]) -> str:
    return "B{}-T{}-H{}-D{}".format(*shape)


def scan_id(shape: tuple[int, ...]) -> str:
    return "B{}-T{}-D{}-N{}".format(*shape)


def attention_inputs(shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g, dtype=dtype) for _ in range(3))


def scan_inputs(shape, seed=0, dtype=torch.float32, extras=True, decay_scale=1.0):
    """(args, kwargs) of a selective scan; ``extras`` adds D, z, delta_bias and a random
    initial state (all with softplus on delta)."""
    b, t, d, n = shape
    g = torch.Generator().manual_seed(seed)

    def randn(*size, scale=1.0):
        return scale * torch.randn(*size, generator=g, dtype=dtype)

    A = -(0.5 + 1.5 * torch.rand(d, n, generator=g, dtype=dtype)) * decay_scale
    args = (randn(b, t, d), randn(b, t, d, scale=0.5), A, randn(b, t, n), randn(b, t, n))
    if not extras:
        delta = args[1].abs()  # no softplus: the step must be positive by itself
        return (args[0], delta, *args[2:]), {}
    kwargs = {
        "D": randn(d),
        "z": randn(b, t, d),
        "delta_bias": randn(d, scale=0.5),
        "delta_softplus": True,
        "initial_state": randn(b, d, n),
    }
    return args, kwargs


def reference_scan(args, kwargs):
    numpy_kwargs = {k: to_numpy(v) if torch.is_tensor(v) else v for k, v in kwargs.items()}
    return reference.selective_scan(*(to_numpy(x) for x in args), **numpy_kwargs)


# attention


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", ATTENTION_SHAPES, ids=attention_id)
def test_attention_matches_reference(shape, backend, causal):
    q, k, v = attention_inputs(shape)
    ref = reference.attention(to_numpy(q), to_numpy(k), to_numpy(v), causal=causal)
    assert_close("y", ref, ops.attention(q, k, v, causal=causal, backend=backend), "fp32")


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("shape", ATTENTION_SHAPES, ids=attention_id)
def test_attention_naive_equals_sdpa(shape, causal):
    q, k, v = attention_inputs(shape, seed=1)
    sdpa = ops.attention(q, k, v, causal=causal, backend="torch")
    assert_close("y", sdpa, ops.attention(q, k, v, causal=causal, backend="naive"), "fp32")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", ATTENTION_SHAPES, ids=attention_id)
def test_attention_step_matches_scan(shape, backend):
    q, k, v = attention_inputs(shape, seed=2)
    cache, ys = None, []
    for t in range(shape[1]):
        y_t, cache = ops.attention_step(q[:, t], k[:, t], v[:, t], cache, backend=backend)
        ys.append(y_t)
    assert_close("y", ops.attention(q, k, v, backend=backend), torch.stack(ys, dim=1), "fp32")
    if backend in CONCAT_BACKENDS:
        assert isinstance(cache, tuple) and not isinstance(cache, KVBuffer)
    else:  # grown from nothing, in place: a buffer of at least T tokens, T of them valid
        assert isinstance(cache, KVBuffer) and cache.length == shape[1] <= cache.capacity
        assert int(cache.position) == cache.length
        cache = cache.valid()
    assert_close("k_cache", k, cache[0], "fp32")
    assert_close("v_cache", v, cache[1], "fp32")


def _float_storages(value) -> dict[int, torch.Tensor]:
    """data_ptr -> tensor, for every floating-point tensor reachable from ``value``."""
    found = {}
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            found[value.untyped_storage().data_ptr()] = value
    elif isinstance(value, (tuple, list)):
        for item in value:
            found.update(_float_storages(item))
    return found


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_decode_step_writes_what_counts_says(backend):
    """Storage a decode step writes, measured: elements changed in the cache it was given
    plus the bytes of new storage in the cache it returns, against ssmbench.counts (one
    token's key and value per attention layer).  The in-place buffer writes exactly that;
    the naive loop's concatenation writes the whole cache again, T + 1 times as much."""
    b, T, h, d = 2, 64, 3, 8
    q, k, v = attention_inputs((b, T + 1, h, d), seed=5)
    prefix = (k[:, :T].contiguous(), v[:, :T].contiguous())
    cache = prefix if backend in CONCAT_BACKENDS else kv_buffer(prefix, T + 1, like=k[:, 0])
    before = {ptr: t.clone() for ptr, t in _float_storages(cache).items()}
    y, new_cache = ops.attention_step(q[:, T], k[:, T], v[:, T], cache, backend=backend)
    changed = sum(
        int((t != before[ptr]).sum()) * t.element_size()
        for ptr, t in _float_storages(cache).items()
    )
    fresh = sum(
        t.untyped_storage().nbytes()
        for ptr, t in _float_storages(new_cache).items()
        if ptr not in before
    )
    size = Size(d_model=h * d, n_layers=1, n_heads=h, head_dim=d, expand=2, d_conv=4, chunk=16)
    analytic = counts.layer("attention", size, 0, 0, b, T, decode=True).step_writes * 4
    assert analytic == 2 * b * h * d * 4
    if backend in CONCAT_BACKENDS:
        assert changed == 0 and fresh == (T + 1) * analytic
    else:
        assert fresh == 0 and changed == analytic  # one token, in place
        assert all(p in before for p in _float_storages(new_cache))  # the same buffers
    reference_y = ops.attention(q, k, v, backend="naive")[:, T]  # the last query, causal
    assert_close("y", reference_y, y, "fp32")


# selective scan


@pytest.mark.parametrize("extras", [True, False], ids=["D-z-bias-h0", "plain"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SCAN_SHAPES, ids=scan_id)
def test_selective_scan_matches_reference(shape, backend, extras):
    args, kwargs = scan_inputs(shape, extras=extras)
    ref_y, ref_h = reference_scan(args, kwargs)
    y, h = ops.selective_scan(*args, **kwargs, backend=backend)
    assert_close("y", ref_y, y, "fp32")
    assert_close("final_state", ref_h, h, "fp32")


@pytest.mark.parametrize("chunk_size", CHUNK_SIZES, ids=lambda c: f"C{c}")
@pytest.mark.parametrize("shape", SCAN_SHAPES, ids=scan_id)
def test_selective_scan_torch_chunk_sizes(shape, chunk_size):
    args, kwargs = scan_inputs(shape, seed=3)
    ref_y, ref_h = reference_scan(args, kwargs)
    y, h = ops.selective_scan(*args, **kwargs, backend="torch", chunk_size=chunk_size)
    assert_close("y", ref_y, y, "fp32")
    assert_close("final_state", ref_h, h, "fp32")


def test_selective_scan_strong_decay_stays_finite():
    """Decays far below float32's range underflow to zero; nothing overflows."""
    args, kwargs = scan_inputs((1, 300, 8, 4), seed=4, decay_scale=200.0)
    ref_y, ref_h = reference_scan(args, kwargs)
    for backend in BACKENDS:
        y, h = ops.selective_scan(*args, **kwargs, backend=backend, chunk_size=16)
        assert_close("y", ref_y, y, "fp32")
        assert_close("final_state", ref_h, h, "fp32")


def test_linear_scan_odd_lengths():
    """The bare scan against a plain loop, for every length up to 40 (every odd padding)."""
    g = torch.Generator().manual_seed(5)
    a = torch.rand(2, 40, 3, generator=g, dtype=torch.float64)
    b = torch.randn(2, 40, 3, generator=g, dtype=torch.float64)
    for T in range(1, 41):
        h, expected = torch.zeros(2, 3, dtype=torch.float64), []
        for t in range(T):
            h = a[:, t] * h + b[:, t]
            expected.append(h)
        out = linear_scan(a[:, :T], b[:, :T], chunk_size=4)
        assert_close(f"h[T={T}]", torch.stack(expected, dim=1), out, "fp64")


@pytest.mark.parametrize("block_len", [1, 5, 16, 64], ids=lambda n: f"L{n}")
def test_blocked_scan_block_lengths(block_len):
    """The log-space block scan at every block length (1: token by token; 5: a padded
    last block; 64 >= t: one block) == the naive loop, y and final state."""
    (u, delta, A, B, C), _ = scan_inputs((2, 37, 6, 5), seed=12, extras=False)
    state = torch.randn(2, 6, 5, generator=torch.Generator().manual_seed(13))
    ref_y, ref_h = selective_scan_naive(u, delta, A, B, C, initial_state=state)
    y, h = blocked_scan(delta * u, delta, A, B, C, state, block_len=block_len)
    assert_close("y", ref_y, y, "fp32")
    assert_close("final_state", ref_h, h, "fp32")


def test_selective_scan_steep_and_gentle_blocks_together():
    """Blocks whose decay is too steep for the split factors of blocked_scan (R > -2
    LOG_DECAY_FLOOR: scanned exactly) beside blocks that are not, in one call: a burst of
    large steps in one batch row of an otherwise gentle sequence.  Values match the
    reference and gradients match autograd through the naive loop (fp64)."""
    (u, delta, A, B, C), kwargs = scan_inputs((2, 150, 6, 5), seed=14, dtype=torch.float64)
    delta = delta.clone()
    delta[1, 40:50] += 30.0  # softplus(30) = 30 per token: blocks 2 and 3 are steep
    args = (u, delta, A, B, C)
    steps = F.softplus(delta + kwargs["delta_bias"])  # (b t d)
    totals = F.pad(steps, (0, 0, 0, -150 % TIME_BLOCK)).unflatten(1, (-1, TIME_BLOCK)).sum(2)
    steep = (totals[..., None] * -A).amax(dim=(0, 2, 3)) > -2 * LOG_DECAY_FLOOR  # (blocks)
    assert steep.any() and not steep.all()
    ref_y, ref_h = reference_scan(args, kwargs)
    leaves = [*args, *(v for v in kwargs.values() if torch.is_tensor(v))]
    grads = {}
    for backend in BACKENDS:
        for leaf in leaves:
            leaf.requires_grad_(True)
            leaf.grad = None
        y, h = ops.selective_scan(*args, **kwargs, backend=backend)
        assert_close(f"y[{backend}]", ref_y, y.detach(), "fp64")
        assert_close(f"final_state[{backend}]", ref_h, h.detach(), "fp64")
        (y.square().sum() + h.sum()).backward()
        grads[backend] = [leaf.grad.clone() for leaf in leaves]
    names = ["u", "delta", "A", "B", "C", *(k for k, v in kwargs.items() if torch.is_tensor(v))]
    for name, ref, out in zip(names, grads["naive"], grads["torch"], strict=True):
        # float64 round-off on gradients up to ~1e3: held to 1e-10 of the largest one
        err = (out - ref).abs().max().item()
        assert err <= 1e-10 * ref.abs().max().item(), f"grad_{name}: max_abs_err={err:.2e}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SCAN_SHAPES, ids=scan_id)
def test_selective_scan_step_matches_scan(shape, backend):
    (u, delta, A, B, C), kwargs = scan_inputs(shape, seed=6)
    state = kwargs.pop("initial_state")
    y_scan, h_scan = ops.selective_scan(u, delta, A, B, C, **kwargs, initial_state=state)
    z = kwargs.pop("z")
    ys = []
    for t in range(shape[1]):
        y_t, state = ops.selective_scan_step(
            u[:, t],
            delta[:, t],
            A,
            B[:, t],
            C[:, t],
            z=z[:, t],
            **kwargs,
            state=state,
            backend=backend,
        )
        ys.append(y_t)
    assert_close("y", y_scan, torch.stack(ys, dim=1), "fp32")
    assert_close("final_state", h_scan, state, "fp32")


@pytest.mark.parametrize("shape", [(2, 37, 6, 5), (1, 1, 4, 3)], ids=scan_id)
def test_selective_scan_torch_gradients_match_naive(shape):
    """fp64: autograd through the parallel scan == autograd through the loop, for random
    upstream gradients on y and the final state."""
    args, kwargs = scan_inputs(shape, seed=7, dtype=torch.float64)
    leaves = [*args, *(v for v in kwargs.values() if torch.is_tensor(v))]
    g = torch.Generator().manual_seed(8)
    grad_y = torch.randn(shape[:3], generator=g, dtype=torch.float64)
    grad_h = torch.randn(shape[0], shape[2], shape[3], generator=g, dtype=torch.float64)

    grads = {}
    for backend in BACKENDS:
        for leaf in leaves:
            leaf.requires_grad_(True)
            leaf.grad = None
        y, h = ops.selective_scan(*args, **kwargs, backend=backend, chunk_size=8)
        torch.autograd.backward([y, h], [grad_y, grad_h])
        grads[backend] = [leaf.grad.clone() for leaf in leaves]
    names = ["u", "delta", "A", "B", "C", *(k for k, v in kwargs.items() if torch.is_tensor(v))]
    for name, ref, out in zip(names, grads["naive"], grads["torch"], strict=True):
        assert_close(f"grad_{name}", ref, out, "fp64")


# blocks


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


# errors


def test_unknown_backend_raises():
    q, k, v = attention_inputs((1, 3, 1, 4))
    args, kwargs = scan_inputs((1, 3, 4, 2))
    with pytest.raises(ValueError, match="'cuda-kernels'.*naive"):
        ops.attention(q, k, v, backend="cuda-kernels")
    with pytest.raises(ValueError, match="'cuda-kernels'.*naive"):
        ops.attention_step(q[:, 0], k[:, 0], v[:, 0], backend="cuda-kernels")
    with pytest.raises(ValueError, match="'cuda-kernels'.*naive"):
        ops.selective_scan(*args, **kwargs, backend="cuda-kernels")
    u, delta, A, B, C = args
    with pytest.raises(ValueError, match="'cuda-kernels'.*naive"):
        ops.selective_scan_step(u[:, 0], delta[:, 0], A, B[:, 0], C[:, 0], backend="cuda-kernels")
    with pytest.raises(ValueError, match="'cuda-kernels'"):
        build_model("mamba", SMALL_SIZE, d_state=5, backend="cuda-kernels")


def test_unknown_model_or_dtype_raises():
    with pytest.raises(ValueError, match="'rwkv'.*attention"):
        build_model("rwkv", SMALL_SIZE, d_state=5, backend="torch")
    with pytest.raises(ValueError, match="'rwkv'"):
        verify_backend("rwkv", "torch")
    with pytest.raises(ValueError, match="'fp8'"):
        verify_backend("mamba", "torch", dtype="fp8")


# verify


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model", FAMILIES)
def test_verify_backend_passes(model, backend):
    result = verify_backend(model, backend, seed=11)
    failed = [check["name"] for check in result["checks"] if not check["ok"]]
    assert result["passed"], failed
    ops_run = {shape["op"] for shape in result["shapes"]}
    assert "block" in ops_run and ops_run - {"block"}, ops_run  # the operator was checked too
    json.dumps(result)  # JSON-serialisable


@pytest.mark.parametrize(
    "dtype, backend, device, row",
    [
        ("fp32", "fused", "cuda", "tf32"),  # tl.dot takes fp32 operands in TF32 on CUDA
        ("fp32", "fused-graph", "cuda:1", "tf32"),
        ("fp32", "fused", "cpu", "fp32"),  # the Triton interpreter computes in fp32
        ("fp32", "torch", "cuda", "fp32"),  # PyTorch's fp32 matmuls stay IEEE by default
        ("bf16", "fused", "cuda", "bf16"),
    ],
)
def test_fp32_fused_kernels_on_cuda_are_judged_by_the_tf32_row(dtype, backend, device, row):
    from ssmbench.numerics import TOLERANCES
    from ssmbench.verify import tolerance_row

    assert tolerance_row(dtype, backend, device) == row
    assert TOLERANCES["fp32"] < TOLERANCES["tf32"] < TOLERANCES["bf16"]


# sha256 (first 16 hex digits) of every tensor the operator checks draw from seed 0, in
# order, recorded before the draws moved from ssmbench.verify into each family's
# random_inputs: the tolerances were set on these numbers
VERIFY_DRAWS = {
    ("fp32", "attention"): (6, "e3921cbd247ee90e"),
    ("fp32", "mamba"): (18, "ed43be0cd289a256"),
    ("fp32", "s4d"): (27, "4687aa7b69113ef7"),
    ("fp32", "mamba2"): (14, "8360a6d253754069"),
    ("fp32", "mamba3"): (24, "0e67bc39d3fc1619"),
    ("fp32", "deltanet"): (12, "1bab2a4b3cad63c9"),
    ("fp32", "hybrid"): (20, "8ccce57620b7390a"),
    ("bf16", "attention"): (6, "b6b8d1a4be5a40af"),
    ("bf16", "mamba"): (18, "67add1f17d105ff8"),
    ("bf16", "s4d"): (27, "155eaf500c7853d3"),
    ("bf16", "mamba2"): (14, "3b5e32060b95e352"),
    ("bf16", "mamba3"): (24, "0ed2b2c3117e63a0"),
    ("bf16", "deltanet"): (12, "40e12399d2b1f157"),
    ("bf16", "hybrid"): (20, "32f51acce8ab3c27"),
}


@pytest.mark.parametrize("dtype, model", sorted(VERIFY_DRAWS), ids="-".join)
def test_verify_draws_the_same_inputs_for_a_seed(dtype, model, monkeypatch):
    """The operator checks of every family draw, from seed 0, the very numbers they drew
    when their tolerances were set (the draws live in the families' random_inputs)."""
    import hashlib
    import importlib

    from ssmbench.models import DTYPES
    from ssmbench.models.common import RandomDraws
    from ssmbench.verify import Inputs

    drawn = []
    for method in ("randn", "rand"):
        original = getattr(RandomDraws, method)

        def record(self, *shape, _original=original, **kwargs):
            drawn.append(_original(self, *shape, **kwargs))
            return drawn[-1]

        monkeypatch.setattr(RandomDraws, method, record)
    family = importlib.import_module(f"ssmbench.verify.{model}")
    family.op_checks("torch", Inputs(0, torch.device("cpu"), DTYPES[dtype]), "fp32")
    digest = hashlib.sha256()
    for x in drawn:
        digest.update(str((tuple(x.shape), x.dtype)).encode())
        digest.update(x.float().numpy().tobytes())
    assert (len(drawn), digest.hexdigest()[:16]) == VERIFY_DRAWS[dtype, model]
