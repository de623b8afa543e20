"""S4D: reference == naive == torch (FFT) == step by step == the sequence split in chunks,
y and final state; gradients of the FFT form against autograd through the loop; the
safe (e^z - 1) / z; the layer's init and cache; errors.  fp32 unless a test says otherwise.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ssmbench import ops
from ssmbench.matrix import Size
from ssmbench.models import BACKENDS, build_model
from ssmbench.models.s4d import S4DMixer, build_mixer, expm1_over_z
from ssmbench.numerics import assert_close, to_numpy
from ssmbench.reference.s4d import expm1_over_z as expm1_over_z_reference
from ssmbench.reference.s4d import s4d as s4d_reference

# (b, t, h, n): T = 1; T + 1 = 64 a square (the FFT form's blocks of powers fit exactly)
# and T + 1 = 71, 38 not (a partial last block); odd h and n
S4D_SHAPES = [(1, 1, 4, 3), (2, 37, 6, 5), (2, 63, 24, 5), (1, 70, 13, 8)]
SMALL_SIZE = Size(d_model=40, n_layers=2, n_heads=3, head_dim=16, expand=2, d_conv=4, chunk=16)


def s4d_id(shape: tuple[int, ...]) -> str:
    return "B{}-T{}-H{}-N{}".format(*shape)


def s4d_inputs(
    shape,
    seed=0,
    dtype=torch.float32,
    a_real=(0.1, 1.0),
    a_imag=(0.0, 3 * math.pi),
    log_dt=(1e-3, 1e-1),
):
    """(u, log_dt, A, C, D) and a random initial state: -Re A uniform in a_real, Im A in
    a_imag (S4D-Lin: pi k), dt log-uniform in log_dt."""
    b, t, h, n = shape
    g = torch.Generator().manual_seed(seed)
    cdtype = dtype.to_complex()

    def rand(*size, low=0.0, high=1.0):
        return low + (high - low) * torch.rand(*size, generator=g, dtype=dtype)

    u = torch.randn(b, t, h, generator=g, dtype=dtype)
    log_dt = rand(h, low=math.log(log_dt[0]), high=math.log(log_dt[1]))
    A = torch.complex(
        -rand(h, n, low=a_real[0], high=a_real[1]), rand(h, n, low=a_imag[0], high=a_imag[1])
    )
    C = torch.randn(h, n, generator=g, dtype=cdtype)
    D = torch.randn(h, generator=g, dtype=dtype)
    h0 = torch.randn(b, h, n, generator=g, dtype=cdtype)
    return (u, log_dt, A, C, D), h0


def reference(args, h0):
    h0 = None if h0 is None else to_numpy(h0)
    return s4d_reference(*(to_numpy(x) for x in args), initial_state=h0)


@pytest.mark.parametrize("with_state", [True, False], ids=["h0", "zero-state"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", S4D_SHAPES, ids=s4d_id)
def test_s4d_matches_reference(shape, backend, with_state):
    args, h0 = s4d_inputs(shape)
    h0 = h0 if with_state else None
    ref_y, ref_h = reference(args, h0)
    y, h = ops.s4d(*args, initial_state=h0, backend=backend)
    assert y.dtype == torch.float32 and h.dtype == torch.complex64
    assert_close("y", ref_y, y, "fp32")
    assert_close("final_state", ref_h, h, "fp32")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", S4D_SHAPES, ids=s4d_id)
def test_s4d_step_matches_scan(shape, backend):
    args, state = s4d_inputs(shape, seed=1)
    y_scan, h_scan = ops.s4d(*args, initial_state=state, backend=backend)
    u, rest = args[0], args[1:]
    ys = []
    for t in range(shape[1]):
        y_t, state = ops.s4d_step(u[:, t], *rest, state=state, backend=backend)
        ys.append(y_t)
    assert_close("y", y_scan, torch.stack(ys, dim=1), "fp32")
    assert_close("final_state", h_scan, state, "fp32")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cuts", [(1,), (20, 21, 50)], ids=lambda c: "cut" + "-".join(map(str, c)))
def test_s4d_chunked_equals_whole(backend, cuts):
    """The sequence in chunks, each starting from the last one's final state == one pass."""
    shape = (2, 70, 7, 5)
    args, h0 = s4d_inputs(shape, seed=2)
    y_whole, h_whole = ops.s4d(*args, initial_state=h0, backend=backend)
    u, rest = args[0], args[1:]
    state, ys = h0, []
    for start, stop in zip((0, *cuts), (*cuts, shape[1]), strict=True):
        y, state = ops.s4d(u[:, start:stop], *rest, initial_state=state, backend=backend)
        ys.append(y)
    assert_close("y", y_whole, torch.cat(ys, dim=1), "fp32")
    assert_close("final_state", h_whole, state, "fp32")


