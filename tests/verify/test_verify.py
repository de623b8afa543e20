"""Verification: every family and backend passes against the float64 reference, the tolerance row
each is judged by, and the inputs a seed draws.
"""

from __future__ import annotations

import json

import pytest
import torch

from ssmbench.models import BACKENDS, FAMILIES
from ssmbench.verify import verify_backend


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
    "name, phases",
    [
        ("selective_scan.y[b2-t37-d24-n5-c16]", ("prefill", "train")),
        ("selective_scan.train.y[b2-t37-d24-n5-c16]", ("train",)),
        ("selective_scan_step.y[b2-t37-d24-n5]", ("decode",)),
        ("block.step_vs_forward.y[mamba-b2]", ("prefill", "decode", "train")),
        ("block.step_vs_torch_forward.y[mamba-b2]", ("decode",)),
    ],
    ids=["sequence", "autograd-form", "step", "block", "block-vs-torch"],
)
def test_check_phases_from_the_name(name, phases):
    from ssmbench.verify import check_phases

    assert check_phases(name) == phases


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp64"])
def test_mamba_torch_verifies_its_training_form(dtype):
    """Mamba-1's torch backend trains through a form of its own (chunked_scan): its
    outputs and final states are checked, with inputs that require gradients, at every
    shape and chunk size, and count for the train phase only."""
    result = verify_backend("mamba", "torch", dtype=dtype, seed=11)
    train = [c for c in result["checks"] if c["name"].startswith("selective_scan.train.")]
    assert len(train) == 8  # y and final state, 2 shapes, 2 chunk sizes
    assert all(check["ok"] and check["phases"] == ["train"] for check in train)
    assert result["passed"]


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
# random_inputs: the tolerances were set on these numbers.  Mamba-3's were recorded again
# when its A became one value per token and head (b, t, h) instead of per head (h,)
VERIFY_DRAWS = {
    ("fp32", "attention"): (6, "e3921cbd247ee90e"),
    ("fp32", "mamba"): (18, "ed43be0cd289a256"),
    ("fp32", "s4d"): (27, "4687aa7b69113ef7"),
    ("fp32", "mamba2"): (14, "8360a6d253754069"),
    ("fp32", "mamba3"): (24, "f65d7402c764bc54"),
    ("fp32", "deltanet"): (12, "1bab2a4b3cad63c9"),
    ("fp32", "hybrid"): (20, "8ccce57620b7390a"),
    ("bf16", "attention"): (6, "b6b8d1a4be5a40af"),
    ("bf16", "mamba"): (18, "67add1f17d105ff8"),
    ("bf16", "s4d"): (27, "155eaf500c7853d3"),
    ("bf16", "mamba2"): (14, "3b5e32060b95e352"),
    ("bf16", "mamba3"): (24, "ffe43a924adc61ca"),
    ("bf16", "deltanet"): (12, "40e12399d2b1f157"),
    ("bf16", "hybrid"): (20, "32f51acce8ab3c27"),
}


@pytest.mark.parametrize(
    "dtype, model", sorted(VERIFY_DRAWS), ids=[f"{d}-{m}" for d, m in sorted(VERIFY_DRAWS)]
)
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
