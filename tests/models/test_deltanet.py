"""The (gated) delta rule: reference == naive == torch (every chunk size) == step, y and
final state; gradients of the chunked form against autograd through the loop; half
precision; the DeltaNet block; errors.

fp32 unless a test says otherwise; every comparison goes through
:func:`ssmbench.numerics.assert_close`.  Keys are L2-normalized as the block feeds them:
with unit keys and beta in (0, 1) every step contracts the state, so the forms can be
compared over long sequences.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ssmbench import ops
from ssmbench.matrix import Size
from ssmbench.models import BACKENDS, deltanet
from ssmbench.models.deltanet import (
    DeltaNetMixer,
    build_mixer,
    delta_rule_step,
)
from ssmbench.numerics import assert_close, to_numpy
from ssmbench.reference.deltanet import delta_rule as reference_delta_rule

# (b, t, h, k, v): T = 1, lengths that no chunk size below divides, odd head dims
SHAPES = [(1, 1, 1, 8, 8), (2, 63, 3, 17, 13), (2, 70, 2, 16, 24), (1, 130, 2, 9, 11)]
CHUNK_SIZES = [1, 7, 16, 64, 1000]  # 1: the recurrence again; 1000 >= T: one chunk (parallel)
GATES = ["gated", "plain"]
SMALL_SIZE = Size(d_model=40, n_layers=2, n_heads=3, head_dim=12, expand=2, d_conv=4, chunk=16)


def shape_id(shape: tuple[int, ...]) -> str:
    return "B{}-T{}-H{}-K{}-V{}".format(*shape)


def delta_inputs(shape, gate="gated", seed=0, dtype=torch.float32, decay_scale=1.0):
    """q, k (unit norm), v, beta in (0.05, 0.95), g (log-decay <= 0, or None when plain)
    and a random initial state, all in ``dtype``."""
    b, t, h, dk, dv = shape
    gen = torch.Generator().manual_seed(seed)

    def randn(*size):
        return torch.randn(*size, generator=gen, dtype=torch.float64)

    def rand(*size):
        return torch.rand(*size, generator=gen, dtype=torch.float64)

    q, k, v = randn(b, t, h, dk), F.normalize(randn(b, t, h, dk), dim=-1), randn(b, t, h, dv)
    beta = 0.05 + 0.9 * rand(b, t, h)
    g = -0.5 * decay_scale * rand(b, t, h) if gate == "gated" else None
    state = randn(b, h, dk, dv)
    tensors = (q, k, v, beta, g, state)
    return tuple(None if x is None else x.to(dtype) for x in tensors)


def reference(q, k, v, beta, g, state):
    return reference_delta_rule(
        *(to_numpy(x) for x in (q, k, v, beta)),
        g=None if g is None else to_numpy(g),
        initial_state=to_numpy(state),
    )


def run_steps(q, k, v, beta, g, state, backend="torch"):
    """delta_rule_step over every token: o ``(b, t, h, v)`` and the final state."""
    outputs = []
    for t in range(q.shape[1]):
        g_t = None if g is None else g[:, t]
        o_t, state = ops.delta_rule_step(
            q[:, t], k[:, t], v[:, t], beta[:, t], g=g_t, state=state, backend=backend
        )
        outputs.append(o_t)
    return torch.stack(outputs, dim=1), state


# the operator


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_delta_rule_matches_reference(shape, backend, gate):
    q, k, v, beta, g, state = delta_inputs(shape, gate)
    ref_o, ref_state = reference(q, k, v, beta, g, state)
    o, final = ops.delta_rule(q, k, v, beta, g=g, initial_state=state, backend=backend)
    assert o.dtype == torch.float32 and o.shape == shape[:3] + (shape[4],)
    assert_close("o", ref_o, o, "fp32")
    assert_close("final_state", ref_state, final, "fp32")


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("chunk_size", CHUNK_SIZES, ids=lambda c: f"C{c}")
@pytest.mark.parametrize("shape", SHAPES[1:], ids=shape_id)
def test_delta_rule_torch_chunk_sizes(shape, chunk_size, gate):
    """The chunked form at every chunk size, from the recurrence (C = 1) to the fully
    parallel single chunk (C >= T), against the reference and the naive loop."""
    q, k, v, beta, g, state = delta_inputs(shape, gate, seed=1)
    ref_o, ref_state = reference(q, k, v, beta, g, state)
    naive_o, naive_state = ops.delta_rule(q, k, v, beta, g=g, initial_state=state, backend="naive")
    o, final = ops.delta_rule(
        q, k, v, beta, g=g, chunk_size=chunk_size, initial_state=state, backend="torch"
    )
    assert_close("o", ref_o, o, "fp32")
    assert_close("final_state", ref_state, final, "fp32")
    assert_close("o_vs_naive", naive_o, o, "fp32")
    assert_close("final_state_vs_naive", naive_state, final, "fp32")


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("segment_chunks", [1, 3], ids=lambda n: f"S{n}")
def test_delta_rule_torch_segments(segment_chunks, gate, monkeypatch):
    """On CPU the chunks go a segment at a time; segments of 1 and 3 chunks (the last one
    short) give the same outputs, final state and gradients as one segment."""
    shape, chunk_size = (2, 70, 2, 16, 12), 8  # 9 chunks
    leaves = [x for x in delta_inputs(shape, gate, seed=12, dtype=torch.float64) if x is not None]
    q, k, v, beta, *rest = leaves
    g = rest[0] if gate == "gated" else None
    per_chunk_bytes = shape[0] * shape[2] * chunk_size * max(chunk_size, *shape[3:]) * 8
    results = []
    for segment_bytes in (segment_chunks * per_chunk_bytes, 1 << 40):
        monkeypatch.setattr(deltanet, "_CPU_SEGMENT_BYTES", segment_bytes)
        for leaf in leaves:
            leaf.requires_grad_(True)
            leaf.grad = None
        o, final = ops.delta_rule(
            q, k, v, beta, g=g, chunk_size=chunk_size, initial_state=rest[-1], backend="torch"
        )
        (o.sum() + final.square().sum()).backward()
        results.append([o.detach(), final.detach(), *(leaf.grad for leaf in leaves)])
    names = ["o", "final_state", "grad_q", "grad_k", "grad_v", "grad_beta"]
    names += ["grad_g", "grad_initial_state"] if gate == "gated" else ["grad_initial_state"]
    for name, segmented, whole in zip(names, *results, strict=True):
        assert_close(name, whole, segmented, "fp64")


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_delta_rule_step_matches_reference(shape, gate):
    q, k, v, beta, g, state = delta_inputs(shape, gate, seed=2)
    ref_o, ref_state = reference(q, k, v, beta, g, state)
    o, final = run_steps(q, k, v, beta, g, state)
    assert_close("o", ref_o, o, "fp32")
    assert_close("final_state", ref_state, final, "fp32")


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_delta_rule_scale_multiplies_the_queries(backend, gate):
    """``scale=s`` equals the reference on s q, for the whole sequence and for the step;
    with steep and gentle chunks in one call, since the torch backend scales the queries
    on both of its paths (the decays' factor, and the exact decays of a steep chunk)."""
    shape, chunk_size, scale = (1, 150, 3, 8, 6), 16, 0.3
    q, k, v, beta, g, state = delta_inputs(shape, gate, seed=9, decay_scale=15.0)
    if gate == "gated":
        is_steep = steep_chunks(g, chunk_size)
        assert is_steep.any() and not is_steep.all(), is_steep
    ref_o, ref_state = reference(q * scale, k, v, beta, g, state)
    o, final = ops.delta_rule(
        q,
        k,
        v,
        beta,
        g=g,
        chunk_size=chunk_size,
        initial_state=state,
        scale=scale,
        backend=backend,
    )
    assert_close("o", ref_o, o, "fp32")
    assert_close("final_state", ref_state, final, "fp32")
    g_0 = None if g is None else g[:, 0]
    o_0, state_1 = ops.delta_rule_step(
        q[:, 0], k[:, 0], v[:, 0], beta[:, 0], g=g_0, state=state, scale=scale, backend=backend
    )
    ref_o_0, ref_state_1 = reference(
        q[:, :1] * scale, k[:, :1], v[:, :1], beta[:, :1], None if g is None else g[:, :1], state
    )
    assert_close("o_step", ref_o_0[:, 0], o_0, "fp32")
    assert_close("state_step", ref_state_1, state_1, "fp32")


def test_delta_rule_without_initial_state_starts_from_zeros():
    q, k, v, beta, g, state = delta_inputs((2, 37, 2, 8, 6), seed=3)
    ref_o, ref_state = reference(q, k, v, beta, g, torch.zeros_like(state))
    for backend in BACKENDS:
        o, final = ops.delta_rule(q, k, v, beta, g=g, chunk_size=16, backend=backend)
        assert_close(f"o[{backend}]", ref_o, o, "fp32")
        assert_close(f"final_state[{backend}]", ref_state, final, "fp32")
    o_step, state_step = delta_rule_step(q[:, 0], k[:, 0], v[:, 0], beta[:, 0], g=g[:, 0])
    assert_close("step.o", ref_o[:, 0], o_step, "fp32")


def test_delta_rule_zero_log_decay_is_plain_deltanet():
    """g = 0 (a_t = 1) is DeltaNet: the gated path with no decay == the g=None path."""
    q, k, v, beta, _, state = delta_inputs((2, 45, 2, 12, 10), "plain", seed=4)
    zeros = torch.zeros_like(beta)
    for backend in BACKENDS:
        plain = ops.delta_rule(q, k, v, beta, initial_state=state, chunk_size=16, backend=backend)
        gated = ops.delta_rule(
            q, k, v, beta, g=zeros, initial_state=state, chunk_size=16, backend=backend
        )
        assert_close(f"o[{backend}]", plain[0], gated[0], "fp32")
        assert_close(f"final_state[{backend}]", plain[1], gated[1], "fp32")


def steep_chunks(g: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """Whether each (chunk, head) of g ``(1, t, h)`` decays by more than e^60 in total,
    the chunks whose in-chunk decays the torch backend builds exactly."""
    pad = -g.shape[1] % chunk_size
    totals = F.pad(g[0], (0, 0, 0, pad)).unflatten(0, (-1, chunk_size)).sum(1)  # (c h)
    return totals < -60


@pytest.mark.parametrize(
    "shape, seed, decay_scale, chunk_size, steep",
    [((1, 150, 2, 8, 8), 5, 80.0, 64, "all"), ((1, 150, 3, 8, 8), 9, 15.0, 16, "some")],
    ids=["every-chunk-steep", "steep-and-gentle-chunks"],
)
def test_delta_rule_strong_decays(shape, seed, decay_scale, chunk_size, steep):
    """Strong decays: every backend still equals the reference.

    - every chunk steep: log-decays of up to -40 per token, so the decays underflow to zero
      inside a chunk (exp of cumulative log-decays down to about -1300) and nothing
      overflows.  (Far stronger ones lose float32 precision in the cumulative sum: see
      delta_rule_torch.)
    - chunks that forget within themselves (total log-decay below -60) beside chunks that
      do not, in one call: the two ways the torch backend builds in-chunk decays.
    """
    q, k, v, beta, g, state = delta_inputs(shape, seed=seed, decay_scale=decay_scale)
    is_steep = steep_chunks(g, chunk_size)
    if steep == "all":
        assert is_steep.all(), is_steep
    else:  # the inputs exercise both paths
        assert is_steep.any() and not is_steep.all(), is_steep
    ref_o, ref_state = reference(q, k, v, beta, g, state)
    for backend in BACKENDS:
        o, final = ops.delta_rule(
            q, k, v, beta, g=g, initial_state=state, chunk_size=chunk_size, backend=backend
        )
        assert_close(f"o[{backend}]", ref_o, o, "fp32")
        assert_close(f"final_state[{backend}]", ref_state, final, "fp32")


@pytest.mark.parametrize(
    "shape, gate, decay_scale",
    [
        ((2, 37, 2, 6, 5), "gated", 1.0),
        ((2, 37, 2, 6, 5), "plain", 1.0),
        ((2, 37, 2, 6, 5), "gated", 30.0),  # steep and gentle chunks mixed
        ((1, 1, 1, 4, 3), "gated", 1.0),
        ((1, 1, 1, 4, 3), "plain", 1.0),
    ],
    ids=lambda v: shape_id(v) if isinstance(v, tuple) else str(v),
)
def test_delta_rule_torch_gradients_match_naive(shape, gate, decay_scale):
    """fp64: autograd through the chunked form == autograd through the loop, for random
    upstream gradients on o and the final state, with respect to every input."""
    inputs = delta_inputs(shape, gate, seed=6, dtype=torch.float64, decay_scale=decay_scale)
    if decay_scale > 1:
        steep = torch.cat([steep_chunks(g[None], 8) for g in inputs[4]])
        assert steep.any() and not steep.all(), steep
    leaves = [x for x in inputs if x is not None]
    names = ["q", "k", "v", "beta", *(["g"] if gate == "gated" else []), "initial_state"]
    gen = torch.Generator().manual_seed(7)
    b, t, h, dk, dv = shape
    grad_o = torch.randn(b, t, h, dv, generator=gen, dtype=torch.float64)
    grad_state = torch.randn(b, h, dk, dv, generator=gen, dtype=torch.float64)

    grads = {}
    for backend in BACKENDS:
        for leaf in leaves:
            leaf.requires_grad_(True)
            leaf.grad = None
        q, k, v, beta, *rest = leaves
        g = rest[0] if gate == "gated" else None
        o, final = ops.delta_rule(
            q, k, v, beta, g=g, initial_state=rest[-1], chunk_size=8, backend=backend
        )
        torch.autograd.backward([o, final], [grad_o, grad_state])
        grads[backend] = [leaf.grad.clone() for leaf in leaves]
    for name, ref, out in zip(names, grads["naive"], grads["torch"], strict=True):
        assert_close(f"grad_{name}", ref, out, "fp64")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_delta_rule_half_precision(backend, dtype):
    """Half inputs: the recurrence runs in float32, o comes back in the input dtype, the
    state in float32; the error is that of the output rounding, within the dtype's row."""
    torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    q, k, v, beta, g, state = delta_inputs((2, 50, 2, 16, 12), seed=8, dtype=torch_dtype)
    ref_o, ref_state = reference(q, k, v, beta, g, state)
    o, final = ops.delta_rule(
        q, k, v, beta, g=g, initial_state=state, chunk_size=16, backend=backend
    )
    assert o.dtype == torch_dtype and final.dtype == torch.float32
    assert_close("o", ref_o, o, dtype)
    assert_close("final_state", ref_state, final, dtype)
    o_step, state_step = run_steps(q, k, v, beta, g, state)
    assert o_step.dtype == torch_dtype and state_step.dtype == torch.float32
    assert_close("step.o", ref_o, o_step, dtype)


# the block


@pytest.mark.parametrize("gated", [True, False], ids=["gated", "plain"])
def test_mixer_step_matches_forward(gated):
    """Both block variants: forward == step() token by token (y and every cache part),
    and a prefill of 5 tokens continued by step() == one forward."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(9)
        mixer = DeltaNetMixer(40, n_heads=3, head_dim=12, d_conv=4, chunk_size=8, gated=gated)
    x = torch.randn(2, 21, 40, generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        y, cache = mixer(x, "torch")
        step_cache, ys = None, []
        for t in range(x.shape[1]):
            y_t, step_cache = mixer.step(x[:, t], step_cache, "naive")
            ys.append(y_t)
        y_prefill, prefill_cache = mixer(x[:, :5], "naive")
        ys_continued = [y_prefill]
        for t in range(5, x.shape[1]):
            y_t, prefill_cache = mixer.step(x[:, t], prefill_cache, "torch")
            ys_continued.append(y_t[:, None])
    assert_close("y", y, torch.stack(ys, dim=1), "fp32")
    for part, (full, stepped) in enumerate(zip(cache, step_cache, strict=True)):
        assert_close(f"cache.{part}", full, stepped, "fp32")
    assert_close("y_continued", y, torch.cat(ys_continued, dim=1), "fp32")


def test_build_mixer_is_gated_with_the_preset_shapes():
    mixer = build_mixer(SMALL_SIZE, d_state=5, layer=0)
    inner = SMALL_SIZE.n_heads * SMALL_SIZE.head_dim
    assert mixer.gated and mixer.chunk_size == SMALL_SIZE.chunk
    for proj in (mixer.q_proj, mixer.k_proj, mixer.v_proj):
        assert proj.weight.shape == (inner, SMALL_SIZE.d_model) and proj.bias is None
    assert mixer.out_proj.weight.shape == (SMALL_SIZE.d_model, inner)
    assert mixer.q_conv1d.weight.shape == (inner, 1, SMALL_SIZE.d_conv)
    x = torch.randn(2, 9, SMALL_SIZE.d_model, generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        beta, g = mixer._gates(x)
        y, (q_state, k_state, v_state, state) = mixer(x, "torch")
    assert bool((beta > 0).all() and (beta < 1).all() and (g < 0).all())
    assert y.shape == x.shape
    assert q_state.shape == k_state.shape == v_state.shape == (2, inner, SMALL_SIZE.d_conv)
    assert state.shape == (2, SMALL_SIZE.n_heads, SMALL_SIZE.head_dim, SMALL_SIZE.head_dim)


# errors


def test_bad_shapes_raise():
    q, k, v, beta, g, state = delta_inputs((1, 5, 2, 4, 3))
    cases = {  # the name each message starts with, and the bad argument
        "k": dict(k=k[..., :3]),
        "v": dict(v=v[:, :4]),
        "beta": dict(beta=beta[..., :1]),
        "g": dict(g=g[:, :4]),
        "state": dict(initial_state=state[..., :2]),
    }
    for backend in BACKENDS:  # the eager ones (fused checks shapes on a GPU, in fla)
        for what, bad in cases.items():
            kwargs = dict(k=k, v=v, beta=beta, g=g, initial_state=state) | bad
            with pytest.raises(ValueError, match=f"bad shapes: {what} "):
                ops.delta_rule(q, backend=backend, **kwargs)
    with pytest.raises(ValueError, match="chunk_size"):
        ops.delta_rule(q, k, v, beta, g=g, chunk_size=0, backend="torch")
    with pytest.raises(ValueError, match="bad shapes: state "):
        delta_rule_step(q[:, 0], k[:, 0], v[:, 0], beta[:, 0], state=state[..., :2])


def test_unknown_backend_raises():
    q, k, v, beta, g, _ = delta_inputs((1, 3, 1, 4, 4))
    with pytest.raises(ValueError, match="'cuda-kernels'.*naive"):
        ops.delta_rule(q, k, v, beta, g=g, backend="cuda-kernels")
    mixer = build_mixer(SMALL_SIZE, d_state=5, layer=0)
    x = torch.zeros(1, 3, SMALL_SIZE.d_model)
    with pytest.raises(ValueError, match="'cuda-kernels'"):
        mixer(x, "cuda-kernels")
    with pytest.raises(ValueError, match="'cuda-kernels'"):
        mixer.step(x[:, 0], None, "cuda-kernels")