def test_s4d_fft_every_length():
    """The FFT form against the reference for every T up to 40: every way the powers'
    blocks can fall (full, partial, a single block) and the 2T padding at tiny T."""
    args, h0 = s4d_inputs((2, 40, 3, 2), seed=3)
    u, rest = args[0], args[1:]
    for T in range(1, 41):
        ref_y, ref_h = reference((u[:, :T], *rest), h0)
        y, h = ops.s4d(u[:, :T], *rest, initial_state=h0, backend="torch")
        assert_close(f"y[T={T}]", ref_y, y, "fp32")
        assert_close(f"final_state[T={T}]", ref_h, h, "fp32")


@pytest.mark.parametrize(
    "case",
    [
        # |dt A| below 2e-8: (e^z - 1) / z from its series (e^z - 1 would round to 0)
        {"a_real": (1e-6, 1e-5), "a_imag": (0.0, 1e-5), "log_dt": (1e-4, 1e-3)},
        # dt A down to -200: dA and its powers underflow to zero, nothing overflows
        {"a_real": (20.0, 200.0), "log_dt": (0.5, 1.0)},
        # slow decay over a long sequence: the powers dA^l for l up to T
        {"a_real": (0.1, 0.5), "log_dt": (1e-3, 1e-2)},
    ],
    ids=["tiny-dtA", "strong-decay", "slow-decay"],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_s4d_extreme_steps(backend, case):
    args, h0 = s4d_inputs((1, 300, 4, 3), seed=4, **case)
    ref_y, ref_h = reference(args, h0)
    y, h = ops.s4d(*args, initial_state=h0, backend=backend)
    assert_close("y", ref_y, y, "fp32")
    assert_close("final_state", ref_h, h, "fp32")


@pytest.mark.parametrize("shape", [(2, 37, 3, 4), (1, 1, 2, 3)], ids=s4d_id)
def test_s4d_fft_gradients_match_naive(shape):
    """fp64: autograd through the FFT form == autograd through the loop, for random
    upstream gradients on y and on the (complex) final state."""
    args, h0 = s4d_inputs(shape, seed=5, dtype=torch.float64)
    leaves = [*args, h0]
    g = torch.Generator().manual_seed(6)
    grad_y = torch.randn(shape[:3], generator=g, dtype=torch.float64)
    grad_h = torch.randn(shape[0], shape[2], shape[3], generator=g, dtype=torch.complex128)
    grads = {}
    for backend in BACKENDS:
        for leaf in leaves:
            leaf.requires_grad_(True)
            leaf.grad = None
        y, h = ops.s4d(*args, initial_state=h0, backend=backend)
        torch.autograd.backward([y, h], [grad_y, grad_h])
        grads[backend] = [leaf.grad.clone() for leaf in leaves]
    names = ["u", "log_dt", "A", "C", "D", "initial_state"]
    for name, ref, out in zip(names, grads["naive"], grads["torch"], strict=True):
        assert_close(f"grad_{name}", ref, out, "fp64")


def test_expm1_over_z_is_safe():
    """Both branches, at and around the switch, against np.expm1 in float64; finite
    values and gradients at z = 0."""
    z = np.concatenate(
        [
            [0.0, 1e-12, -1e-9j, 3e-5 + 4e-5j, 0.99e-4, 1.01e-4, -0.5 + 3.1j, 2.0 - 40.0j],
            np.geomspace(1e-8, 10.0, 50) * np.exp(1j * np.linspace(0, 2 * np.pi, 50)),
        ]
    ).astype(np.complex128)
    exact = np.where(z == 0, 1.0, np.expm1(z) / np.where(z == 0, 1.0, z))
    assert_close("numpy", exact, expm1_over_z_reference(z), "fp64")
    assert_close("torch fp64", exact, expm1_over_z(torch.from_numpy(z)), "fp64")
    assert_close("torch fp32", exact, expm1_over_z(torch.from_numpy(z).to(torch.complex64)), "fp32")
    zero = torch.zeros(3, dtype=torch.complex128, requires_grad=True)
    expm1_over_z(zero).real.sum().backward()
    assert_close("d/dz at 0", np.full(3, 0.5), zero.grad, "fp64")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_s4d_half_inputs_compute_wide(dtype):
    """Half inputs: y comes back in the input dtype, the state in complex64, and both
    backends stay within that dtype's tolerance of the reference on the rounded inputs."""
    (u, log_dt, A, C, D), h0 = s4d_inputs((2, 37, 6, 5), seed=7)
    u, log_dt, D = u.to(dtype), log_dt.to(dtype), D.to(dtype)
    ref_y, ref_h = reference((u, log_dt, A, C, D), h0)
    name = {torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    for backend in BACKENDS:
        y, h = ops.s4d(u, log_dt, A, C, D, initial_state=h0, backend=backend)
        assert y.dtype == dtype and h.dtype == torch.complex64
        assert_close(f"{backend}.y", ref_y, y, name)
        assert_close(f"{backend}.final_state", ref_h, h, name)


def test_mixer_init_and_cache():
    """S4D-Lin init, n = d_state // 2 complex modes, and the cache: ``(state,)`` with the
    complex state (b, d_model, n); both backends give the same layer output."""
    mixer = build_mixer(SMALL_SIZE, d_state=9, layer=0)
    assert isinstance(mixer, S4DMixer)
    H, n = SMALL_SIZE.d_model, 4
    _, A, C, D = mixer._ssm_params()
    assert A.shape == C.shape == (H, n) and A.dtype == C.dtype == torch.complex64
    assert torch.all(A.real == -0.5)
    assert torch.allclose(A.imag, math.pi * torch.arange(n).float().expand(H, n))
    assert mixer.log_dt.min() >= math.log(1e-3) and mixer.log_dt.max() <= math.log(1e-1)
    assert mixer.out_proj.weight.shape == (2 * H, H)

    x = torch.randn(2, 19, H, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        outs = {backend: mixer(x, backend) for backend in BACKENDS}
    (y, (state,)), (y_naive, (state_naive,)) = outs["torch"], outs["naive"]
    assert y.shape == x.shape
    assert state.shape == (2, H, n) and state.dtype == torch.complex64
    assert_close("y", y_naive, y, "fp32")
    assert_close("state", state_naive, state, "fp32")


def test_model_keeps_complex_parameters_through_dtype_casts():
    """Every parameter is real, so ``.to(float64)`` keeps the imaginary parts; the
    fp64 model's layers then compute in complex128."""
    net32 = build_model("s4d", SMALL_SIZE, d_state=6, backend="torch", seed=9)
    net64 = build_model("s4d", SMALL_SIZE, d_state=6, backend="torch", dtype=torch.float64, seed=9)
    x = torch.randn(1, 11, SMALL_SIZE.d_model, generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        y32, _ = net32(x)
        y64, caches = net64(x.double())
    assert caches[0][0].dtype == torch.complex128
    assert_close("y", y64, y32, "fp32")


def test_s4d_errors():
    args, h0 = s4d_inputs((2, 5, 3, 2))
    u, log_dt, A, C, D = args
    with pytest.raises(ValueError, match="'cuda-kernels'.*naive"):
        ops.s4d(*args, backend="cuda-kernels")
    with pytest.raises(ValueError, match=r"u must be \(b, t, h\)"):
        ops.s4d(u[0], log_dt, A, C, D)
    with pytest.raises(ValueError, match=r"u must be \(b, h\)"):
        ops.s4d_step(u, log_dt, A, C, D)
    with pytest.raises(ValueError, match="log_dt must have shape"):
        ops.s4d(u, log_dt[:2], A, C, D)
    with pytest.raises(ValueError, match="C must have shape"):
        ops.s4d(u, log_dt, A, C[:, :1], D)
    with pytest.raises(ValueError, match="state must have shape"):
        ops.s4d(u, log_dt, A, C, D, initial_state=h0[:1])
    with pytest.raises(ValueError, match="state must have shape"):
        ops.s4d_step(u[:, 0], log_dt, A, C, D, state=h0[..., :1])
    with pytest.raises(ValueError, match="d_state=1"):
        S4DMixer(8, d_state=1)
    mixer = S4DMixer(8, d_state=4)
    with pytest.raises(ValueError, match="'cuda-kernels'"):
        mixer(torch.randn(1, 3, 8), "cuda-kernels")
    with pytest.raises(ValueError, match="'cuda-kernels'"):
        mixer.step(torch.randn(1, 8), None, "cuda-kernels")
