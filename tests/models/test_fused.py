"""The ``fused`` backend (each family's fused wrappers, and :mod:`ssmbench.models.kernels`):
the kernels of mamba_ssm and fla through our wrappers against the float64 references, and
every unavailable path.

On a CPU the Triton kernels run under the Triton interpreter, in a spawned worker process
(``interpreter`` fixture) that turns it on and applies the stubs of tests/models/triton_cpu.py
before it imports a kernel: the interpreter must be on when the kernels' modules are
imported, and neither the setting nor the stubs may leak into the other tests.  The worker
also fills every ``torch.empty`` buffer with NaN, so a kernel that reads memory it never
wrote fails.  These tests skip where the ``fused`` extra is not installed (``make fused``).

The interpreter computes ``tl.dot`` with NumPy in float32 (no TF32), so the fp32 checks
use the fp32 tolerance.  On a GPU, Triton's float32 ``tl.dot`` defaults to TF32 (a 10-bit
mantissa, fp16's unit roundoff), so the GPU-only tests at the end judge float32 under the
fp16 tolerance; they also cover bf16, Mamba-3, Mamba-1's CUDA prefill, FlashAttention and
the decode steps in CUDA graphs, and skip without CUDA.
"""

from __future__ import annotations

import importlib.util
import inspect
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ssmbench import reference
from ssmbench.models import FAMILIES, attention, deltanet, kernels, mamba, mamba2, mamba3, s4d
from ssmbench.models.common import BackendUnavailable
from ssmbench.numerics import Comparison, compare, to_numpy
from ssmbench.verify import compare_phase
from tests.models import triton_cpu

CHECK_TIMEOUT_S = 300  # per check in the worker; each takes a few seconds on 2 cores
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="GPU-only check: no CUDA device here")


def _needs(*packages: str):
    """Skip unless the packages are installed.  Looked up, not imported: ``import
    mamba_ssm`` fails without its CUDA extension, and importing fla or mamba_ssm here would
    build their kernels in this process, outside the interpreter."""
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    return pytest.mark.skipif(
        bool(missing), reason=f"{', '.join(missing)} not installed (`make fused`)"
    )


needs_mamba_ssm = _needs("triton", "einops", "mamba_ssm")
needs_fla = _needs("triton", "einops", "fla")


def _start_worker() -> None:
    triton_cpu.install()
    triton_cpu.fill_new_buffers_with_nan()


