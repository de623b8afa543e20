"""Mamba-2 SSD: reference == naive == torch (chunked) == step, y and final state; gradients
of the chunked form against autograd through the loop; half precision; errors; the mixer.

fp32 unless a test says otherwise; every comparison goes through
:func:`ssmbench.numerics.assert_close`.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ssmbench import ops, reference
from ssmbench.matrix import Size
from ssmbench.models import BACKENDS, DTYPES
from ssmbench.models.common import LOG_DECAY_FLOOR
from ssmbench.models.mamba2 import SSD_BACKENDS, Mamba2Mixer, build_mixer
from ssmbench.numerics import assert_close, to_numpy

# (b, t, h, p, g, n): T = 1; lengths that no chunk size below divides (63, 70) and one that
# several do (128); odd head dims and state sizes; one and several heads per group
SSD_SHAPES = [
    (1, 1, 2, 4, 1, 3),
    (2, 63, 3, 17, 1, 5),
    (2, 70, 4, 9, 2, 16),
    (1, 128, 6, 8, 3, 4),
]
CHUNK_SIZES = [1, 7, 16, 64]
SMALL_SIZE = Size(d_model=40, n_layers=2, n_heads=3, head_dim=16, expand=2, d_conv=4, chunk=16)


def ssd_id(shape: tuple[int, ...]) -> str:
    return "B{}-T{}-H{}-P{}-G{}-N{}".format(*shape)


def ssd_inputs(shape, seed=0, dtype=torch.float32, extras=True, decay_scale=1.0):
    """(args, kwargs) of an SSD call: args = (x, dt, A, B, C) with dt = softplus(noise) > 0
    and A in [-2, -0.5] times ``decay_scale``; ``extras`` adds D and a random initial state."""
    b, t, h, p, g, n = shape
    gen = torch.Generator().manual_seed(seed)

    def randn(*size, scale=1.0):
        return scale * torch.randn(*size, generator=gen, dtype=dtype)

    x = randn(b, t, h, p)
    dt = F.softplus(randn(b, t, h) - 1.0)
    A = -(0.5 + 1.5 * torch.rand(h, generator=gen, dtype=dtype)) * decay_scale
    B, C = randn(b, t, g, n), randn(b, t, g, n)
    if not extras:
        return (x, dt, A, B, C), {}
    return (x, dt, A, B, C), {"D": randn(h), "initial_state": randn(b, h, p, n)}


def reference_ssd(args, kwargs):
    numpy_kwargs = {k: to_numpy(v) for k, v in kwargs.items()}
    return reference.ssd(*(to_numpy(v) for v in args), **numpy_kwargs)


def step_through(args, kwargs, backend="torch"):
    """ssd_step token by token from the initial state -> (y (b, t, h, p), final state)."""
    x, dt, A, B, C = args
    state, ys = kwargs.get("initial_state"), []
    for i in range(x.shape[1]):
        y_t, state = ops.ssd_step(
            x[:, i], dt[:, i], A, B[:, i], C[:, i], kwargs.get("D"), state=state, backend=backend
        )
        ys.append(y_t)
    return torch.stack(ys, dim=1), state


# the operator


@pytest.mark.parametrize("extras", [True, False], ids=["D-h0", "plain"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SSD_SHAPES, ids=ssd_id)
def test_ssd_matches_reference(shape, backend, extras):
    args, kwargs = ssd_inputs(shape, extras=extras)
    ref_y, ref_h = reference_ssd(args, kwargs)
    y, h = ops.ssd(*args, **kwargs, chunk_size=16, backend=backend)
    assert y.dtype == torch.float32 and y.shape == shape[:4]
    assert_close("y", ref_y, y, "fp32")
    assert_close("final_state", ref_h, h, "fp32")


@pytest.mark.parametrize("chunk_size", CHUNK_SIZES, ids=lambda c: f"C{c}")
@pytest.mark.parametrize("shape", SSD_SHAPES, ids=ssd_id)
def test_ssd_chunked_chunk_sizes(shape, chunk_size):
    args, kwargs = ssd_inputs(shape, seed=1)
    ref_y, ref_h = reference_ssd(args, kwargs)
    y, h = ops.ssd(*args, **kwargs, chunk_size=chunk_size, backend="torch")
    assert_close("y", ref_y, y, "fp32")
    assert_close("final_state", ref_h, h, "fp32")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SSD_SHAPES, ids=ssd_id)
def test_ssd_step_matches_reference_and_scan(shape, backend):
    args, kwargs = ssd_inputs(shape, seed=2)
    ref_y, ref_h = reference_ssd(args, kwargs)
    y_step, h_step = step_through(args, kwargs, backend)
    assert_close("y", ref_y, y_step, "fp32")
    assert_close("final_state", ref_h, h_step, "fp32")
    y, h = ops.ssd(*args, **kwargs, chunk_size=7, backend=backend)
    assert_close("y_scan_vs_step", y_step, y, "fp32")
    assert_close("final_state_scan_vs_step", h_step, h, "fp32")


@pytest.mark.parametrize("shape", SSD_SHAPES, ids=ssd_id)
def test_ssd_naive_equals_chunked(shape):
    args, kwargs = ssd_inputs(shape, seed=3)
    y_naive, h_naive = ops.ssd(*args, **kwargs, backend="naive")
    y_chunked, h_chunked = ops.ssd(*args, **kwargs, chunk_size=16, backend="torch")
    assert_close("y", y_naive, y_chunked, "fp32")
    assert_close("final_state", h_naive, h_chunked, "fp32")


def test_ssd_zero_initial_state_equals_none():
    args, kwargs = ssd_inputs((2, 21, 4, 5, 2, 3), seed=4)
    zeros = torch.zeros_like(kwargs["initial_state"])
    for backend in BACKENDS:
        y_none, h_none = ops.ssd(*args, D=kwargs["D"], chunk_size=8, backend=backend)
        y_zero, h_zero = ops.ssd(
            *args, D=kwargs["D"], chunk_size=8, initial_state=zeros, backend=backend
        )
        assert_close("y", y_zero, y_none, "fp32")
        assert_close("final_state", h_zero, h_none, "fp32")


@pytest.mark.parametrize(
    "decay_scale, chunk_size", [(200.0, 16), (0.01, 8)], ids=["strong-decay", "weak-decay"]
)
def test_ssd_many_chunks(decay_scale, chunk_size):
    """Strong decay (dt A far below float32's exp range: decays underflow, nothing
    overflows) and weak decay (the state carries across all of 75 chunks)."""
    args, kwargs = ssd_inputs((1, 600, 2, 4, 1, 3), seed=5, decay_scale=decay_scale)
    ref_y, ref_h = reference_ssd(args, kwargs)
    for backend in BACKENDS:
        y, h = ops.ssd(*args, **kwargs, chunk_size=chunk_size, backend=backend)
        assert_close(f"y[{backend}]", ref_y, y, "fp32")
        assert_close(f"final_state[{backend}]", ref_h, h, "fp32")


@pytest.mark.parametrize("g", [1, 4], ids=["shared-BC", "BC-per-head"])
def test_ssd_steep_and_gentle_chunks_together(g):
    """Heads whose decay over a chunk is too steep for the split factors of chunked_scan
    (R > -2 LOG_DECAY_FLOOR: recomputed exactly) beside heads that are not, and a burst of
    large dt inside an otherwise gentle sequence: every (chunk, head) takes the path its
    own decay calls for, and all of them match the reference, values and gradients."""
    args, kwargs = ssd_inputs((2, 150, 4, 6, g, 5), seed=11, dtype=torch.float64)
    x, dt, A, B, C = args
    A = A * torch.tensor([1.0, 40.0, 1.0, 300.0], dtype=A.dtype)  # heads 1 and 3 steep
    dt = dt.clone()
    dt[1, 40:50] += 25.0  # one batch row: a burst steep for every head
    args = (x, dt, A, B, C)
    steep = (-(dt * A).unflatten(1, (-1, 30)).sum(2)) > -2 * LOG_DECAY_FLOOR  # (b c h) at Q = 30
    assert steep.any() and not steep.all()
    ref_y, ref_h = reference_ssd(args, kwargs)
    leaves = [*args, kwargs["D"], kwargs["initial_state"]]
    grads = {}
    for backend in BACKENDS:
        for leaf in leaves:
            leaf.requires_grad_(True)
            leaf.grad = None
        y, h = ops.ssd(*args, **kwargs, chunk_size=30, backend=backend)
        assert_close(f"y[{backend}]", ref_y, y.detach(), "fp64")
        assert_close(f"final_state[{backend}]", ref_h, h.detach(), "fp64")
        (y.square().sum() + h.sum()).backward()
        grads[backend] = [leaf.grad.clone() for leaf in leaves]
    names = "x dt A B C D h0".split()
    for name, ref, out in zip(names, grads["naive"], grads["torch"], strict=True):
        # float64 round-off on gradients up to ~1e3: held to 1e-10 of the largest one
        err = (out - ref).abs().max().item()
        assert err <= 1e-10 * ref.abs().max().item(), f"grad_{name}: max_abs_err={err:.2e}"


@pytest.mark.parametrize("dtype", ["fp64", "fp16", "bf16"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_ssd_other_dtypes(backend, dtype):
    """fp64 stays fp64; half inputs give y in the input dtype and the state in float32;
    all within the dtype's tolerance of the float64 reference on the same (rounded) inputs."""
    torch_dtype = DTYPES[dtype]
    state_dtype = torch.float64 if dtype == "fp64" else torch.float32
    args, kwargs = ssd_inputs((2, 45, 4, 8, 2, 5), seed=6)
    args = tuple(v.to(torch_dtype) for v in args)
    kwargs = {k: v.to(torch_dtype) for k, v in kwargs.items()}
    ref_y, ref_h = reference_ssd(args, kwargs)
    y, h = ops.ssd(*args, **kwargs, chunk_size=16, backend=backend)
    assert y.dtype == torch_dtype and h.dtype == state_dtype
    assert_close("y", ref_y, y, dtype)
    assert_close("final_state", ref_h, h, dtype)
    y_step, h_step = step_through(args, kwargs, backend)
    assert y_step.dtype == torch_dtype and h_step.dtype == state_dtype
    assert_close("y_step", ref_y, y_step, dtype)
    assert_close("final_state_step", ref_h, h_step, dtype)


