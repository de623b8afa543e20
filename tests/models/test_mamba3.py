"""Mamba-3 SISO: reference == naive == torch == step, y and every part of the state;
lam = 1, theta = 0 == Mamba-2's SSD; gradients; errors; the mixer's cache.

fp32 unless a test says otherwise; every comparison goes through
:func:`ssmbench.numerics.assert_close`.
"""

from __future__ import annotations

import importlib.util
import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest
import torch

from ssmbench import ops
from ssmbench.matrix import Size
from ssmbench.models import BACKENDS, build_model
from ssmbench.models.mamba3 import (
    A_FLOOR,
    MAMBA3_VARIANTS,
    Mamba3Mixer,
    Mamba3State,
    build_mixer,
)
from ssmbench.numerics import assert_close, to_numpy
from ssmbench.reference import ssd as reference_ssd
from ssmbench.reference.mamba3 import mamba3 as reference_mamba3
from tests.models import triton_cpu

# (b, t, h, g, p, n, r): T = 1, lengths that no chunk size below divides, odd head dims,
# odd n (its last channel is not rotated), partial (r < n/2) and full (r = n/2) rotation
SHAPES = [
    (1, 1, 1, 1, 4, 2, 1),
    (2, 63, 3, 1, 17, 6, 3),
    (2, 70, 4, 2, 7, 5, 1),
    (1, 130, 2, 2, 8, 16, 8),
]
CHUNK_SIZES = [1, 7, 16, 64]
SMALL_SIZE = Size(d_model=40, n_layers=2, n_heads=3, head_dim=16, expand=2, d_conv=4, chunk=16)


def shape_id(shape: tuple[int, ...]) -> str:
    return "B{}-T{}-H{}-G{}-P{}-N{}-R{}".format(*shape)


def make_inputs(shape, seed=0, dtype=torch.float32, decay_scale=1.0):
    """(x, dt, A, B, C, theta, lam), D and a random initial :class:`Mamba3State`."""
    b, t, h, g, p, n, r = shape
    gen = torch.Generator().manual_seed(seed)

    def randn(*size):
        return torch.randn(*size, generator=gen, dtype=dtype)

    def rand(*size, low=0.0, high=1.0):
        return low + (high - low) * torch.rand(*size, generator=gen, dtype=dtype)

    args = (
        randn(b, t, h, p),
        rand(b, t, h, low=0.05, high=0.6),  # dt
        -rand(b, t, h, low=0.5, high=2.0) * decay_scale,  # A, per token and head
        randn(b, t, g, n),
        randn(b, t, g, n),
        randn(b, t, h, r),  # theta
        rand(b, t, h),  # lam
    )
    state = Mamba3State(randn(b, h, p, n), randn(b, h, r), randn(b, h, n), randn(b, h, p))
    return args, randn(h), state


def run_reference(args, D, state):
    numpy_state = None if state is None else tuple(map(to_numpy, state))
    return reference_mamba3(*map(to_numpy, args), D=to_numpy(D), initial_state=numpy_state)


def assert_state_close(ref, out, dtype="fp32"):
    assert isinstance(out, Mamba3State)
    for field, ref_part, out_part in zip(Mamba3State._fields, ref, out, strict=True):
        assert_close(f"final_state.{field}", ref_part, out_part, dtype)


def run_steps(args, D, state):
    x, dt, A, B, C, theta, lam = args
    ys = []
    for i in range(x.shape[1]):
        token = (x[:, i], dt[:, i], A[:, i], B[:, i], C[:, i], theta[:, i], lam[:, i])
        y_t, state = ops.mamba3_step(*token, D=D, state=state)
        ys.append(y_t)
    return torch.stack(ys, dim=1), state


# the operator against the float64 reference