@pytest.fixture(scope="module")
def interpreter():
    """One spawned worker for this module's kernel checks, the interpreter on."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context, initializer=_start_worker) as pool:
        yield pool


def _assert_all(checks: list[Comparison]) -> None:
    failed = [str(c) for c in checks if not c.ok]
    assert not failed, "\n".join(failed)


def _run(pool, check, *args) -> list[Comparison]:
    checks = pool.submit(check, *args).result(timeout=CHECK_TIMEOUT_S)
    _assert_all(checks)
    return checks


# --- the checks, run in the worker -------------------------------------------------------


def _randn(generator, *shape):
    return torch.randn(*shape, generator=generator)


def _rand(generator, *shape, low=0.0, high=1.0):
    return low + (high - low) * torch.rand(*shape, generator=generator)


def _unchanged(name: str, before: torch.Tensor, after: torch.Tensor) -> Comparison:
    """The input state is untouched (the kernels update their state in place)."""
    return compare(f"{name} leaves its input state unchanged", before, after, "fp64")


def _ssd_inputs(seed: int, b: int, t: int, h: int, p: int, g: int, n: int):
    gen = torch.Generator().manual_seed(seed)
    x, B, C = _randn(gen, b, t, h, p), _randn(gen, b, t, g, n), _randn(gen, b, t, g, n)
    dt = _rand(gen, b, t, h, low=0.01, high=1.0)
    A = -_rand(gen, h, low=0.5, high=2.0)
    D, h0 = _randn(gen, h), _randn(gen, b, h, p, n)
    return x, dt, A, B, C, D, h0


def _check_ssd(shape: tuple, chunk_size: int, bare: bool = False) -> list[Comparison]:
    """``bare``: no D and no initial state (the kernels' other branches)."""
    x, dt, A, B, C, D, h0 = _ssd_inputs(0, *shape)
    if bare:
        D = h0 = None
    ref_y, ref_state = reference.ssd(*map(to_numpy, (x, dt, A, B, C)), D=D, initial_state=h0)
    y, state = mamba2.ssd_fused(x, dt, A, B, C, D, chunk_size=chunk_size, initial_state=h0)
    return [
        compare("ssd_fused.y", ref_y, y, "fp32"),
        compare("ssd_fused.final_state", ref_state, state, "fp32"),
    ]


def _check_ssd_step(shape: tuple) -> list[Comparison]:
    x, dt, A, B, C, D, h0 = _ssd_inputs(1, *shape)
    ref_y, ref_state = reference.ssd(*map(to_numpy, (x, dt, A, B, C, D)), initial_state=h0)
    state, ys, h0_before = h0, [], h0.clone()
    for i in range(x.shape[1]):
        y_t, state = mamba2.ssd_step_fused(x[:, i], dt[:, i], A, B[:, i], C[:, i], D, state=state)
        ys.append(y_t)
    y0, _ = mamba2.ssd_step_fused(x[:, 0], dt[:, 0], A, B[:, 0], C[:, 0], D, state=None)
    ref_y0, _ = reference.ssd(*map(to_numpy, (x[:, :1], dt[:, :1], A, B[:, :1], C[:, :1], D)))
    return [
        compare("ssd_step_fused.y", ref_y, torch.stack(ys, 1), "fp32"),
        compare("ssd_step_fused.final_state", ref_state, state, "fp32"),
        compare("ssd_step_fused.y from no state", ref_y0[:, 0], y0, "fp32"),
        _unchanged("ssd_step_fused", h0_before, h0),
    ]


def _scan_inputs(seed: int, b: int, t: int, d: int, n: int):
    gen = torch.Generator().manual_seed(seed)
    u, z = _randn(gen, b, t, d), _randn(gen, b, t, d)
    B, C = _randn(gen, b, t, n), _randn(gen, b, t, n)
    delta = _randn(gen, b, t, d) - 1.0  # softplus makes it positive
    A = -_rand(gen, d, n, low=0.5, high=2.0)
    D, delta_bias, h0 = _randn(gen, d), 0.5 * _randn(gen, d), _randn(gen, b, d, n)
    return u, delta, A, B, C, D, z, delta_bias, h0


def _check_selective_scan_step(shape: tuple) -> list[Comparison]:
    u, delta, A, B, C, D, z, bias, h0 = _scan_inputs(2, *shape)
    ref_y, ref_state = reference.selective_scan(
        *map(to_numpy, (u, delta, A, B, C, D, z, bias)), delta_softplus=True, initial_state=h0
    )
    state, ys, h0_before = h0, [], h0.clone()
    for i in range(u.shape[1]):
        y_t, state = mamba.selective_scan_step_fused(
            u[:, i], delta[:, i], A, B[:, i], C[:, i], D, z[:, i], bias, True, state=state
        )
        ys.append(y_t)
    return [
        compare("selective_scan_step_fused.y", ref_y, torch.stack(ys, 1), "fp32"),
        compare("selective_scan_step_fused.final_state", ref_state, state, "fp32"),
        _unchanged("selective_scan_step_fused", h0_before, h0),
    ]


def _check_selective_scan_layouts(shape: tuple, with_state: bool) -> list[Comparison]:
    """selective_scan_fused's layout conversions and initial-state superposition, through
    mamba_ssm's own PyTorch reference ``selective_scan_ref`` in place of its CUDA kernel
    (same contract)."""
    triton_cpu.stub_selective_scan_cuda()
    kernel = kernels.mamba_ssm_module("ops.selective_scan_interface").selective_scan_ref
    u, delta, A, B, C, D, z, bias, h0 = _scan_inputs(3, *shape)
    h0 = h0 if with_state else None
    ref_y, ref_state = reference.selective_scan(
        *map(to_numpy, (u, delta, A, B, C, D, z, bias)), delta_softplus=True, initial_state=h0
    )
    y, state = mamba.selective_scan_via(kernel, u, delta, A, B, C, D, z, bias, True, h0)
    return [
        compare("selective_scan_via(selective_scan_ref).y", ref_y, y, "fp32"),
        compare("selective_scan_via(selective_scan_ref).final_state", ref_state, state, "fp32"),
    ]


def _delta_inputs(seed: int, b: int, t: int, h: int, dk: int, dv: int, gated: bool, dtype):
    gen = torch.Generator().manual_seed(seed)
    q = F.normalize(_randn(gen, b, t, h, dk), dim=-1)
    k = F.normalize(_randn(gen, b, t, h, dk), dim=-1)
    v, beta = _randn(gen, b, t, h, dv), _rand(gen, b, t, h, low=0.05, high=1.0)
    g = F.logsigmoid(_randn(gen, b, t, h) + 3.0) if gated else None  # log-decay < 0
    q, k, v, beta = (x.to(dtype) for x in (q, k, v, beta))
    return q, k, v, beta, g, _randn(gen, b, h, dk, dv)


def _check_delta_rule(
    shape: tuple, gated: bool, chunk_size: int, dtype: str, scale: float
) -> list[Comparison]:
    torch_dtype = {"fp32": torch.float32, "fp16": torch.float16}[dtype]
    q, k, v, beta, g, h0 = _delta_inputs(4, *shape, gated, torch_dtype)
    # the reference sees the rounded inputs: only the kernel's arithmetic is judged
    ref_o, ref_state = reference.delta_rule(
        to_numpy(q) * scale,
        *map(to_numpy, (k, v, beta)),
        None if g is None else to_numpy(g),
        initial_state=h0,
    )
    o, state = deltanet.delta_rule_fused(
        q, k, v, beta, g, chunk_size=chunk_size, initial_state=h0, scale=scale
    )
    name = f"delta_rule_fused[{deltanet.delta_rule_impl(q.dtype, gated)}]"
    return [
        compare(f"{name}.o", ref_o, o, dtype),
        compare(f"{name}.final_state", ref_state, state, dtype),
    ]


def _check_delta_rule_step(shape: tuple, gated: bool, scale: float) -> list[Comparison]:
    q, k, v, beta, g, h0 = _delta_inputs(5, *shape, gated, torch.float32)
    ref_o, ref_state = reference.delta_rule(
        to_numpy(q) * scale,
        *map(to_numpy, (k, v, beta)),
        None if g is None else to_numpy(g),
        initial_state=h0,
    )
    state, os_, h0_before = h0, [], h0.clone()
    for i in range(q.shape[1]):
        g_t = None if g is None else g[:, i]
        o_t, state = deltanet.delta_rule_step_fused(
            q[:, i], k[:, i], v[:, i], beta[:, i], g_t, state=state, scale=scale
        )
        os_.append(o_t)
    return [
        compare("delta_rule_step_fused.o", ref_o, torch.stack(os_, 1), "fp32"),
        compare("delta_rule_step_fused.final_state", ref_state, state, "fp32"),
        _unchanged("delta_rule_step_fused", h0_before, h0),
    ]


# --- kernels under the interpreter ---------------------------------------------------------

# (b, t, h, p, g, n): t = 37 and 70 are not multiples of 16, 24 or 64; p = 12 and 17 and
# n = 5 are not powers of two; the first shape has two heads per group
SSD_CASES = [
    pytest.param((2, 37, 4, 12, 2, 5), 16, False, id="b2-t37-h4-p12-g2-n5-c16"),
    pytest.param((2, 37, 4, 12, 2, 5), 24, False, id="b2-t37-h4-p12-g2-n5-c24"),
    pytest.param((1, 70, 3, 17, 1, 16), 64, False, id="b1-t70-h3-p17-g1-n16-c64"),
    pytest.param((1, 20, 2, 8, 1, 4), 16, True, id="b1-t20-h2-p8-g1-n4-c16-noD-nostate"),
]


@needs_mamba_ssm
@pytest.mark.parametrize("shape, chunk_size, bare", SSD_CASES)
def test_ssd_fused_matches_reference(interpreter, shape, chunk_size, bare):
    _run(interpreter, _check_ssd, shape, chunk_size, bare)


@needs_mamba_ssm
def test_ssd_step_fused_matches_reference(interpreter):
    _run(interpreter, _check_ssd_step, (2, 6, 4, 12, 2, 5))  # (b, t, h, p, g, n)


@needs_mamba_ssm
def test_selective_scan_step_fused_matches_reference(interpreter):
    _run(interpreter, _check_selective_scan_step, (2, 5, 7, 5))  # (b, t, d, n)


@needs_mamba_ssm
@pytest.mark.parametrize("with_state", [False, True], ids=["zero-state", "initial-state"])
def test_selective_scan_layouts_match_reference(interpreter, with_state):
    _run(interpreter, _check_selective_scan_layouts, (2, 19, 7, 5), with_state)


# (b, t, h, k, v): t = 45 is no multiple of 16 or 64; k = 20 and v = 24 are not powers of 2
DELTA_SHAPE = (2, 45, 3, 20, 24)


@needs_fla
@pytest.mark.parametrize(
    "gated, chunk_size, dtype, scale",
    [
        (True, 64, "fp32", 1.0),
        (True, 16, "fp32", 20**-0.5),  # the queries scaled as the block scales them
        (False, 64, "fp32", 1.0),  # the gated kernel with g = 0
        # chunk_delta_rule (half precision only); the interpreter has no bf16 arithmetic
        (False, 64, "fp16", 20**-0.5),
    ],
    ids=["gated-c64", "gated-c16-scaled", "plain-fp32", "plain-fp16-scaled"],
)
def test_delta_rule_fused_matches_reference(interpreter, gated, chunk_size, dtype, scale):
    _run(interpreter, _check_delta_rule, DELTA_SHAPE, gated, chunk_size, dtype, scale)


@needs_fla
@pytest.mark.parametrize("gated, scale", [(True, 20**-0.5), (False, 1.0)], ids=["gated", "plain"])
def test_delta_rule_step_fused_matches_reference(interpreter, gated, scale):
    _run(interpreter, _check_delta_rule_step, (2, 5, 3, 20, 24), gated, scale)


# --- the contract, and the unavailable paths on a plain CPU ---------------------------------

TORCH_FORMS = [
    (attention.attention_fused, attention.attention_torch),
    (attention.attention_step_fused, attention.attention_step_torch),
    (mamba.selective_scan_fused, mamba.selective_scan_torch),
    (mamba.selective_scan_step_fused, mamba.selective_scan_step),
    (mamba2.ssd_fused, mamba2.ssd_chunked),
    (mamba2.ssd_step_fused, mamba2.ssd_step),
    (mamba3.mamba3_fused, mamba3.mamba3_torch),
    (mamba3.mamba3_step_fused, mamba3.mamba3_step),
    (deltanet.delta_rule_fused, deltanet.delta_rule_torch),
    (deltanet.delta_rule_step_fused, deltanet.delta_rule_step),
]


@pytest.mark.parametrize("wrapper, torch_form", TORCH_FORMS, ids=lambda f: f.__name__)
def test_wrappers_take_the_torch_backends_arguments(wrapper, torch_form):
    def parameters(fn):
        return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]

    assert parameters(wrapper) == parameters(torch_form)


