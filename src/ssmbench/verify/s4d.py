"""S4D against the float64 reference: the operator with a random initial state, and
s4d_step() token by token from the same state."""

from __future__ import annotations

import torch

from ssmbench import ops
from ssmbench.models import s4d
from ssmbench.numerics import compare, to_numpy
from ssmbench.reference.s4d import s4d as s4d_reference
from ssmbench.verify import SEQUENCE_PHASES, STEP_PHASES, Inputs, PhaseGuard

# (b, t, h, n): T = 1, and lengths whose T + 1 is not a square (the FFT form's last block
# of powers is partial); h = 13 and n = 5 not powers of two
S4D_SHAPES = ((1, 1, 4, 3), (2, 37, 24, 5), (2, 70, 13, 5))


def op_shapes(backend: str) -> list[dict]:
    """The operator shapes :func:`op_checks` runs for ``backend`` (S4D has no fused
    kernel: its fused backend is unavailable whatever the shape)."""
    return [
        {"op": op, "b": b, "t": t, "h": h, "n": n}
        for b, t, h, n in S4D_SHAPES
        for op in ("s4d", "s4d_step")
    ]


def op_checks(
    backend: str, inputs: Inputs, dtype: str, guard: PhaseGuard | None = None
) -> tuple[list, list]:
    guard = guard or PhaseGuard()
    checks, shapes = [], []
    for b, t, h, n in S4D_SHAPES:
        drawn = s4d.random_inputs(inputs, b, t, h, n)
        u, log_dt, A, C, D, h0 = drawn.values()
        ref_y, ref_h = s4d_reference(*(to_numpy(x) for x in (u, log_dt, A, C, D, h0)))

        label = f"b{b}-t{t}-h{h}-n{n}"
        shapes.append({"op": "s4d", "b": b, "t": t, "h": h, "n": n})
        with guard(*SEQUENCE_PHASES):
            y, state = ops.s4d(u, log_dt, A, C, D, initial_state=h0, backend=backend)
            checks.append(compare(f"s4d.y[{label}]", ref_y, y, dtype))
            checks.append(compare(f"s4d.final_state[{label}]", ref_h, state, dtype))

        with guard(*STEP_PHASES):
            state, ys = h0, []
            for i in range(t):
                y_t, state = ops.s4d_step(u[:, i], log_dt, A, C, D, state=state, backend=backend)
                ys.append(y_t)
            checks.append(compare(f"s4d_step.y[{label}]", ref_y, torch.stack(ys, 1), dtype))
            checks.append(compare(f"s4d_step.final_state[{label}]", ref_h, state, dtype))
    return checks, shapes
