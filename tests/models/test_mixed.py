"""The torch-mixed backend: the chunked forms with bf16 matmul operands (fp32 accumulation,
decays and state), where a family has them; the reason where it has not."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from ssmbench import ops
from ssmbench.cell import CellSpec, run_cell
from ssmbench.matrix import Cell, Size, Timing
from ssmbench.models import FAMILIES, deltanet, mamba2, mamba3
from ssmbench.numerics import assert_close, compare
from ssmbench.registry import HALF_MATMULS
from ssmbench.verify import Inputs, verify_backend

MIXED = ("mamba2", "mamba3", "deltanet", "hybrid")  # the families that offer torch-mixed
SIZE = Size(d_model=32, n_layers=2, n_heads=2, head_dim=16, expand=2, d_conv=4, chunk=16)
TIMING = Timing(warmup=1, min_samples=2, max_samples=2, min_time_s=0.0, max_time_s=5.0)


def op_inputs(op: str, dtype: torch.dtype, seed: int = 0, t: int = 150):
    """Positional arguments and the initial state of ``op`` at one awkward shape
    (t = 150 is three chunks of 64 and a remainder; p = 12, n = 10 are no powers of two)."""
    inputs = Inputs(seed, torch.device("cpu"), dtype)
    b, h, p, n = 2, 3, 12, 10
    if op == "delta_rule":
        q, k = (F.normalize(inputs.randn(b, t, h, n).float(), dim=-1).to(dtype) for _ in "qk")
        v, beta = inputs.randn(b, t, h, p), inputs.rand(b, t, h, low=0.05, high=0.95)
        g = -inputs.rand(b, t, h, low=0.0, high=0.5)
        return (q, k, v, beta, g), inputs.randn(b, h, n, p)
    x, dt = inputs.randn(b, t, h, p), inputs.rand(b, t, h, low=0.01, high=0.5)
    A, B, C = -inputs.rand(h, low=0.5, high=2.0), inputs.randn(b, t, 1, n), inputs.randn(b, t, 1, n)
    if op == "ssd":
        return (x, dt, A, B, C, inputs.randn(h)), inputs.randn(b, h, p, n)
    theta, lam = inputs.rand(b, t, h, 2, low=-3.0, high=3.0), inputs.rand(b, t, h, low=0, high=1)
    A = A * inputs.rand(b, t, h, low=0.5, high=1.5)  # Mamba-3's A: per token and head
    return (x, dt, A, B, C, theta, lam, inputs.randn(h)), inputs.randn(b, h, p, n)


def run_op(op: str, args, state, backend: str):
    """``ops.<op>`` on ``args`` from ``state``: (y, final SSM state)."""
    fn = getattr(ops, op)
    if op == "delta_rule":
        return fn(*args[:4], g=args[4], initial_state=state, backend=backend)
    y, final = fn(*args, initial_state=state, backend=backend)
    return y, final.ssm if op == "mamba3" else final


class Matmuls(TorchDispatchMode):
    """Records the operand dtypes and flop of every matmul ATen runs (mm, bmm, baddbmm,
    addmm) and the dtype of every triangular solve."""

    def __init__(self):
        super().__init__()
        self.flop: dict[torch.dtype, float] = {}
        self.solves: list[torch.dtype] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in ("mm", "bmm", "baddbmm", "addmm"):
            a, b = args[-2:] if name in ("baddbmm", "addmm") else args[:2]
            assert a.dtype == b.dtype, (name, a.dtype, b.dtype)
            flop = 2 * a.shape[-2] * a.shape[-1] * b.shape[-1] * (a.shape[0] if a.dim() == 3 else 1)
            self.flop[a.dtype] = self.flop.get(a.dtype, 0.0) + flop
        elif name.startswith("linalg_solve_triangular"):
            self.solves.append(args[0].dtype)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("model", MIXED)
def test_torch_mixed_passes_verify_in_bf16(model):
    """Against the float64 reference under the bf16 tolerances, every phase: the chunked
    form (prefill and train), torch's step (decode) and the block."""
    result = verify_backend(model, "torch-mixed", "cpu", "bf16", seed=5)
    failed = [c["name"] for c in result["checks"] if not c["ok"]]
    assert result["passed"] and not failed and not result["unavailable"], failed
    assert {"prefill", "train", "decode"} <= {p for c in result["checks"] for p in c["phases"]}