def _cpu_calls():
    """Each wrapper called on small CPU tensors: (name, call)."""
    b, t, h, p, g, n, d = 1, 3, 2, 4, 1, 4, 3
    x, dt = torch.randn(b, t, h, p), torch.rand(b, t, h)
    A, B, C = -torch.rand(h), torch.randn(b, t, g, n), torch.randn(b, t, g, n)
    theta, lam = torch.rand(b, t, h, n // 2), torch.rand(b, t, h)
    A3 = -torch.rand(b, t, h)  # Mamba-3's A: per token and head
    u, A1, B1 = torch.randn(b, t, d), -torch.rand(d, n), torch.randn(b, t, n)
    q = torch.randn(b, t, h, p)
    return {
        "attention_fused": lambda: attention.attention_fused(q, q, q),
        "selective_scan_fused": lambda: mamba.selective_scan_fused(u, u, A1, B1, B1),
        "selective_scan_step_fused": lambda: mamba.selective_scan_step_fused(
            u[:, 0], u[:, 0], A1, B1[:, 0], B1[:, 0]
        ),
        "ssd_fused": lambda: mamba2.ssd_fused(x, dt, A, B, C),
        "ssd_step_fused": lambda: mamba2.ssd_step_fused(x[:, 0], dt[:, 0], A, B[:, 0], C[:, 0]),
        "mamba3_fused": lambda: mamba3.mamba3_fused(x, dt, A3, B, C, theta, lam),
        "mamba3_step_fused": lambda: mamba3.mamba3_step_fused(
            x[:, 0], dt[:, 0], A3[:, 0], B[:, 0], C[:, 0], theta[:, 0], lam[:, 0]
        ),
        "delta_rule_fused": lambda: deltanet.delta_rule_fused(q, q, q, dt),
        "delta_rule_step_fused": lambda: deltanet.delta_rule_step_fused(
            q[:, 0], q[:, 0], q[:, 0], dt[:, 0]
        ),
    }


TRITON_WRAPPERS = [
    "selective_scan_step_fused",
    "ssd_fused",
    "ssd_step_fused",
    "delta_rule_fused",
    "delta_rule_step_fused",
]
MAMBA3_NEEDS_CUDA = (
    "mamba_ssm's Mamba-3 kernels need a CUDA device (PTX inline assembly and TMA descriptors: "
    "the Triton interpreter cannot run them)"
)
CUDA_ONLY = {
    "attention_fused": "FlashAttention-2 needs a CUDA device",
    "mamba3_fused": MAMBA3_NEEDS_CUDA,
    "mamba3_step_fused": MAMBA3_NEEDS_CUDA,
}


@pytest.fixture
def plain_cpu(monkeypatch):
    """No interpreter, every package present (so only the device decides)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(kernels, "installed", lambda package: True)


@pytest.mark.parametrize("name", TRITON_WRAPPERS)
def test_triton_wrappers_need_cuda_or_the_interpreter(plain_cpu, name):
    with pytest.raises(BackendUnavailable) as info:
        _cpu_calls()[name]()
    assert str(info.value) == kernels.NEEDS_CUDA
    assert str(info.value) == (
        "fused kernels need a CUDA device (set TRITON_INTERPRET=1 to run Triton kernels on "
        "CPU tensors)"
    )


@pytest.mark.parametrize("interpret", ["0", "1"])
@pytest.mark.parametrize("name", sorted(CUDA_ONLY))
def test_cuda_only_wrappers_need_cuda_even_when_interpreting(monkeypatch, name, interpret):
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    with pytest.raises(BackendUnavailable) as info:
        _cpu_calls()[name]()
    assert str(info.value) == CUDA_ONLY[name]


def test_selective_scan_fused_needs_its_cuda_extension(monkeypatch):
    monkeypatch.setattr(kernels, "installed", lambda package: package != "selective_scan_cuda")
    with pytest.raises(BackendUnavailable, match="^selective_scan_cuda not built"):
        _cpu_calls()["selective_scan_fused"]()
    monkeypatch.setattr(kernels, "installed", lambda package: True)
    with pytest.raises(BackendUnavailable) as info:
        _cpu_calls()["selective_scan_fused"]()
    assert str(info.value) == "mamba_ssm's selective_scan_fn (a CUDA extension) needs a CUDA device"


@pytest.mark.parametrize(
    "name, package, distribution",
    [
        ("ssd_fused", "mamba_ssm", "mamba-ssm"),
        ("ssd_step_fused", "mamba_ssm", "mamba-ssm"),
        ("selective_scan_step_fused", "mamba_ssm", "mamba-ssm"),
        ("selective_scan_fused", "mamba_ssm", "mamba-ssm"),
        ("delta_rule_fused", "fla", "fla-core"),
        ("delta_rule_step_fused", "fla", "fla-core"),
    ],
)
def test_a_missing_package_says_how_to_install_it(monkeypatch, name, package, distribution):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # past the device check, nothing runs
    monkeypatch.setattr(kernels, "installed", lambda p: p != package)
    with pytest.raises(BackendUnavailable) as info:
        _cpu_calls()[name]()
    assert str(info.value) == f"{package} is not installed (`make fused` installs {distribution})"


@pytest.mark.parametrize("name", TRITON_WRAPPERS)
def test_float64_is_unavailable(monkeypatch, name):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    torch.set_default_dtype(torch.float64)
    try:
        calls = _cpu_calls()
    finally:
        torch.set_default_dtype(torch.float32)
    with pytest.raises(BackendUnavailable) as info:
        calls[name]()
    assert str(info.value) == kernels.NO_FLOAT64


def test_mamba3_takes_bf16_and_power_of_two_sizes():
    b, t, h, g = 1, 3, 2, 1

    def call(p, n, r, dtype, device):
        x = torch.empty(b, t, h, p, dtype=dtype, device=device)
        B = torch.empty(b, t, g, n, dtype=dtype, device=device)
        theta = torch.empty(b, t, h, r, dtype=dtype, device=device)
        mamba3._mamba3_check(x, B, theta)

    with pytest.raises(BackendUnavailable, match="need a CUDA device"):
        call(16, 16, 4, torch.bfloat16, "meta")  # not CUDA: the device reason comes first
    if not CUDA:
        return
    with pytest.raises(BackendUnavailable, match="bf16 only"):
        call(16, 16, 4, torch.float32, "cuda")
    with pytest.raises(BackendUnavailable, match="power-of-two"):
        call(12, 16, 4, torch.bfloat16, "cuda")
    with pytest.raises(BackendUnavailable, match="even number of angles"):
        call(16, 16, 3, torch.bfloat16, "cuda")
    call(16, 16, 4, torch.bfloat16, "cuda")


VERIFY_FAMILIES = [f for f in FAMILIES]


@pytest.mark.parametrize("family", VERIFY_FAMILIES)
@pytest.mark.parametrize("backend", ["fused", "fused-graph"])
def test_verify_shapes_of_fused_backends_pass_the_wrappers_shape_checks(family, backend):
    """No fused backend may be unavailable merely because its verify shape was illegal."""
    import importlib

    from ssmbench.verify import block_setting

    shapes = importlib.import_module(f"ssmbench.verify.{family}").op_shapes(backend)
    assert shapes and all(kernels.shape_reason(shape) == "" for shape in shapes), shapes
    size, d_state = block_setting(backend)
    assert kernels.block_shape_reason(family, size.head_dim, d_state) == ""


def test_the_awkward_verify_shapes_are_the_ones_the_fused_checks_refuse():
    """The checks above can fail: naive/torch keep shapes mamba_ssm's Mamba-3 refuses."""
    from ssmbench.verify import BLOCK_D_STATE, BLOCK_SIZE, mamba3

    assert all(kernels.shape_reason(s) for s in mamba3.op_shapes("torch"))
    assert kernels.block_shape_reason("mamba3", BLOCK_SIZE.head_dim, BLOCK_D_STATE)
    assert kernels.shape_reason({"op": "attention", "b": 1, "t": 3, "h": 1, "d": 512})


class _FakeCudaTensor:
    """What _mamba3_check reads of a tensor: is_cuda, dtype, shape."""

    is_cuda = True
    dtype = torch.bfloat16

    def __init__(self, *shape):
        self.shape = shape


def test_mamba3_verify_inputs_pass_the_kernel_check_and_bound_theta():
    from ssmbench.verify import FUSED_BLOCK_D_STATE, FUSED_BLOCK_SIZE, Inputs
    from ssmbench.verify import mamba3 as verify_mamba3

    for b, t, h, g, p, n, r in verify_mamba3.MAMBA3_FUSED_SHAPES:
        x, B, theta = (_FakeCudaTensor(b, t, h, p), _FakeCudaTensor(b, t, g, n))[:2] + (
            _FakeCudaTensor(b, t, h, r),
        )
        mamba3._mamba3_check(x, B, theta)  # raises BackendUnavailable if illegal
        drawn = mamba3.random_inputs(
            Inputs(0, torch.device("cpu"), torch.float32), *(b, t, h, g, p, n, r)
        )
        assert drawn["theta"].abs().max() < np.pi  # atanh(theta / pi) stays finite
    r = mamba3.Mamba3Mixer(
        FUSED_BLOCK_SIZE.d_model, d_state=FUSED_BLOCK_D_STATE, head_dim=FUSED_BLOCK_SIZE.head_dim
    ).n_angles
    p, n = FUSED_BLOCK_SIZE.head_dim, FUSED_BLOCK_D_STATE
    mamba3._mamba3_check(
        _FakeCudaTensor(2, 3, 5, p), _FakeCudaTensor(2, 3, 5, n), _FakeCudaTensor(2, 3, 5, r)
    )
    with pytest.raises(BackendUnavailable, match="even number of angles"):
        mamba3._mamba3_check(
            _FakeCudaTensor(1, 3, 2, 16), _FakeCudaTensor(1, 3, 1, 16), _FakeCudaTensor(1, 3, 2, 3)
        )


def test_bf16_mamba3_tolerance_is_its_own_row():
    from ssmbench.numerics import TOLERANCES
    from ssmbench.verify import tolerance_row

    assert tolerance_row("bf16", "fused", "cuda", "mamba3") == "bf16-mamba3"
    assert tolerance_row("bf16", "fused-graph", "cuda", "mamba3") == "bf16-mamba3"
    assert tolerance_row("bf16", "torch", "cuda", "mamba3") == "bf16"
    assert tolerance_row("bf16", "fused", "cuda", "mamba2") == "bf16"
    assert TOLERANCES["bf16"] < TOLERANCES["bf16-mamba3"]


@pytest.mark.parametrize(
    "phase, installed, device, interpret, expected",
    [
        ("decode", "no-extension", "cuda", "0", ""),
        ("decode", "no-extension", "cpu", "1", ""),
        ("decode", "no-extension", "cpu", "0", kernels.NEEDS_CUDA),
        ("prefill", "no-extension", "cuda", "0", mamba.SELECTIVE_SCAN_CUDA_MISSING),
        ("train", "no-extension", "cuda", "0", mamba.SELECTIVE_SCAN_CUDA_MISSING),
        (None, "no-extension", "cuda", "0", mamba.SELECTIVE_SCAN_CUDA_MISSING),
        ("prefill", "all", "cuda", "0", ""),
        ("prefill", "all", "cpu", "1", mamba.SELECTIVE_SCAN_NEEDS_CUDA),
    ],
)
def test_mamba1_availability_is_per_phase(
    monkeypatch, phase, installed, device, interpret, expected
):
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    absent = "selective_scan_cuda" if installed == "no-extension" else None
    monkeypatch.setattr(kernels, "installed", lambda package: package != absent)
    assert kernels.unavailable_reason("mamba", device, "bf16", phase=phase) == expected


def test_unavailable_reason_rejects_unknown_phases():
    with pytest.raises(ValueError, match="unknown phase 'sample'"):
        kernels.unavailable_reason("mamba2", "cuda", phase="sample")


def _verify_mamba_fused_on_cpu() -> dict:
    """run_verify of Mamba-1 fused in the worker: no CUDA, so its prefill kernel is
    unavailable, and its Triton decode step runs under the interpreter."""
    from ssmbench.verify.run import run_verify

    return run_verify("mamba", "fused", "cpu", ["fp32"])


@needs_mamba_ssm
def test_mamba1_decode_verifies_where_its_prefill_kernel_cannot_run(interpreter):
    record = interpreter.submit(_verify_mamba_fused_on_cpu).result(timeout=CHECK_TIMEOUT_S)
    phases = record["phases"]
    assert phases["decode"] == {"status": "passed", "reason": ""}
    for phase in ("prefill", "train"):
        assert phases[phase]["status"] == "unavailable"
        assert "selective_scan" in phases[phase]["reason"]
    assert record["status"] == "unavailable" and record["reason"].startswith(
        "prefill, train unavailable: "
    )
    decode = [c for c in record["checks"] if "decode" in c["phases"]]
    names = {c["name"].split("[")[0] for c in decode}
    assert {"selective_scan_step.y", "block.step_vs_torch_forward.y"} <= names
    assert all(c["ok"] for c in decode) and all(c["phases"] == ["decode"] for c in decode)


def test_fused_availability_covers_every_family():
    assert all(callable(kernels.family_module(f).fused_unavailable) for f in FAMILIES)


@pytest.mark.parametrize(
    "family, device, interpret, expected",
    [
        ("s4d", "cuda", "0", s4d.NO_FUSED_KERNEL),
        ("s4d", "cpu", "1", s4d.NO_FUSED_KERNEL),
        ("attention", "cpu", "1", attention.FLASH_NEEDS_CUDA),
        ("hybrid", "cpu", "1", attention.FLASH_NEEDS_CUDA),
        ("mamba3", "cpu", "1", mamba3.MAMBA3_NEEDS_CUDA),
        ("mamba", "cpu", "1", mamba.SELECTIVE_SCAN_NEEDS_CUDA),
        ("mamba2", "cpu", "0", kernels.NEEDS_CUDA),
        ("deltanet", "cpu", "0", kernels.NEEDS_CUDA),
        ("mamba2", "cpu", "1", ""),
        ("deltanet", "cpu", "1", ""),
        ("attention", "cuda", "0", ""),
        ("hybrid", "cuda:0", "0", ""),
        ("mamba", "cuda", "0", ""),
        ("mamba2", "cuda", "0", ""),
        ("mamba3", "cuda", "0", ""),
        ("deltanet", "cuda", "0", ""),
    ],
)
def test_unavailable_reason_by_device(plain_cpu, monkeypatch, family, device, interpret, expected):
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    assert kernels.unavailable_reason(family, device) == expected
    assert kernels.family_module(family).fused_unavailable(device) == expected


@pytest.mark.parametrize(
    "family, missing, expected",
    [
        ("mamba", "selective_scan_cuda", mamba.SELECTIVE_SCAN_CUDA_MISSING),
        ("mamba", "mamba_ssm", "mamba_ssm is not installed (`make fused` installs mamba-ssm)"),
        ("mamba2", "mamba_ssm", "mamba_ssm is not installed (`make fused` installs mamba-ssm)"),
        ("hybrid", "triton", "triton is not installed (`make fused` installs triton)"),
        ("mamba3", "mamba_ssm", "mamba_ssm is not installed (`make fused` installs mamba-ssm)"),
        ("deltanet", "fla", "fla is not installed (`make fused` installs fla-core)"),
        ("attention", "flash_attn", ""),  # SDPA's flash kernel stands in
    ],
)
def test_unavailable_reason_by_package(monkeypatch, family, missing, expected):
    monkeypatch.setattr(kernels, "installed", lambda package: package != missing)
    assert kernels.unavailable_reason(family, "cuda") == expected


@pytest.mark.parametrize(
    "family, dtype, expected",
    [
        ("attention", "fp32", "FlashAttention-2 takes fp16 and bf16 only, not fp32"),
        ("hybrid", "fp32", "FlashAttention-2 takes fp16 and bf16 only, not fp32"),
        ("attention", "bf16", ""),
        ("mamba3", "fp16", f"{mamba3.MAMBA3_DTYPES}, not fp16"),
        ("mamba3", "bf16", ""),
        ("mamba2", "fp64", kernels.NO_FLOAT64),
        ("mamba2", "fp32", ""),
        ("deltanet", "fp32", ""),
        ("mamba", "fp16", ""),
    ],
)
def test_unavailable_reason_by_dtype(monkeypatch, family, dtype, expected):
    monkeypatch.setattr(kernels, "installed", lambda package: True)
    assert kernels.unavailable_reason(family, "cuda", dtype) == expected


def test_unavailable_reason_rejects_unknown_families():
    with pytest.raises(ValueError, match="unknown family 'mamba4'"):
        kernels.unavailable_reason("mamba4", "cuda")


def test_implementation_names(monkeypatch):
    monkeypatch.setattr(kernels, "installed", lambda package: package != "flash_attn")
    assert attention.attention_impl() == "sdpa-flash"
    assert deltanet.delta_rule_impl(torch.float32, gated=False) == "fla.chunk_gated_delta_rule"
    assert deltanet.delta_rule_impl(torch.bfloat16, gated=False) == "fla.chunk_delta_rule"
    assert deltanet.delta_rule_impl(torch.bfloat16, gated=True) == "fla.chunk_gated_delta_rule"


def test_fused_attention_decode_hands_flash_attn_its_kvcache_contract(monkeypatch):
    """The fused decode step through a stand-in of ``flash_attn.flash_attn_with_kvcache``
    (the smallest surface: one function, checked against FlashAttention's documented
    contract, then the same in-place write and attention in PyTorch): the wrapper passes
    (b, 1, h, d) tokens, the buffers as they are and the position as int32 per sequence,
    and the step equals the torch step's."""
    from types import SimpleNamespace

    from ssmbench import ops
    from ssmbench.models.attention import attention_step_torch, kv_buffer

    calls = []

    def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None):
        b, _, h, d = q.shape
        assert q.shape == k.shape == v.shape == (b, 1, h, d)
        assert k_cache.shape[0] == b and k_cache.shape[2:] == (h, d)
        assert cache_seqlens.dtype == torch.int32 and cache_seqlens.shape == (b,)
        calls.append(int(cache_seqlens[0]))
        cache = SimpleNamespace(k=k_cache, v=v_cache, capacity=k_cache.shape[1],
                                position=cache_seqlens[:1].long())  # fmt: skip
        return attention_step_torch(q[:, 0], k[:, 0], v[:, 0], cache)[:, None]

    monkeypatch.setattr(attention, "_flash_check", lambda *tensors: None)  # no CUDA here
    monkeypatch.setattr(kernels, "installed", lambda package: True)
    monkeypatch.setattr(
        kernels, "kernel_module", lambda module, package: SimpleNamespace(
            flash_attn_with_kvcache=flash_attn_with_kvcache
        )
    )  # fmt: skip
    g = torch.Generator().manual_seed(3)
    b, T, h, d = 2, 9, 3, 16
    q, k, v = (torch.randn(b, T + 1, h, d, generator=g) for _ in range(3))
    caches = {
        backend: kv_buffer((k[:, :T], v[:, :T]), T + 1, like=k[:, 0])
        for backend in ("torch", "fused")
    }
    out = {
        backend: ops.attention_step(q[:, T], k[:, T], v[:, T], cache, backend=backend)
        for backend, cache in caches.items()
    }
    assert calls == [T]
    np.testing.assert_allclose(out["fused"][0], out["torch"][0], rtol=1e-6, atol=1e-6)
    assert torch.equal(caches["fused"].k, caches["torch"].k)  # written in place alike
    assert out["fused"][1].length == T + 1 and int(out["fused"][1].position) == T + 1