@pytest.mark.parametrize("h0", [True, False], ids=["h0", "zero-state"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_mamba3_matches_reference(shape, backend, h0):
    args, D, state = make_inputs(shape)
    state = state if h0 else None
    ref_y, ref_state = run_reference(args, D, state)
    y, final = ops.mamba3(*args, D=D, initial_state=state, backend=backend, chunk_size=16)
    assert_close("y", ref_y, y, "fp32")
    assert_state_close(ref_state, final)


@pytest.mark.parametrize("chunk_size", CHUNK_SIZES, ids=lambda c: f"C{c}")
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_mamba3_torch_chunk_sizes(shape, chunk_size):
    args, D, state = make_inputs(shape, seed=1)
    ref_y, ref_state = run_reference(args, D, state)
    y, final = ops.mamba3(*args, D=D, initial_state=state, backend="torch", chunk_size=chunk_size)
    assert_close("y", ref_y, y, "fp32")
    assert_state_close(ref_state, final)


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_mamba3_step_matches_reference(shape):
    args, D, state = make_inputs(shape, seed=2)
    ref_y, ref_state = run_reference(args, D, state)
    y, final = run_steps(args, D, state)
    assert_close("y", ref_y, y, "fp32")
    assert_state_close(ref_state, final)


@pytest.mark.parametrize("split", [1, 17, 40], ids=lambda s: f"split{s}")
@pytest.mark.parametrize("backend", BACKENDS)
def test_mamba3_state_continues_the_sequence(backend, split):
    """Two calls, the second from the first's final state, == one call over both parts:
    the state carries the trapezoid's previous token and the phase."""
    args, D, state = make_inputs((2, 70, 4, 2, 7, 5, 1), seed=3)
    y, final = ops.mamba3(*args, D=D, initial_state=state, backend=backend, chunk_size=16)
    head = [v if v.dim() == 1 else v[:, :split] for v in args]
    tail = [v if v.dim() == 1 else v[:, split:] for v in args]
    y_head, middle = ops.mamba3(*head, D=D, initial_state=state, backend=backend, chunk_size=16)
    y_tail, end = ops.mamba3(*tail, D=D, initial_state=middle, backend=backend, chunk_size=16)
    assert_close("y", y, torch.cat([y_head, y_tail], dim=1), "fp32")
    assert_state_close(final, end)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mamba3_is_causal(backend):
    """New values from token k on leave y before k alone (the trapezoid's shifted term
    reaches token k - 1 only through lam_k and dt_k, which must cancel there)."""
    args, D, state = make_inputs((2, 70, 4, 2, 7, 5, 1), seed=11)
    changed, _, _ = make_inputs((2, 70, 4, 2, 7, 5, 1), seed=12)
    k = 29
    mixed = [
        v if v.dim() == 1 else torch.cat([v[:, :k], w[:, k:]], dim=1)
        for v, w in zip(args, changed, strict=True)
    ]
    y, _ = ops.mamba3(*args, D=D, initial_state=state, backend=backend, chunk_size=16)
    y_mixed, _ = ops.mamba3(*mixed, D=D, initial_state=state, backend=backend, chunk_size=16)
    assert_close("y[:k]", y[:, :k], y_mixed[:, :k], "fp32")
    assert not torch.allclose(y[:, k:], y_mixed[:, k:])


def test_mamba3_strong_decay_stays_finite():
    """Decays far below float32's range (floored at e^-60) leave the results exact."""
    args, D, state = make_inputs((1, 300, 3, 1, 8, 6, 3), seed=4, decay_scale=200.0)
    ref_y, ref_state = run_reference(args, D, state)
    for backend in BACKENDS:
        y, final = ops.mamba3(*args, D=D, initial_state=state, backend=backend, chunk_size=64)
        assert_close("y", ref_y, y, "fp32")
        assert_state_close(ref_state, final)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mamba3_half_inputs(backend):
    """bf16 in: the recurrence runs in float32, y comes back in bf16, the state in float32."""
    args, D, state = make_inputs((2, 37, 3, 1, 8, 6, 3), seed=5)
    args, D = [v.bfloat16() for v in args], D.bfloat16()
    ref_y, ref_state = run_reference(args, D, state)
    y, final = ops.mamba3(*args, D=D, initial_state=state, backend=backend, chunk_size=16)
    assert y.dtype == torch.bfloat16
    assert all(part.dtype == torch.float32 for part in final)
    assert_close("y", ref_y, y, "bf16")
    assert_state_close(ref_state, final, "bf16")


# lam = 1, theta = 0 is Mamba-2's SSD


def ssd_limit(shape, seed, dtype):
    """Mamba-3 inputs with lam = 1, theta = 0 and A the same at every token (the first
    token's), and the SSD reference's (y, state) for that A per head."""
    (x, dt, A, B, C, theta, lam), D, state = make_inputs(shape, seed=seed, dtype=dtype)
    A_head = A[0, 0]  # (h)
    args = (x, dt, A_head.expand_as(dt), B, C, torch.zeros_like(theta), torch.ones_like(lam))
    expected = reference_ssd(
        *map(to_numpy, (x, dt, A_head, B, C)), D=to_numpy(D), initial_state=to_numpy(state.ssm)
    )
    return args, D, state.ssm, expected


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_reference_reduces_to_ssd(shape):
    args, D, h0, (ssd_y, ssd_state) = ssd_limit(shape, seed=6, dtype=torch.float64)
    y, state = reference_mamba3(*map(to_numpy, args), D=to_numpy(D), initial_state=to_numpy(h0))
    assert_close("y", ssd_y, y, "fp64")
    assert_close("final_state", ssd_state, state.ssm, "fp64")


@pytest.mark.parametrize("dtype", ["fp64", "fp32"])
@pytest.mark.parametrize("form", [*BACKENDS, "step"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_torch_forms_reduce_to_ssd(shape, form, dtype):
    torch_dtype = torch.float64 if dtype == "fp64" else torch.float32
    args, D, h0, (ssd_y, ssd_state) = ssd_limit(shape, seed=7, dtype=torch_dtype)
    if form == "step":
        y, state = run_steps(args, D, h0)
    else:
        y, state = ops.mamba3(*args, D=D, initial_state=h0, backend=form, chunk_size=16)
    assert_close("y", ssd_y, y, dtype)
    assert_close("final_state", ssd_state, state.ssm, dtype)


# gradients


@pytest.mark.parametrize("shape", [(2, 37, 4, 2, 5, 6, 2), (1, 1, 2, 1, 3, 4, 2)], ids=shape_id)
def test_mamba3_torch_gradients_match_naive(shape):
    """fp64: autograd through the chunked form == autograd through the loop, for random
    upstream gradients on y and on every part of the final state."""
    args, D, state = make_inputs(shape, seed=8, dtype=torch.float64)
    leaves = [*args, D, *state]
    names = ["x", "dt", "A", "B", "C", "theta", "lam", "D", *Mamba3State._fields]
    gen = torch.Generator().manual_seed(9)
    upstream = [torch.randn(args[0].shape, generator=gen, dtype=torch.float64)]
    upstream += [torch.randn(part.shape, generator=gen, dtype=torch.float64) for part in state]

    grads = {}
    for backend in BACKENDS:
        for leaf in leaves:
            leaf.requires_grad_(True)
            leaf.grad = None
        y, final = ops.mamba3(
            *args, D=D, initial_state=Mamba3State(*state), backend=backend, chunk_size=8
        )
        torch.autograd.backward([y, *final], upstream)
        grads[backend] = [leaf.grad.clone() for leaf in leaves]
    for name, ref, out in zip(names, grads["naive"], grads["torch"], strict=True):
        assert_close(f"grad_{name}", ref, out, "fp64")


# errors


def test_mamba3_bad_shapes_raise():
    args, D, state = make_inputs((1, 5, 4, 2, 3, 6, 3))
    x, dt, A, B, C, theta, lam = args
    three_groups = B[:, :, :1].expand(1, 5, 3, 6)
    bad = {
        "not divisible": (x, dt, A, three_groups, three_groups),
        "theta must be": (x, dt, A, B, C, torch.zeros(1, 5, 4, 4)),  # 2 r > n
        "dt .* must be": (x, dt[:, :4], A, B, C),
        "A must be": (x, dt, A[0, 0], B, C),  # one A per head (Mamba-2's) is not Mamba-3's
    }
    for backend in BACKENDS:
        for message, broken in bad.items():
            with pytest.raises(ValueError, match=message):
                ops.mamba3(*broken, *args[len(broken) :], backend=backend)
        with pytest.raises(ValueError, match="D must be"):
            ops.mamba3(*args, D=D[:3], backend=backend)
        with pytest.raises(ValueError, match="state.phase"):
            ops.mamba3(*args, initial_state=state._replace(phase=state.phase[..., :2]))
    with pytest.raises(ValueError, match="x must be"):
        ops.mamba3_step(x, dt[:, 0], A[:, 0], B[:, 0], C[:, 0], theta[:, 0], lam[:, 0])
    with pytest.raises(ValueError, match="A must be"):
        ops.mamba3_step(x[:, 0], dt[:, 0], A[0, 0], B[:, 0], C[:, 0], theta[:, 0], lam[:, 0])
    with pytest.raises(ValueError, match=r"A must be \(1, 5, 4\)"):
        reference_mamba3(*map(to_numpy, (x, dt, A[0, 0], B, C, theta, lam)))


def test_mamba3_unknown_backend_raises():
    args, D, _ = make_inputs((1, 3, 2, 1, 3, 4, 2))
    with pytest.raises(ValueError, match="'cuda-kernels'.*naive"):
        ops.mamba3(*args, D=D, backend="cuda-kernels")
    with pytest.raises(ValueError, match="'cuda-kernels'"):
        build_model("mamba3", SMALL_SIZE, d_state=4, backend="cuda-kernels")


# the mixer


def test_mamba3_mixer_shapes_and_cache():
    """The cpu preset's block: h = 512 // 64 = 8 heads of p = 64, n = 16, r = n/4 = 4
    angles; the cache is the op's state, and prefill + step continue it."""
    size = Size(d_model=256, n_layers=1, n_heads=4, head_dim=64, expand=2, d_conv=4, chunk=64)
    mixer = build_mixer(size, d_state=16, layer=0)
    assert (mixer.nheads, mixer.head_dim, mixer.d_state, mixer.n_angles) == (8, 64, 16, 4)
    # [z, x, B, C, dd_dt, dd_A, trap, angle]
    assert mixer.split == [512, 512, 16, 16, 8, 8, 8, 4]
    assert mixer.in_proj.weight.shape == (2 * 512 + 2 * 16 + 3 * 8 + 4, 256)
    assert mixer.out_proj.weight.shape == (256, 512)
    assert not any(isinstance(m, torch.nn.Conv1d) for m in mixer.modules())
    u = torch.randn(2, 9, 256, generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        y, cache = mixer(u, "torch")
        y_last, stepped = mixer.step(u[:, -1], mixer(u[:, :-1], "torch")[1], "torch")
    assert y.shape == (2, 9, 256)
    assert isinstance(cache, Mamba3State)
    shapes = [tuple(part.shape) for part in cache]
    assert shapes == [(2, 8, 64, 16), (2, 8, 4), (2, 8, 16), (2, 8, 64)]  # ssm, phase, B, x
    assert_close("y_last", y[:, -1], y_last, "fp32")
    assert_state_close(cache, stepped)


def _projections(mixer: Mamba3Mixer, u: torch.Tensor) -> dict[str, torch.Tensor]:
    """in_proj's outputs cut by hand in mamba_ssm's order [z, x, B, C, dd_dt, dd_A, trap,
    angle] (dd_A absent without a data-dependent A)."""
    e, n, h, r = mixer.d_inner, mixer.d_state, mixer.nheads, mixer.n_angles
    widths = {"z": e, "x": e, "B": n, "C": n, "dd_dt": h}
    widths |= {"dd_A": h} if mixer.A_mode == "data" else {}
    widths |= {"trap": h, "angle": r}
    out, start = {}, 0
    for name, width in widths.items():
        out[name] = u @ mixer.in_proj.weight[start : start + width].T
        start += width
    assert start == mixer.in_proj.weight.shape[0]
    return out


def _rms_normed(v: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + 1e-5) * weight


def test_mamba3_mixer_op_inputs_are_mamba_ssms():
    """Every input the op sees, from in_proj's rows by hand: A = min(-softplus(dd_A),
    -A_FLOOR) per token and head, dt = softplus(dd_dt + dt_bias), lam = sigmoid(trap),
    theta = pi tanh(angle) shared by the heads, B and C RMS-normed plus their per-head
    biases; at init A is near -log 2 (dd_A is rows of nn.Linear's init, no bias)."""
    torch.manual_seed(0)
    mixer = Mamba3Mixer(64, d_state=32, head_dim=32)  # parity's block: 4 heads, 8 angles
    with torch.no_grad():
        for param in (mixer.B_bias, mixer.C_bias, mixer.B_norm.weight, mixer.C_norm.weight):
            param.normal_()
    u = torch.randn(3, 41, 64, generator=torch.Generator().manual_seed(1))
    z, x, B, C, dt, A, lam, theta = mixer._op_inputs(u)
    raw = _projections(mixer, u)
    expected = {
        "z": raw["z"].unflatten(-1, (4, 32)),
        "x": raw["x"].unflatten(-1, (4, 32)),
        "B": _rms_normed(raw["B"], mixer.B_norm.weight)[..., None, :] + mixer.B_bias,
        "C": _rms_normed(raw["C"], mixer.C_norm.weight)[..., None, :] + mixer.C_bias,
        "dt": torch.nn.functional.softplus(raw["dd_dt"] + mixer.dt_bias),
        "A": -torch.nn.functional.softplus(raw["dd_A"]).clamp(min=A_FLOOR),
        "lam": torch.sigmoid(raw["trap"]),
        "theta": (math.pi * torch.tanh(raw["angle"]))[..., None, :].expand(3, 41, 4, 8),
    }
    for name, value in zip(expected, (z, x, B, C, dt, A, lam, theta), strict=True):
        assert_close(name, expected[name], value, "fp32")
    assert A.shape == (3, 41, 4) and A.std(dim=1).min() > 0.05  # per token and head
    assert -0.85 < A.mean() < -0.6  # -softplus(N(0, 1/3)) averages about -0.74

    with torch.no_grad():  # a very negative dd_A meets the floor
        rows = slice(2 * 128 + 2 * 32 + 4, 2 * 128 + 2 * 32 + 8)
        mixer.in_proj.weight[rows] *= 1000.0
    A = mixer._op_inputs(u)[5]
    assert (A == -A_FLOOR).any() and A.max() == -A_FLOOR and (A < -1.0).any()


def test_mamba3_mixer_init_and_options():
    """dt at init log-uniform in [1e-3, 0.1] (mamba_ssm's dt_min, dt_max) or dt_range;
    A_mode "per-head": no dd_A rows, one learned A per head (-A in [1, 16]) at every token;
    angle_bound None: theta is the projection itself."""
    torch.manual_seed(2)
    faithful = Mamba3Mixer(64, d_state=32, head_dim=16)
    dt = torch.nn.functional.softplus(faithful.dt_bias)
    assert ((1e-3 <= dt) & (dt <= 0.1)).all() and dt.max() / dt.min() > 3
    assert all(torch.equal(p, torch.ones_like(p)) for p in (faithful.B_bias, faithful.D))
    wide = Mamba3Mixer(64, d_state=32, head_dim=16, dt_range=(0.1, 1.0))
    dt = torch.nn.functional.softplus(wide.dt_bias)
    assert ((0.1 <= dt * (1 + 1e-6)) & (dt <= 1.0 * (1 + 1e-6))).all()

    per_head = Mamba3Mixer(64, d_state=32, head_dim=16, A_mode="per-head")
    assert per_head.in_proj.weight.shape[0] == faithful.in_proj.weight.shape[0] - 8
    assert ((1.0 <= per_head.A_log.exp()) & (per_head.A_log.exp() <= 16.0)).all()
    u = torch.randn(2, 9, 64, generator=torch.Generator().manual_seed(3))
    A = per_head._op_inputs(u)[5]
    assert_close("A", (-per_head.A_log.exp()).expand(2, 9, 8), A, "fp32")
    lam = per_head._op_inputs(u)[6]
    assert_close("lam", torch.sigmoid(_projections(per_head, u)["trap"]), lam, "fp32")

    unbounded = Mamba3Mixer(64, d_state=32, head_dim=16, angle_bound=None)
    with torch.no_grad():
        unbounded.in_proj.weight[-unbounded.n_angles :] *= 20.0
    theta = unbounded._op_inputs(u)[7]
    angle = _projections(unbounded, u)["angle"]
    assert_close("theta", angle[..., None, :].expand_as(theta), theta, "fp32")
    assert theta.abs().max() > math.pi
    with pytest.raises(ValueError, match="unknown A_mode 'complex'.*per-head"):
        Mamba3Mixer(64, A_mode="complex")


@pytest.mark.parametrize("name", sorted(MAMBA3_VARIANTS))
def test_mamba3_named_variants_build_and_continue_their_cache(name):
    """Every named variant is a Mamba3Mixer of other options: it builds, prefill + step
    continue its cache, and it is not the benchmark's block."""
    size = Size(d_model=40, n_layers=1, n_heads=2, head_dim=16, expand=2, d_conv=4, chunk=16)
    torch.manual_seed(4)
    variant = build_mixer(size, d_state=8, layer=0, **MAMBA3_VARIANTS[name])
    torch.manual_seed(4)
    plain = build_mixer(size, d_state=8, layer=0)
    u = torch.randn(2, 21, 40, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        y, cache = variant(u, "torch")
        y_last, _ = variant.step(u[:, -1], variant(u[:, :-1], "torch")[1], "torch")
        assert not torch.allclose(y, plain(u, "torch")[0])
    assert_close("y_last", y[:, -1], y_last, "fp32")


# the mixer against mamba_ssm's Mamba3 module (its forward, its Triton kernels)

needs_mamba_ssm = pytest.mark.skipif(
    any(importlib.util.find_spec(p) is None for p in ("triton", "einops", "mamba_ssm")),
    reason="mamba_ssm, triton or einops not installed (`make fused`)",
)
CHECK_TIMEOUT_S = 300  # per check in the worker; each takes a few seconds on 2 cores
# (b, t, d_model, head_dim, d_state, chunk): the kernels want power-of-two head dim and
# state size; lengths one chunk, and neither a multiple of the chunk; 4 and 2 heads;
# n = 16 rotates r = 4 pairs, n = 32 (parity's) 8
MODULE_SHAPES = [(1, 16, 32, 16, 16, 16), (2, 33, 32, 16, 16, 16), (1, 37, 32, 32, 32, 16)]


def module_shape_id(shape: tuple[int, ...]) -> str:
    return "B{}-T{}-D{}-P{}-N{}-C{}".format(*shape)


def _start_mamba_ssm_worker() -> None:
    triton_cpu.install()
    triton_cpu.fill_new_buffers_with_nan()
    triton_cpu.exact_mamba3_helpers()


@pytest.fixture(scope="module")
def mamba_ssm_worker():
    """A spawned worker with the Triton interpreter on (it must be on before mamba_ssm's
    kernels are imported, and must not leak into the other tests)."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context, initializer=_start_mamba_ssm_worker) as pool:
        yield pool


def _combined_in_float32(combined):
    """mamba_ssm's ``mamba3_siso_combined`` without its first step, the casts of Q, K, V,
    Trap, Angles and Z to bf16 (the kernels then compute in the inputs' float32): the
    interpreter's bf16 results are garbage (outputs of 1e10 for O(1) inputs), and fp32 is
    the comparison the block needs.  The rest is its autograd function as it stands."""

    def mamba3_siso_combined(
        Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=None, Z=None, Input_States=None,
        chunk_size=64, return_final_states=False, cu_seqlens=None,
    ):  # fmt: skip
        states = Input_States if Input_States is not None else (None,) * 4
        return combined._Mamba3Function.apply(
            Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D, Z, *states,
            cu_seqlens, chunk_size, return_final_states,
        )  # fmt: skip

    return mamba3_siso_combined


def _check_against_mamba_ssm(shape: tuple, seed: int) -> dict:
    """Run in the worker: mamba_ssm's Mamba3 and our mixer with the same weights on the
    same input; our three forms and our cache against its output and final states."""
    from types import SimpleNamespace

    from ssmbench.models import kernels
    from ssmbench.models.mamba3 import A_FLOOR, Mamba3Mixer
    from ssmbench.numerics import compare
    from ssmbench.verify import compare_phase

    b, t, d_model, head_dim, d_state, chunk = shape
    module = kernels.mamba_ssm_module("modules.mamba3")
    combined = kernels.mamba_ssm_module("ops.triton.mamba3.mamba3_siso_combined")
    module.mamba3_siso_combined = _combined_in_float32(combined)

    torch.manual_seed(seed)
    theirs = module.Mamba3(
        d_model, d_state=d_state, expand=2, headdim=head_dim, chunk_size=chunk, layer_idx=0
    )
    ours = Mamba3Mixer(d_model, d_state=d_state, expand=2, head_dim=head_dim, chunk_size=chunk)
    # every parameter random, so that a swapped or unused one shows
    gen = torch.Generator().manual_seed(seed + 1)
    h, n = theirs.nheads, d_state
    with torch.no_grad():
        weight = theirs.in_proj.weight  # rows [z, x, B, C, dd_dt, dd_A, trap, angle]
        dd_A = 2 * theirs.d_inner + 2 * n + h  # the first dd_A row
        weight[dd_A] *= 40.0  # head 0's A: some tokens at the floor (asserted below)
        weight[dd_A + 2 * h :] *= 3.0  # angles: tanh near +-1 for some tokens
        theirs.dt_bias.copy_(torch.randn(h, generator=gen))  # dt about 0.1 .. 2
        for param in (theirs.B_bias, theirs.C_bias, theirs.B_norm.weight, theirs.C_norm.weight):
            param.copy_(1 + 0.5 * torch.randn(param.shape, generator=gen))
        theirs.D.copy_(torch.randn(h, generator=gen))
    copies = {  # ours <- theirs, every parameter of both
        "in_proj.weight": theirs.in_proj.weight,
        "out_proj.weight": theirs.out_proj.weight,
        "dt_bias": theirs.dt_bias,
        "B_bias": theirs.B_bias[:, 0],  # (h, mimo rank 1, n)
        "C_bias": theirs.C_bias[:, 0],
        "D": theirs.D,
        "B_norm.weight": theirs.B_norm.weight,
        "C_norm.weight": theirs.C_norm.weight,
    }
    assert sorted(copies) == sorted(name for name, _ in ours.named_parameters())
    assert len(copies) == len(list(theirs.parameters()))
    with torch.no_grad():
        for name, value in copies.items():
            ours.get_parameter(name).copy_(value)
    theirs.requires_grad_(False)  # forward only (its backward's bf16 buffers, see above)

    u = torch.randn(b, t, d_model, generator=gen)
    cache = SimpleNamespace(key_value_memory_dict={}, seqlen_offset=0)
    with torch.no_grad():
        y_ref = theirs(u, inference_params=cache)
        phase, ssm, k_state, v_state = cache.key_value_memory_dict[0]
        A = ours._op_inputs(u)[5]
        out = {"floored_tokens": int((A == -A_FLOOR).sum()), "checks": []}
        for form in ("naive", "torch", "step"):
            if form == "step":
                state, ys = None, []
                for i in range(t):
                    y_t, state = ours.step(u[:, i], state, "torch")
                    ys.append(y_t)
                y = torch.stack(ys, dim=1)
            else:
                y, state = ours(u, form)
            out["checks"] += [
                compare(f"{form}.y", y_ref, y, "fp32"),
                compare(f"{form}.ssm", ssm, state.ssm, "fp32"),
                compare_phase(f"{form}.phase", phase, state.phase, "fp32"),
                compare(f"{form}.B_prev", k_state[:, 0], state.B_prev, "fp32"),
                compare(f"{form}.x_prev", v_state, state.x_prev, "fp32"),
            ]
    return out


@needs_mamba_ssm
@pytest.mark.parametrize("shape", MODULE_SHAPES, ids=module_shape_id)
def test_mixer_matches_mamba_ssm_module(mamba_ssm_worker, shape):
    """Our Mamba3Mixer == mamba_ssm 2.3.2's ``Mamba3`` (SISO, its defaults) with the same
    weights, in fp32: y and the final state (the phase mod 2 pi), for our naive, torch and
    token-by-token step forms.

    What ran of mamba_ssm: its module's forward as written (in_proj, the split, A =
    -softplus(dd_A) floored, dt, its Triton RMSNorm of B and C, its rearranges, out_proj)
    and its Triton kernels ``angle_dt_fwd`` and ``mamba3_siso_fwd`` (chunked, with the
    biases, rotation, trapezoid, D and the z gate) under the Triton interpreter on CPU
    tensors, with two changes the interpreter forces (tests/models/triton_cpu.py and
    :func:`_combined_in_float32`): its four PTX approximations (cos, sin, tanh, sech^2)
    computed exactly, and the kernels fed float32 instead of bf16.  Its decode ``step``
    (a CuteDSL kernel) and its backward are not compared; the final states come from its
    forward's inference cache."""
    out = mamba_ssm_worker.submit(_check_against_mamba_ssm, shape, 0).result(CHECK_TIMEOUT_S)
    failed = [str(c) for c in out["checks"] if not c.ok]
    assert not failed, "\n".join(failed)
    assert out["floored_tokens"] > 0  # the floor on -A was exercised


def _init_against_mamba_ssm(d_model: int, head_dim: int, d_state: int, seed: int) -> dict:
    """Run in the worker: mamba_ssm's Mamba3 and our mixer, each built right after
    ``torch.manual_seed(seed)``; per parameter of ours, whether it equals theirs."""
    from ssmbench.models import kernels
    from ssmbench.models.mamba3 import Mamba3Mixer

    module = kernels.mamba_ssm_module("modules.mamba3")
    torch.manual_seed(seed)
    theirs = module.Mamba3(d_model, d_state=d_state, expand=2, headdim=head_dim)
    torch.manual_seed(seed)
    ours = Mamba3Mixer(d_model, d_state=d_state, expand=2, head_dim=head_dim)
    assert len(list(theirs.parameters())) == len(list(ours.parameters()))
    return {
        name: torch.equal(param, theirs.get_parameter(name).reshape(param.shape))
        for name, param in ours.named_parameters()
    }


@needs_mamba_ssm
@pytest.mark.parametrize("size", [(32, 16, 16), (64, 32, 32)], ids=["D32-P16-N16", "D64-P32-N32"])
def test_mixer_init_is_mamba_ssms(mamba_ssm_worker, size):
    """One seed, the same weights as mamba_ssm's Mamba3: in_proj and out_proj as torch's
    nn.Linear (dd_A's rows too: no init of its own), dt_bias from the same log-uniform dt
    in [1e-3, 0.1], B_bias = C_bias = D = 1, norm weights 1 (drawn in its order)."""
    equal = mamba_ssm_worker.submit(_init_against_mamba_ssm, *size, 7).result(CHECK_TIMEOUT_S)
    assert equal and all(equal.values()), equal
