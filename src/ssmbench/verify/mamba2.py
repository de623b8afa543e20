"""Mamba-2's SSD against the float64 reference: every chunk size (lengths that no chunk
divides, several chunks), and ssd_step() token by token, with D, groups of B and C
shared by several heads, and a random initial state.

The inputs are :func:`ssmbench.models.mamba2.random_inputs`: B and C with variance 1 / n,
so that C . B is O(1) and so are the outputs, the premise of the tolerance table."""

from __future__ import annotations

import torch

from ssmbench import ops, reference
from ssmbench.models import mamba2
from ssmbench.numerics import compare, to_numpy
from ssmbench.verify import CHUNKED, SEQUENCE_PHASES, STEP_PHASES, Inputs, PhaseGuard

# (b, t, h, p, g, n): t = 37 and 70 are not multiples of 16 or 64; p = 17 and n = 5 are
# odd; the first shape has two heads per group
SSD_SHAPES = ((2, 37, 4, 12, 2, 5), (2, 70, 3, 17, 1, 16))
SSD_CHUNK_SIZES = (16, 64)


def op_shapes(backend: str) -> list[dict]:
    """The operator shapes :func:`op_checks` runs for ``backend`` (mamba_ssm's SSD kernels
    mask every axis, so the fused backend runs the awkward shapes too)."""
    return [
        {"op": op, "b": b, "t": t, "h": h, "p": p, "g": g, "n": n}
        for b, t, h, p, g, n in SSD_SHAPES
        for op in ("ssd", "ssd_step")
    ]


def op_checks(
    backend: str, inputs: Inputs, dtype: str, guard: PhaseGuard | None = None
) -> tuple[list, list]:
    guard = guard or PhaseGuard()
    checks, shapes = [], []
    chunk_sizes = SSD_CHUNK_SIZES if backend in CHUNKED else (None,)
    for b, t, h, p, g, n in SSD_SHAPES:
        drawn = mamba2.random_inputs(inputs, b, t, h, p, g, n)
        x, dt, A, B, C, D, h0 = drawn.values()
        ref_y, ref_h = reference.ssd(
            *(to_numpy(v) for v in (x, dt, A, B, C, D)), initial_state=to_numpy(h0)
        )

        shape = {"op": "ssd", "b": b, "t": t, "h": h, "p": p, "g": g, "n": n}
        with guard(*SEQUENCE_PHASES):
            for chunk_size in chunk_sizes:
                label = f"b{b}-t{t}-h{h}-p{p}-g{g}-n{n}" + (f"-c{chunk_size}" if chunk_size else "")
                shapes.append({**shape, "chunk_size": chunk_size})
                y, state = ops.ssd(
                    x,
                    dt,
                    A,
                    B,
                    C,
                    D,
                    chunk_size=chunk_size or 64,
                    initial_state=h0,
                    backend=backend,
                )
                checks.append(compare(f"ssd.y[{label}]", ref_y, y, dtype))
                checks.append(compare(f"ssd.final_state[{label}]", ref_h, state, dtype))

        label = f"b{b}-t{t}-h{h}-p{p}-g{g}-n{n}"
        with guard(*STEP_PHASES):
            state, ys = h0, []
            for i in range(t):
                y_t, state = ops.ssd_step(
                    x[:, i], dt[:, i], A, B[:, i], C[:, i], D, state=state, backend=backend
                )
                ys.append(y_t)
            shapes.append({**shape, "op": "ssd_step"})
            checks.append(compare(f"ssd_step.y[{label}]", ref_y, torch.stack(ys, 1), dtype))
            checks.append(compare(f"ssd_step.final_state[{label}]", ref_h, state, dtype))
    return checks, shapes
