"""Correctness before timing: one (model, backend) against the NumPy float64 reference.

:func:`verify_backend` runs the operator of a model family on small random inputs with
awkward shapes (lengths that are not chunk multiples, non-power-of-two widths, a random
initial state), on the run's device and dtype, and compares every output and final
state with :func:`ssmbench.numerics.compare`.  It also checks the block: a small model
built with the backend must give the same outputs and caches when decoded one token at
a time with ``step`` as its ``forward`` over the whole sequence.

The operator checks of a family live in ``ssmbench.verify.<family>`` as
``op_checks(backend, inputs, dtype) -> (checks, shapes)``; this module finds them by name.

Inputs are drawn in float32 on the CPU from ``seed`` (the same numbers on every device),
rounded to the dtype under test and moved to the device; the reference sees the rounded
inputs, so only the arithmetic is judged, under that dtype's tolerance.
"""

from __future__ import annotations

import importlib

import torch

from ssmbench.config import Size
from ssmbench.models import DTYPES, build_model
from ssmbench.numerics import compare

# Backends whose kernels are Triton or CUDA code of their own (mamba_ssm, fla, FlashAttention)
FUSED = ("fused", "fused-graph")


def tolerance_row(dtype: str, backend: str, device: str | torch.device) -> str:
    """The row of :data:`ssmbench.numerics.TOLERANCES` a check is judged by: the dtype's,
    except fp32 through a fused backend on CUDA, judged as "tf32": Triton's ``tl.dot`` takes
    fp32 operands in TF32 on tensor cores unless a kernel asks for IEEE products, and the
    benchmark times the kernels as they ship.  (PyTorch's own fp32 matmuls stay IEEE:
    ``torch.backends.cuda.matmul.allow_tf32`` is False by default.)  The Triton
    interpreter on CPU computes in true fp32, so CPU checks keep the fp32 row."""
    if dtype == "fp32" and backend in FUSED and torch.device(device).type == "cuda":
        return "tf32"
    return dtype


# the block check: a two-layer model of awkward width, decoded for BLOCK_T tokens
BLOCK_SIZE = Size(d_model=40, n_layers=2, n_heads=3, head_dim=16, expand=2, d_conv=4, chunk=16)
BLOCK_D_STATE = 5
BLOCK_T = 37


class Inputs:
    """Seeded random tensors: drawn in float32 on the CPU, then cast and moved."""

    def __init__(self, seed: int, device: torch.device, dtype: torch.dtype):
        self.generator = torch.Generator().manual_seed(seed)
        self.device = device
        self.dtype = dtype

    def randn(self, *shape: int, scale: float = 1.0) -> torch.Tensor:
        x = torch.randn(*shape, generator=self.generator) * scale
        return x.to(device=self.device, dtype=self.dtype)

    def rand(self, *shape: int, low: float, high: float) -> torch.Tensor:
        x = low + (high - low) * torch.rand(*shape, generator=self.generator)
        return x.to(device=self.device, dtype=self.dtype)


def _check_block(
    model: str, backend: str, inputs: Inputs, dtype: str, seed: int
) -> tuple[list, list]:
    """forward over BLOCK_T tokens == step() token by token, outputs and caches."""
    torch_dtype = inputs.dtype
    net = build_model(
        model, BLOCK_SIZE, BLOCK_D_STATE, backend, inputs.device, torch_dtype, seed=seed
    )
    x = inputs.randn(2, BLOCK_T, BLOCK_SIZE.d_model)
    with torch.no_grad():
        y, caches = net(x)
        step_caches, ys = [None] * BLOCK_SIZE.n_layers, []
        for i in range(BLOCK_T):
            y_t, step_caches = net.step(x[:, i], step_caches)
            ys.append(y_t)
    label = f"{model}-b2-t{BLOCK_T}-D{BLOCK_SIZE.d_model}-L{BLOCK_SIZE.n_layers}"
    checks = [compare(f"block.step_vs_forward.y[{label}]", y, torch.stack(ys, 1), dtype)]
    for layer, (cache, step_cache) in enumerate(zip(caches, step_caches, strict=True)):
        for part, (full, stepped) in enumerate(zip(cache, step_cache, strict=True)):
            name = f"block.step_vs_forward.cache{layer}.{part}[{label}]"
            checks.append(compare(name, full, stepped, dtype))
    shape = {"op": "block", "b": 2, "t": BLOCK_T, "d_state": BLOCK_D_STATE}
    shape.update(vars(BLOCK_SIZE))
    return checks, [shape]


def verify_backend(
    model: str, backend: str, device: str = "cpu", dtype: str = "fp32", seed: int = 0
) -> dict:
    """Check ``backend`` of ``model``'s operator and block against the float64 reference.

    Args:
        model: a family of :data:`ssmbench.models.FAMILIES` ("attention" or "mamba").
        backend: one of :data:`ssmbench.models.BACKENDS`.
        device: where to run ("cpu", "cuda", "cuda:1", ...).
        dtype: "fp32", "fp16", "bf16" or "fp64"; the inputs are made in it and the
            tolerance is that dtype's row of :data:`ssmbench.numerics.TOLERANCES`, or
            "tf32" for fp32 through a fused backend on CUDA (:func:`tolerance_row`).
        seed: draws the inputs and the block's weights.

    Returns:
        A JSON-serialisable dict: model, backend, device, dtype, seed, ``passed``
        (every check ok), ``checks`` (one :meth:`Comparison.as_dict` each) and
        ``shapes`` (the shapes run).
    """
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {list(DTYPES)}")
    inputs = Inputs(seed, torch.device(device), DTYPES[dtype])
    row = tolerance_row(dtype, backend, device)
    checks, shapes = _check_block(model, backend, inputs, row, seed)  # validates names
    family = importlib.import_module(f"ssmbench.verify.{model}")
    op_checks, op_shapes = family.op_checks(backend, inputs, row)
    checks, shapes = op_checks + checks, op_shapes + shapes
    return {
        "model": model,
        "backend": backend,
        "device": str(device),
        "dtype": dtype,
        "seed": seed,
        "passed": all(check.ok for check in checks),
        "checks": [check.as_dict() for check in checks],
        "shapes": shapes,
    }