# --- GPU only ------------------------------------------------------------------------------

GPU_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _gpu_tolerance(dtype: str) -> str:
    """fp32 on a GPU: Triton's float32 tl.dot runs TF32 (fp16's unit roundoff)."""
    return "fp16" if dtype == "fp32" else dtype


def _on_gpu(dtype: str, *tensors):
    return [None if x is None else x.to("cuda", GPU_DTYPES[dtype]) for x in tensors]


def _rounded(*tensors):
    """float64 NumPy copies of the inputs as the kernel sees them."""
    return [None if x is None else to_numpy(x) for x in tensors]


@needs_cuda
@needs_mamba_ssm
@pytest.mark.parametrize("dtype", sorted(GPU_DTYPES))
def test_gpu_ssd(dtype):
    x, dt, A, B, C, D, h0 = _ssd_inputs(6, 2, 300, 8, 64, 2, 64)
    x, B, C = _on_gpu(dtype, x, B, C)
    dt, A, D, h0 = (v.cuda() for v in (dt, A, D, h0))
    ref_y, ref_state = reference.ssd(*_rounded(x, dt, A, B, C, D), initial_state=to_numpy(h0))
    y, state = mamba2.ssd_fused(x, dt, A, B, C, D, chunk_size=64, initial_state=h0)
    _assert_all(
        [
            compare("ssd_fused.y", ref_y, y, _gpu_tolerance(dtype)),
            compare("ssd_fused.final_state", ref_state, state, _gpu_tolerance(dtype)),
        ]
    )