@pytest.mark.parametrize("op", ["ssd", "mamba3", "delta_rule"])
def test_torch_mixed_multiplies_in_bf16_and_keeps_the_state_in_fp32(op):
    """Most of the matmul flop on bf16 operands (what stays fp32 is the state passed
    between chunks, and DeltaNet's triangular solve); torch's form multiplies in fp32 only;
    the mixed output differs from the widened one by more than fp32 rounding, within bf16's
    tolerance, and the final state comes back in fp32."""
    args, state = op_inputs(op, torch.bfloat16)
    with Matmuls() as mixed_ops:
        y, final = run_op(op, args, state, "torch-mixed")
    with Matmuls() as torch_ops:
        y_wide, final_wide = run_op(op, args, state, "torch")
    bf16 = mixed_ops.flop.get(torch.bfloat16, 0.0)
    assert set(mixed_ops.flop) <= {torch.bfloat16, torch.float32}
    assert bf16 > 0.8 * sum(mixed_ops.flop.values()), mixed_ops.flop
    assert set(torch_ops.flop) == {torch.float32}
    assert set(mixed_ops.solves) <= {torch.float32}
    assert y.dtype == torch.bfloat16 and final.dtype == torch.float32
    assert not compare("y", y_wide, y, "fp32").ok
    assert not compare("final_state", final_wide, final, "fp32").ok
    assert_close("y", y_wide, y, "bf16")
    assert_close("final_state", final_wide, final, "bf16")


@pytest.mark.parametrize("op", ["ssd", "mamba3", "delta_rule"])
def test_torch_mixed_in_fp32_is_torch(op):
    """In fp32 there is nothing to narrow: torch-mixed computes exactly what torch does."""
    args, state = op_inputs(op, torch.float32, t=70)
    y, final = run_op(op, args, state, "torch-mixed")
    y_torch, final_torch = run_op(op, args, state, "torch")
    assert torch.equal(y, y_torch) and torch.equal(final, final_torch)


def spec(model: str, phase: str = "prefill", dtype: str = "bf16") -> CellSpec:
    d_state = 0 if model in ("attention", "deltanet") else 4
    cell = Cell(model, "torch-mixed", phase, 1, 40, d_state, dtype)
    return CellSpec("t", cell, "cpu", SIZE, TIMING, seed=0)


@pytest.mark.parametrize(
    "model, reason",
    [
        ("attention", "already runs SDPA in the cell's dtype"),
        ("mamba", "no matmuls to run in half precision"),
        ("s4d", "FFT convolution"),
    ],
)
@pytest.mark.parametrize("phase", ["prefill", "decode", "train"])
def test_families_without_a_mixed_form_are_unavailable_with_the_reason(model, reason, phase):
    r = run_cell(spec(model, phase), threads=1)
    assert r.status == "unavailable" and reason in r.reason and "torch-mixed" in r.reason


def test_torch_mixed_in_fp16_is_unavailable_with_the_reason():
    r = run_cell(spec("mamba2", dtype="fp16"), threads=1)
    assert r.status == "unavailable" and "fp16" in r.reason


@pytest.mark.parametrize("model", ["mamba2", "hybrid"])
def test_torch_mixed_cells_run_and_record_their_compute_dtype(model):
    """Prefill and train in bf16 (the hybrid's attention layers run torch's SDPA); decode
    runs torch's one-token step, widened to fp32, and says so."""
    for phase, compute in (("prefill", "bf16"), ("train", "bf16"), ("decode", "fp32")):
        r = run_cell(spec(model, phase), threads=1)
        assert r.status == "ok", r.reason
        assert r.compute_dtype == compute, phase


def test_the_rule_names_the_families_that_offer_torch_mixed():
    """ssmbench.config's torch-free list of half-matmul forms is the registry's."""
    offered = {
        model
        for model in FAMILIES
        if not verify_backend(model, "torch-mixed", "cpu", "bf16")["unavailable"]
    }
    assert offered == set(MIXED) == {*HALF_MATMULS["torch-mixed"], "hybrid"}


@pytest.mark.parametrize(
    "mixed, torch_form",
    [
        (mamba2.ssd_mixed, mamba2.ssd_chunked),
        (mamba3.mamba3_mixed, mamba3.mamba3_torch),
        (deltanet.delta_rule_mixed, deltanet.delta_rule_torch),
    ],
    ids=lambda f: f.__name__,
)
def test_the_mixed_forms_take_the_torch_backends_arguments(mixed, torch_form):
    def parameters(fn):
        return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]

    assert parameters(mixed) == parameters(torch_form)
