"""The Mamba-1 selective scan against the float64 reference: every chunk size, and
selective_scan_step() token by token, with D, z, delta_bias and a random initial state.

The torch backend runs one form without gradients (blocked_scan) and another under
autograd (chunked_scan, its training form): both are checked, the second with inputs that
require gradients, in checks named ``selective_scan.train.*`` that count for the train
phase (:func:`ssmbench.verify.check_phases`)."""

from __future__ import annotations

import torch

from ssmbench import ops, reference
from ssmbench.models import mamba
from ssmbench.numerics import compare, to_numpy
from ssmbench.verify import SEQUENCE_PHASES, STEP_PHASES, Inputs, PhaseGuard

# (b, t, d, n): the same lengths; d = 13 and n = 5 are not powers of two (mamba_ssm's CUDA
# scan and Triton step take any d and n up to 256, so the fused backend runs them too)
SCAN_SHAPES = ((2, 37, 24, 5), (2, 70, 13, 5))
SCAN_CHUNK_SIZES = (16, 64)
# Backends with a form of their own under autograd: the torch backend trains through
# chunked_scan (chunks of at most chunk_size tokens; at these sizes, exactly that many)
AUTOGRAD_FORMS = ("torch",)


def op_shapes(backend: str) -> list[dict]:
    """The operator shapes :func:`op_checks` runs for ``backend``."""
    return [
        {"op": op, "b": b, "t": t, "d": d, "n": n}
        for b, t, d, n in SCAN_SHAPES
        for op in ("selective_scan", "selective_scan_step")
    ]


def op_checks(
    backend: str, inputs: Inputs, dtype: str, guard: PhaseGuard | None = None
) -> tuple[list, list]:
    guard = guard or PhaseGuard()
    checks, shapes = [], []
    chunk_sizes = SCAN_CHUNK_SIZES if backend == "torch" else (None,)
    for b, t, d, n in SCAN_SHAPES:
        drawn = mamba.random_inputs(inputs, b, t, d, n)
        h0 = drawn.pop("initial_state")
        u, delta, A, B, C = (drawn.pop(name) for name in ("u", "delta", "A", "B", "C"))
        D, z, delta_bias = drawn["D"], drawn["z"], drawn["delta_bias"]
        args = (u, delta, A, B, C)
        kwargs = {**drawn, "delta_softplus": True}
        ref_y, ref_h = reference.selective_scan(
            *(to_numpy(x) for x in args),
            **{key: to_numpy(x) if torch.is_tensor(x) else x for key, x in kwargs.items()},
            initial_state=to_numpy(h0),
        )

        with guard(*SEQUENCE_PHASES):  # mamba_ssm's CUDA extension, where it is built
            for chunk_size in chunk_sizes:
                label = f"b{b}-t{t}-d{d}-n{n}" + (f"-c{chunk_size}" if chunk_size else "")
                shapes.append(
                    {"op": "selective_scan", "b": b, "t": t, "d": d, "n": n}
                    | {"chunk_size": chunk_size}
                )
                y, h = ops.selective_scan(
                    *args, **kwargs, initial_state=h0, backend=backend, chunk_size=chunk_size or 64
                )
                checks.append(compare(f"selective_scan.y[{label}]", ref_y, y, dtype))
                checks.append(compare(f"selective_scan.final_state[{label}]", ref_h, h, dtype))
                if backend in AUTOGRAD_FORMS:
                    leaves = [v.detach().requires_grad_(True) for v in (*args, h0)]
                    with torch.enable_grad():
                        y, h = ops.selective_scan(
                            *leaves[:5],
                            **kwargs,
                            initial_state=leaves[5],
                            backend=backend,
                            chunk_size=chunk_size or 64,
                        )
                    checks.append(compare(f"selective_scan.train.y[{label}]", ref_y, y, dtype))
                    name = f"selective_scan.train.final_state[{label}]"
                    checks.append(compare(name, ref_h, h, dtype))

        label = f"b{b}-t{t}-d{d}-n{n}"
        with guard(*STEP_PHASES):  # Triton: runs without the CUDA extension
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
            shapes.append({"op": "selective_scan_step", "b": b, "t": t, "d": d, "n": n})
            ys = torch.stack(ys, 1)
            checks.append(compare(f"selective_scan_step.y[{label}]", ref_y, ys, dtype))
            checks.append(compare(f"selective_scan_step.final_state[{label}]", ref_h, state, dtype))
    return checks, shapes