@needs_cuda
@needs_fla
@pytest.mark.parametrize("dtype", sorted(GPU_DTYPES))
@pytest.mark.parametrize("gated", [True, False], ids=["gated", "plain"])
def test_gpu_delta_rule(dtype, gated):
    q, k, v, beta, g, h0 = _delta_inputs(7, 2, 300, 4, 64, 64, gated, torch.float32)
    q, k, v, beta = _on_gpu(dtype, q, k, v, beta)
    g, h0 = (None if x is None else x.cuda() for x in (g, h0))
    ref_o, ref_state = reference.delta_rule(*_rounded(q, k, v, beta, g), initial_state=to_numpy(h0))
    o, state = deltanet.delta_rule_fused(q, k, v, beta, g, initial_state=h0)
    _assert_all(
        [
            compare("delta_rule_fused.o", ref_o, o, _gpu_tolerance(dtype)),
            compare("delta_rule_fused.final_state", ref_state, state, _gpu_tolerance(dtype)),
        ]
    )


@needs_cuda
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_gpu_attention(dtype):
    gen = torch.Generator().manual_seed(8)
    q, k, v = (_randn(gen, 2, 200, 4, 64) for _ in range(3))
    torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    q, k, v = (x.to("cuda", torch_dtype) for x in (q, k, v))
    ref = reference.attention(*_rounded(q, k, v), causal=True)
    y = attention.attention_fused(q, k, v)
    _assert_all([compare(f"attention_fused[{attention.attention_impl()}]", ref, y, dtype)])


