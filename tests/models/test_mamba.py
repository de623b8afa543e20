"""Mamba's selective scan: reference == naive == torch over shapes and chunk sizes, the step
against the scan, gradients, strong decay; the torch backend's two forms (blocked_scan
without gradients, chunked_scan under autograd) each.

fp32 unless a test says fp64; every comparison goes through
:func:`ssmbench.numerics.assert_close`.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ssmbench import ops, reference
from ssmbench.models import BACKENDS
from ssmbench.models.common import LOG_DECAY_FLOOR
from ssmbench.models.mamba import (
    TIME_BLOCK,
    blocked_scan,
    chunked_scan,
    linear_scan,
    selective_scan_naive,
)
from ssmbench.numerics import assert_close, to_numpy

# (b, t, d, n): T = 1, lengths that no chunk size below divides, non-power-of-two widths
SCAN_SHAPES = [(1, 1, 4, 3), (2, 63, 24, 5), (2, 70, 13, 16)]


CHUNK_SIZES = [1, 7, 16, 64]


def scan_id(shape: tuple[int, ...]) -> str:
    return "B{}-T{}-D{}-N{}".format(*shape)


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
    reference in both forms of the torch backend (blocked_scan without gradients,
    chunked_scan under autograd, whose steps there reach the floor), and gradients match
    autograd through the naive loop (fp64)."""
    (u, delta, A, B, C), kwargs = scan_inputs((2, 150, 6, 5), seed=14, dtype=torch.float64)
    delta = delta.clone()
    delta[1, 40:50] += 30.0  # softplus(30) = 30 per token: blocks 2 and 3 are steep
    args = (u, delta, A, B, C)
    steps = F.softplus(delta + kwargs["delta_bias"])  # (b t d)
    totals = F.pad(steps, (0, 0, 0, -150 % TIME_BLOCK)).unflatten(1, (-1, TIME_BLOCK)).sum(2)
    steep = (totals[..., None] * -A).amax(dim=(0, 2, 3)) > -2 * LOG_DECAY_FLOOR  # (blocks)
    assert steep.any() and not steep.all()
    assert (steps[..., None] * A).amin() < LOG_DECAY_FLOOR  # single steps below the floor
    ref_y, ref_h = reference_scan(args, kwargs)
    y, h = ops.selective_scan(*args, **kwargs, backend="torch")  # no gradients: blocked
    assert_close("y[blocked]", ref_y, y, "fp64")
    assert_close("final_state[blocked]", ref_h, h, "fp64")
    leaves = [*args, *(v for v in kwargs.values() if torch.is_tensor(v))]
    grads = {}
    for backend in BACKENDS:
        for leaf in leaves:
            leaf.requires_grad_(True)
            leaf.grad = None
        y, h = ops.selective_scan(*args, **kwargs, backend=backend)  # torch: chunked
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


# --- chunked_scan: the torch backend's form under autograd -----------------------------

# (b, t, d, n, chunk length): t = 1; t no multiple of the chunk (37 = 9 * 4 + 1); one
# token a chunk; one chunk for all of t; odd d and n
CHUNKED_CASES = [
    (1, 1, 4, 3, 4),
    (2, 37, 6, 5, 4),
    (2, 37, 6, 5, 1),
    (3, 16, 5, 2, 16),
    (2, 70, 13, 16, 7),
]


def chunked_id(case: tuple[int, ...]) -> str:
    return "B{}-T{}-D{}-N{}-L{}".format(*case)


@pytest.fixture
def nan_buffers(monkeypatch):
    """torch.empty, torch.empty_like and Tensor.new_empty give floating tensors full of
    NaN for the test's duration: an element of a buffer or an output that the code never
    writes then fails the comparison instead of passing as a lucky zero."""

    def filled(allocate):
        def allocate_nan(*args, **kwargs):
            x = allocate(*args, **kwargs)
            return x.fill_(float("nan")) if x.is_floating_point() else x

        return allocate_nan

    monkeypatch.setattr(torch, "empty", filled(torch.empty))
    monkeypatch.setattr(torch, "empty_like", filled(torch.empty_like))
    monkeypatch.setattr(torch.Tensor, "new_empty", filled(torch.Tensor.new_empty))


@pytest.mark.parametrize("case", CHUNKED_CASES, ids=chunked_id)
def test_chunked_scan_matches_reference(case, nan_buffers):
    """The bare chunked scan (x = delta u, no D, z or bias) against the float64
    reference: y and the final state, from a random initial state."""
    b, t, d, n, chunk_len = case
    (u, delta, A, B, C), kwargs = scan_inputs((b, t, d, n), seed=20)
    state = kwargs["initial_state"]
    delta = F.softplus(delta)  # a positive step, as chunked_scan takes it
    ref_y, ref_h = reference_scan((u, delta, A, B, C), {"initial_state": state})
    y, h = chunked_scan(delta * u, delta, A, B, C, state, chunk_len=chunk_len)
    assert_close("y", ref_y, y, "fp32")
    assert_close("final_state", ref_h, h, "fp32")


