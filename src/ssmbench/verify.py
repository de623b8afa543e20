"""Correctness before timing: one (model, backend) against the NumPy float64 reference.

:func:`verify_backend` runs the operator of a model family on small random inputs with
awkward shapes (lengths that are not chunk multiples, non-power-of-two widths, a random
initial state), on the run's device and dtype, and compares every output and final
state with :func:`ssmbench.numerics.compare`.  It also checks the block: a small model
built with the backend must give the same outputs and caches when decoded one token at
a time with ``step`` as its ``forward`` over the whole sequence.

Inputs are drawn in float32 on the CPU from ``seed`` (the same numbers on every device),
rounded to the dtype under test and moved to the device; the reference sees the rounded
inputs, so only the arithmetic is judged, under that dtype's tolerance.
"""

from __future__ import annotations

import torch

from ssmbench import ops, reference
from ssmbench.config import Size
from ssmbench.models import DTYPES, build_model
from ssmbench.numerics import compare, to_numpy

# (b, t, h, d): t = 37 and 70 are not multiples of 16 or 64, d = 17 is odd
ATTENTION_SHAPES = ((2, 37, 3, 24), (2, 70, 3, 17))
# (b, t, d, n): the same lengths; d = 13 and n = 5 are not powers of two
SCAN_SHAPES = ((2, 37, 24, 5), (2, 70, 13, 5))
SCAN_CHUNK_SIZES = (16, 64)
# the block check: a two-layer model of awkward width, decoded for BLOCK_T tokens
BLOCK_SIZE = Size(d_model=40, n_layers=2, n_heads=3, head_dim=12, expand=2, d_conv=4, chunk=16)
BLOCK_D_STATE = 5
BLOCK_T = 37


class _Inputs:
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


def _check_attention(backend: str, inputs: _Inputs, dtype: str) -> tuple[list, list]:
    checks, shapes = [], []
    for b, t, h, d in ATTENTION_SHAPES:
        label = f"b{b}-t{t}-h{h}-d{d}"
        shapes.append({"op": "attention", "b": b, "t": t, "h": h, "d": d})
        q, k, v = (inputs.randn(b, t, h, d) for _ in range(3))
        for causal in (True, False):
            ref = reference.attention(to_numpy(q), to_numpy(k), to_numpy(v), causal=causal)
            out = ops.attention(q, k, v, causal=causal, backend=backend)
            checks.append(compare(f"attention.y[{label}-causal={causal}]", ref, out, dtype))

        ref = reference.attention(to_numpy(q), to_numpy(k), to_numpy(v), causal=True)
        cache, ys = None, []
        for i in range(t):
            y_t, cache = ops.attention_step(q[:, i], k[:, i], v[:, i], cache, backend=backend)
            ys.append(y_t)
        checks.append(compare(f"attention_step.y[{label}]", ref, torch.stack(ys, 1), dtype))
    return checks, shapes


def _check_selective_scan(backend: str, inputs: _Inputs, dtype: str) -> tuple[list, list]:
    checks, shapes = [], []
    chunk_sizes = SCAN_CHUNK_SIZES if backend == "torch" else (None,)
    for b, t, d, n in SCAN_SHAPES:
        u, delta, z = inputs.randn(b, t, d), inputs.randn(b, t, d, scale=0.5), inputs.randn(b, t, d)
        A = -inputs.rand(d, n, low=0.5, high=2.0)
        B, C = inputs.randn(b, t, n), inputs.randn(b, t, n)
        D, delta_bias = inputs.randn(d), inputs.randn(d, scale=0.5)
        h0 = inputs.randn(b, d, n)
        args = (u, delta, A, B, C)
        kwargs = {"D": D, "z": z, "delta_bias": delta_bias, "delta_softplus": True}
        ref_y, ref_h = reference.selective_scan(
            *(to_numpy(x) for x in args),
            **{key: to_numpy(x) if torch.is_tensor(x) else x for key, x in kwargs.items()},
            initial_state=to_numpy(h0),
        )

        for chunk_size in chunk_sizes:
            label = f"b{b}-t{t}-d{d}-n{n}" + (f"-c{chunk_size}" if chunk_size else "")
            shapes.append(
                {"op": "selective_scan", "b": b, "t": t, "d": d, "n": n, "chunk_size": chunk_size}
            )
            y, h = ops.selective_scan(
                *args, **kwargs, initial_state=h0, backend=backend, chunk_size=chunk_size or 64
            )
            checks.append(compare(f"selective_scan.y[{label}]", ref_y, y, dtype))
            checks.append(compare(f"selective_scan.final_state[{label}]", ref_h, h, dtype))

        label = f"b{b}-t{t}-d{d}-n{n}"
        state, ys = h0, []
        for i in range(t):
            token = (u[:, i], delta[:, i], A, B[:, i], C[:, i])
            y_t, state = ops.selective_scan_step(
                *token,
                D=D,
                z=z[:, i],
                delta_bias=delta_bias,
                delta_softplus=True,
                state=state,
                backend=backend,
            )
            ys.append(y_t)
        checks.append(compare(f"selective_scan_step.y[{label}]", ref_y, torch.stack(ys, 1), dtype))
        checks.append(compare(f"selective_scan_step.final_state[{label}]", ref_h, state, dtype))
    return checks, shapes


def _check_block(
    model: str, backend: str, inputs: _Inputs, dtype: str, seed: int
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
            tolerance is that dtype's row of :data:`ssmbench.numerics.TOLERANCES`.
        seed: draws the inputs and the block's weights.

    Returns:
        A JSON-serialisable dict: model, backend, device, dtype, seed, ``passed``
        (every check ok), ``checks`` (one :meth:`Comparison.as_dict` each) and
        ``shapes`` (the shapes run).
    """
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {list(DTYPES)}")
    inputs = _Inputs(seed, torch.device(device), DTYPES[dtype])
    checks, shapes = _check_block(model, backend, inputs, dtype, seed)  # validates names
    if model == "attention":
        op_checks, op_shapes = _check_attention(backend, inputs, dtype)
    else:
        op_checks, op_shapes = _check_selective_scan(backend, inputs, dtype)
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