@pytest.mark.skipif(
    importlib.util.find_spec("selective_scan_cuda") is None,
    reason="selective_scan_cuda not built (`make fused` on a machine with nvcc)",
)
@needs_mamba_ssm
@needs_cuda
@pytest.mark.parametrize("with_state", [False, True], ids=["zero-state", "initial-state"])
def test_gpu_selective_scan(with_state):
    u, delta, A, B, C, D, z, bias, h0 = (v.cuda() for v in _scan_inputs(9, 2, 300, 64, 16))
    h0 = h0 if with_state else None
    ref_y, ref_state = reference.selective_scan(
        *_rounded(u, delta, A, B, C, D, z, bias),
        delta_softplus=True,
        initial_state=None if h0 is None else to_numpy(h0),
    )
    y, state = mamba.selective_scan_fused(u, delta, A, B, C, D, z, bias, True, h0)
    _assert_all(
        [
            compare("selective_scan_fused.y", ref_y, y, "fp32"),
            compare("selective_scan_fused.final_state", ref_state, state, "fp32"),
        ]
    )


def _mamba3_inputs(seed: int, b: int, t: int, h: int, p: int, g: int, n: int, r: int):
    x, dt, _, B, C, D, h0 = _ssd_inputs(seed, b, t, h, p, g, n)
    gen = torch.Generator().manual_seed(seed + 1)
    theta = _rand(gen, b, t, h, r, low=-2.0, high=2.0)  # |theta| < pi (see mamba3_fused)
    lam = _rand(gen, b, t, h)
    A = -_rand(gen, b, t, h, low=0.5, high=2.0)  # per token and head
    return x, dt, A, B, C, theta, lam, D, h0