@pytest.mark.parametrize("chunk_size", [4, 64], ids=lambda c: f"C{c}")
@pytest.mark.parametrize(
    "shape", [(2, 37, 4, 5, 2, 3), (2, 13, 1, 3, 1, 2), (1, 1, 2, 3, 1, 2)], ids=ssd_id
)
def test_ssd_torch_gradients_match_naive(shape, chunk_size):
    """fp64: autograd through the chunked form == autograd through the loop, for every
    input, with random upstream gradients on y and on the final state."""
    args, kwargs = ssd_inputs(shape, seed=7, dtype=torch.float64)
    leaves = [*args, kwargs["D"], kwargs["initial_state"]]
    names = ["x", "dt", "A", "B", "C", "D", "initial_state"]
    gen = torch.Generator().manual_seed(8)
    b, t, h, p, g, n = shape
    grad_y = torch.randn(b, t, h, p, generator=gen, dtype=torch.float64)
    grad_h = torch.randn(b, h, p, n, generator=gen, dtype=torch.float64)

    grads = {}
    for backend in BACKENDS:
        for leaf in leaves:
            leaf.requires_grad_(True)
            leaf.grad = None
        y, state = ops.ssd(*args, **kwargs, chunk_size=chunk_size, backend=backend)
        torch.autograd.backward([y, state], [grad_y, grad_h])
        grads[backend] = [leaf.grad.clone() for leaf in leaves]
    for name, ref, out in zip(names, grads["naive"], grads["torch"], strict=True):
        assert_close(f"grad_{name}", ref, out, "fp64")


