"""The (gated) delta rule against the float64 reference: gated and plain, every chunk size,
and delta_rule_step() token by token, with a random initial state.

The inputs are :func:`ssmbench.models.deltanet.random_inputs`: queries and keys
L2-normalized, as the block feeds them, which keeps the errors from growing along the
sequence and the outputs O(1), the premise of the tolerance table.
"""

from __future__ import annotations

import torch

from ssmbench import ops
from ssmbench.models import deltanet
from ssmbench.numerics import compare, to_numpy
from ssmbench.reference.deltanet import delta_rule as reference_delta_rule
from ssmbench.verify import CHUNKED, SEQUENCE_PHASES, STEP_PHASES, Inputs, PhaseGuard

# (b, t, h, k, v): t = 37 and 70 are not multiples of 16 or 64; k = 17, v = 13 are odd
DELTA_RULE_SHAPES = ((2, 37, 3, 24, 24), (2, 70, 3, 17, 13))
DELTA_RULE_CHUNK_SIZES = (16, 64)


def op_shapes(backend: str) -> list[dict]:
    """The operator shapes :func:`op_checks` runs for ``backend`` (fla's kernels mask the
    key and value widths, so the fused backend runs the awkward shapes too)."""
    return [
        {"op": op, "b": b, "t": t, "h": h, "k": dk, "v": dv}
        for b, t, h, dk, dv in DELTA_RULE_SHAPES
        for op in ("delta_rule", "delta_rule_step")
    ]


def op_checks(
    backend: str, inputs: Inputs, dtype: str, guard: PhaseGuard | None = None
) -> tuple[list, list]:
    guard = guard or PhaseGuard()
    checks, shapes = [], []
    chunk_sizes = DELTA_RULE_CHUNK_SIZES if backend in CHUNKED else (None,)
    for b, t, h, dk, dv in DELTA_RULE_SHAPES:
        drawn = deltanet.random_inputs(inputs, b, t, h, dk, dv)
        q, k, v, beta, log_decay, state0 = drawn.values()
        for g in (log_decay, None):
            gate = "gated" if g is not None else "plain"
            ref_o, ref_state = reference_delta_rule(
                *(to_numpy(x) for x in (q, k, v, beta)),
                g=None if g is None else to_numpy(g),
                initial_state=to_numpy(state0),
            )
            with guard(*SEQUENCE_PHASES):
                for chunk_size in chunk_sizes:
                    label = f"b{b}-t{t}-h{h}-k{dk}-v{dv}-{gate}"
                    label += f"-c{chunk_size}" if chunk_size else ""
                    shape = {"op": "delta_rule", "b": b, "t": t, "h": h, "k": dk, "v": dv}
                    shape.update(gated=g is not None, chunk_size=chunk_size)
                    shapes.append(shape)
                    o, state = ops.delta_rule(
                        q,
                        k,
                        v,
                        beta,
                        g=g,
                        chunk_size=chunk_size or 64,
                        initial_state=state0,
                        backend=backend,
                    )
                    checks.append(compare(f"delta_rule.o[{label}]", ref_o, o, dtype))
                    checks.append(
                        compare(f"delta_rule.final_state[{label}]", ref_state, state, dtype)
                    )

            label = f"b{b}-t{t}-h{h}-k{dk}-v{dv}-{gate}"
            with guard(*STEP_PHASES):
                state, outputs = state0, []
                for i in range(t):
                    g_i = None if g is None else g[:, i]
                    o_i, state = ops.delta_rule_step(
                        q[:, i], k[:, i], v[:, i], beta[:, i], g=g_i, state=state, backend=backend
                    )
                    outputs.append(o_i)
                o = torch.stack(outputs, 1)  # (b t h v)
                checks.append(compare(f"delta_rule_step.o[{label}]", ref_o, o, dtype))
                checks.append(
                    compare(f"delta_rule_step.final_state[{label}]", ref_state, state, dtype)
                )
    return checks, shapes