@needs_cuda
@needs_mamba_ssm
def test_gpu_mamba3():
    """bf16 only (the kernel casts x, B, C, theta and lam to bf16); the phase is compared
    modulo 2 pi, since mamba_ssm reduces it."""
    x, dt, A, B, C, theta, lam, D, h0 = _mamba3_inputs(10, 2, 200, 4, 64, 1, 64, 16)
    x, B, C = _on_gpu("bf16", x, B, C)
    theta, lam = (v.to(torch.bfloat16).float().cuda() for v in (theta, lam))
    dt, A, D, h0 = (v.cuda() for v in (dt, A, D, h0))
    ref_y, ref_state = reference.mamba3(
        *_rounded(x, dt, A, B, C, theta, lam, D), initial_state=to_numpy(h0)
    )
    y, state = mamba3.mamba3_fused(x, dt, A, B, C, theta, lam, D, initial_state=h0)
    row = "bf16-mamba3"  # ssmbench.numerics.TOLERANCES says where it comes from
    checks = [
        compare("mamba3_fused.y", ref_y, y, row),
        compare("mamba3_fused.ssm", ref_state.ssm, state.ssm, row),
        compare("mamba3_fused.B_prev", ref_state.B_prev, state.B_prev, row),
        compare("mamba3_fused.x_prev", ref_state.x_prev, state.x_prev, row),
        compare_phase("mamba3_fused.phase", ref_state.phase, state.phase, row),
    ]
    y_t, _ = mamba3.mamba3_step_fused(
        x[:, 0], dt[:, 0], A[:, 0], B[:, 0], C[:, 0], theta[:, 0], lam[:, 0], D, state=h0
    )
    checks.append(compare("mamba3_step_fused.y", ref_y[:, 0], y_t, row))
    _assert_all(checks)