# the mixer


def test_mixer_layers_and_cache():
    """The block of Mamba2Simple: one in_proj to (z, x, B, C, dt), a depthwise conv over
    (x, B, C), per-head dt_bias, A_log, D, a gated RMSNorm over d_inner, out_proj."""
    size = Size(d_model=32, n_layers=1, n_heads=2, head_dim=16, expand=2, d_conv=4, chunk=8)
    mixer = build_mixer(size, d_state=6, layer=0)
    d_inner, nheads, conv_dim = 64, 4, 64 + 2 * 6
    assert (mixer.d_inner, mixer.nheads, mixer.conv_dim) == (d_inner, nheads, conv_dim)
    assert mixer.in_proj.weight.shape == (2 * d_inner + 2 * 6 + nheads, 32)
    assert mixer.in_proj.bias is None and mixer.out_proj.bias is None
    assert mixer.conv1d.weight.shape == (conv_dim, 1, 4) and mixer.conv1d.bias is not None
    assert mixer.out_proj.weight.shape == (32, d_inner)
    for name in ("dt_bias", "A_log", "D"):
        assert getattr(mixer, name).shape == (nheads,)
    assert mixer.norm.weight.shape == (d_inner,)
    assert bool((-torch.exp(mixer.A_log) < 0).all())

    u = torch.randn(3, 10, 32, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        y, (conv_state, ssm_state) = mixer(u, "torch")
    assert y.shape == u.shape
    assert conv_state.shape == (3, conv_dim, 4) and ssm_state.shape == (3, nheads, 16, 6)


def test_mixer_heads_of_small_size():
    """expand * d_model = 80 in heads of 16: five heads, one group shared by all."""
    mixer = build_mixer(SMALL_SIZE, d_state=5, layer=1)
    assert (mixer.nheads, mixer.d_inner, mixer.ngroups) == (5, 80, 1)


def test_mixer_naive_equals_torch():
    mixer = build_mixer(SMALL_SIZE, d_state=5, layer=0)
    u = torch.randn(2, 29, SMALL_SIZE.d_model, generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        y_naive, cache_naive = mixer(u, "naive")
        y_torch, cache_torch = mixer(u, "torch")
    assert_close("y", y_naive, y_torch, "fp32")
    for part, (a, b) in enumerate(zip(cache_naive, cache_torch, strict=True)):
        assert_close(f"cache.{part}", a, b, "fp32")


# errors


def test_unknown_backend_raises():
    (x, dt, A, B, C), _ = ssd_inputs((1, 3, 2, 4, 1, 3))
    with pytest.raises(ValueError, match="'cuda-kernels'.*naive"):
        ops.ssd(x, dt, A, B, C, backend="cuda-kernels")
    mixer = build_mixer(SMALL_SIZE, d_state=5, layer=0)
    with pytest.raises(ValueError, match="'cuda-kernels'.*naive"):
        mixer(torch.zeros(1, 3, SMALL_SIZE.d_model), "cuda-kernels")
    with pytest.raises(ValueError, match="'cuda-kernels'.*naive"):
        mixer.step(torch.zeros(1, SMALL_SIZE.d_model), None, "cuda-kernels")
    assert set(SSD_BACKENDS) == {*BACKENDS, "torch-mixed", "fused"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_shapes_raise(backend):
    (x, dt, A, B, C), _ = ssd_inputs((1, 5, 3, 4, 1, 2))
    with pytest.raises(ValueError, match="not divisible"):
        ops.ssd(x, dt, A, B.expand(1, 5, 2, 2), C.expand(1, 5, 2, 2), backend=backend)
    with pytest.raises(ValueError, match="dt"):
        ops.ssd(x, dt[:, :4], A, B, C, backend=backend)
    with pytest.raises(ValueError, match="A"):
        ops.ssd(x, dt, A[:2], B, C, backend=backend)
    with pytest.raises(ValueError, match="B .* and C"):
        ops.ssd(x, dt, A, B, C[:, :4], backend=backend)
    with pytest.raises(ValueError, match="not divisible"):
        ops.ssd_step(x[:, 0], dt[:, 0], A, B[:, 0].expand(1, 2, 2), C[:, 0].expand(1, 2, 2))
    with pytest.raises(ValueError, match="chunk_size"):
        ops.ssd(x, dt, A, B, C, chunk_size=0, backend="torch")
    with pytest.raises(ValueError, match="head_dim=12 does not divide"):
        Mamba2Mixer(d_model=40, expand=2, head_dim=12)
    with pytest.raises(ValueError, match="ngroups"):
        Mamba2Mixer(d_model=40, expand=2, head_dim=16, ngroups=2)