@pytest.mark.parametrize("case", CHUNKED_CASES, ids=chunked_id)
def test_chunked_scan_gradients_match_naive(case, nan_buffers):
    """fp64: the torch backend under autograd (chunked_scan, chunks of the case's length)
    == the reference in value, and == autograd through the naive loop in the gradients
    of u, delta, A, B, C, D, z, delta_bias and the initial state, for random upstream
    gradients on y and the final state.  fp64's tolerance (1e-10 absolute and relative)
    holds: both sides sum the same terms, in another order."""
    b, t, d, n, chunk_len = case
    args, kwargs = scan_inputs((b, t, d, n), seed=21, dtype=torch.float64)
    leaves = [*args, *(v for v in kwargs.values() if torch.is_tensor(v))]
    names = ["u", "delta", "A", "B", "C", *(k for k, v in kwargs.items() if torch.is_tensor(v))]
    g = torch.Generator().manual_seed(22)
    grad_y = torch.randn(b, t, d, generator=g, dtype=torch.float64)
    grad_h = torch.randn(b, d, n, generator=g, dtype=torch.float64)
    ref_y, ref_h = reference_scan(args, kwargs)

    grads = {}
    for backend in ("naive", "torch"):
        for leaf in leaves:
            leaf.requires_grad_(True)
            leaf.grad = None
        y, h = ops.selective_scan(*args, **kwargs, backend=backend, chunk_size=chunk_len)
        assert_close(f"y[{backend}]", ref_y, y.detach(), "fp64")
        assert_close(f"final_state[{backend}]", ref_h, h.detach(), "fp64")
        torch.autograd.backward([y, h], [grad_y, grad_h])
        grads[backend] = [leaf.grad.clone() for leaf in leaves]
    for name, ref, out in zip(names, grads["naive"], grads["torch"], strict=True):
        assert_close(f"grad_{name}", ref, out, "fp64")


def test_chunked_scan_gradcheck():
    """fp64 finite differences (torch.autograd.gradcheck) of chunked_scan's hand-written
    backward, y and the final state, every input with an initial state: 2 chunks of 3
    tokens and a last one of 1."""
    g = torch.Generator().manual_seed(23)
    b, t, d, n = 2, 7, 3, 2

    def draw(*shape, positive=False):
        x = torch.rand(*shape, generator=g, dtype=torch.float64)
        return (0.1 + x if positive else 2 * x - 1).requires_grad_(True)

    inputs = (draw(b, t, d), draw(b, t, d, positive=True), -draw(d, n, positive=True))
    inputs += (draw(b, t, n), draw(b, t, n), draw(b, d, n))
    assert torch.autograd.gradcheck(lambda *v: chunked_scan(*v, chunk_len=3), inputs)


def test_chunked_scan_steep_decay_gradients():
    """Decays far below float32's range (dt A down to -600): the chunked form raises
    log-decays to LOG_DECAY_FLOOR and its values and gradients still match the reference
    and autograd through the naive loop, in fp32 (nothing overflows or turns NaN)."""
    args, kwargs = scan_inputs((1, 300, 8, 4), seed=4, decay_scale=200.0)
    ref_y, ref_h = reference_scan(args, kwargs)
    leaves = [*args, *(v for v in kwargs.values() if torch.is_tensor(v))]
    grads = {}
    for backend in ("naive", "torch"):
        for leaf in leaves:
            leaf.requires_grad_(True)
            leaf.grad = None
        y, h = ops.selective_scan(*args, **kwargs, backend=backend)
        assert_close(f"y[{backend}]", ref_y, y.detach(), "fp32")
        assert_close(f"final_state[{backend}]", ref_h, h.detach(), "fp32")
        (y.square().sum() + h.sum()).backward()
        grads[backend] = [leaf.grad.clone() for leaf in leaves]
    names = ["u", "delta", "A", "B", "C", *(k for k, v in kwargs.items() if torch.is_tensor(v))]
    for name, ref, out in zip(names, grads["naive"], grads["torch"], strict=True):
        assert_close(f"grad_{name}", ref, out, "fp32")


def test_chunked_scan_without_output_gradient():
    """Only the final state is used (the decode cache of a training step): y's gradient is
    None in the backward, which then runs on zeros; fp64, against the naive loop."""
    (u, delta, A, B, C), kwargs = scan_inputs((2, 9, 3, 4), seed=24, dtype=torch.float64)
    state = kwargs["initial_state"]
    grads = {}
    for backend in ("naive", "torch"):
        leaves = [v.detach().requires_grad_(True) for v in (u, delta, A, B, C, state)]
        _, h = ops.selective_scan(*leaves[:5], initial_state=leaves[5], backend=backend)
        h.sum().backward()
        # the naive loop's final state does not depend on C: its gradient is None there
        grads[backend] = [torch.zeros_like(v) if v.grad is None else v.grad for v in leaves]
    names = ["u", "delta", "A", "B", "C", "initial_state"]
    for name, ref, out in zip(names, grads["naive"], grads["torch"], strict=True):
        assert_close(f"grad_{name}", ref, out, "fp64")