@needs_cuda
@needs_mamba_ssm
@needs_fla
def test_gpu_decode_steps_replay_in_cuda_graphs():
    """Each Triton decode step, captured once in a CUDA graph and replayed, gives what it
    gives eagerly (the kernels are built by a warm-up call before the capture)."""
    x, dt, A, B, C, D, h0 = (v.cuda() for v in _ssd_inputs(11, 2, 1, 4, 64, 1, 64))
    q, k, v, beta, g, s0 = (
        None if t is None else t.cuda()
        for t in _delta_inputs(12, 2, 1, 4, 64, 64, True, torch.float32)
    )
    steps = {
        "ssd_step_fused": lambda: mamba2.ssd_step_fused(
            x[:, 0], dt[:, 0], A, B[:, 0], C[:, 0], D, state=h0
        ),
        "delta_rule_step_fused": lambda: deltanet.delta_rule_step_fused(
            q[:, 0], k[:, 0], v[:, 0], beta[:, 0], g[:, 0], state=s0
        ),
    }
    checks = []
    for name, step in steps.items():
        eager = step()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()  # warm-up: build the kernels outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = step()
        graph.replay()
        torch.cuda.synchronize()
        for part, a, b in zip(("y", "state"), eager, captured, strict=True):
            checks.append(compare(f"{name}.{part} (graph)", a, b, "fp32"))
    _assert_all(checks)


@needs_cuda
@pytest.mark.parametrize("backend", ["torch", "fused"])
def test_gpu_attention_decode_writes_in_place_and_replays_in_a_cuda_graph(backend):
    """Attention's decode step on a preallocated KV cache (bf16, T = 100 cached tokens, a
    buffer of 101): eager and CUDA-graph replay agree with attention over the whole
    sequence, and the step writes the new token's slot only."""
    from ssmbench import ops
    from ssmbench.models.attention import kv_buffer

    g = torch.Generator().manual_seed(21)
    b, T, h, d = 2, 100, 4, 64
    q, k, v = (torch.randn(b, T + 1, h, d, generator=g).cuda().bfloat16() for _ in range(3))
    reference_y = ops.attention(q, k, v, backend="torch")[:, T]  # the last query, causal
    cache = kv_buffer((k[:, :T], v[:, :T]), T + 1, like=k[:, 0])

    def step():
        return ops.attention_step(q[:, T], k[:, T], v[:, T], cache, backend=backend)

    eager_y, _ = step()
    assert torch.equal(cache.k[:, T], k[:, T]) and torch.equal(cache.k[:, :T], k[:, :T])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_y, _ = step()
    graph.replay()
    torch.cuda.synchronize()
    _assert_all(
        [
            compare(f"attention_step[{backend}].y", reference_y, eager_y, "bf16"),
            compare(f"attention_step[{backend}].y (graph)", eager_y, graph_y, "bf16"),
        ]
    )


# verify on the GPU: the families whose fused shapes or phases are chosen for the kernels'
# constraints (mamba_ssm's Mamba-3, Mamba-1's Triton step without the CUDA extension,
# FlashAttention); Mamba-2, DeltaNet and the hybrid autotune dozens of configs per shape,
# which the verify jobs of a run pay, and the GPU selection (`pytest -k gpu`) leaves out
GPU_VERIFY_FAMILIES = ["attention", "mamba", "mamba3"]


@needs_cuda
@needs_mamba_ssm
@pytest.mark.parametrize("family", GPU_VERIFY_FAMILIES)
def test_gpu_verify_fused_in_bf16(family):
    from ssmbench.verify.run import run_verify

    record = run_verify(family, "fused", "cuda", ["bf16"])
    phases = record["phases"]
    failed = {p: v["reason"] for p, v in phases.items() if v["status"] == "failed"}
    assert not failed, failed
    expected_unavailable = set()
    if family == "mamba" and importlib.util.find_spec("selective_scan_cuda") is None:
        expected_unavailable = {"prefill", "train"}  # the decode step is Triton: it runs
    unavailable = {p for p, v in phases.items() if v["status"] == "unavailable"}
    assert unavailable == expected_unavailable, {p: phases[p]["reason"] for p in unavailable}
    assert phases["decode"]["status"] == "passed"


@needs_cuda
@needs_mamba_ssm
@pytest.mark.parametrize(
    "family, backend", [("mamba2", "torch-graph"), ("mamba", "fused-graph")], ids=str
)
def test_gpu_graph_decode_cell_with_its_base_backends_verify_record(family, backend):
    """A graph cell takes its base backend's verify record, replays equal to the eager
    step, reads the clocks of the warm GPU, and counts its graph pool in peak_bytes."""
    from ssmbench.cell import CellSpec, run_cell
    from ssmbench.matrix import Cell, Size, Timing
    from ssmbench.models import GRAPH_BACKENDS
    from ssmbench.verify.run import run_verify

    verify = run_verify(family, GRAPH_BACKENDS[backend], "cuda", ["bf16"])
    size = Size(d_model=256, n_layers=2, n_heads=4, head_dim=64, expand=2, d_conv=4, chunk=64)
    timing = Timing(2, 10, 20, min_time_s=0.0, max_time_s=2.0, timeout_s=60.0)
    cell = Cell(family, backend, "decode", 2, 256, 16, "bf16")
    r = run_cell(CellSpec("t", cell, "cuda", size, timing), verify=verify)
    assert r.status == "ok", r.reason
    assert r.verify["backend"] == GRAPH_BACKENDS[backend]
    assert r.graph_pool_bytes is not None and r.graph_pool_bytes > 0
    assert r.peak_bytes == r.weights_bytes + r.cache_bytes + r.activations_bytes
    assert r.activations_bytes >= r.graph_pool_bytes
    if r.energy_method != "none":
        assert r.energy_window_s >= 1.0 and r.energy_j is not None
