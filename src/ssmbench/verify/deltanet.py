"""The (gated) delta rule against the float64 reference: gated and plain, every chunk size,
and delta_rule_step() token by token, with a random initial state.

Queries and keys are L2-normalized, as the block feeds them: with unit keys and beta in
(0, 1) every step contracts the state, so errors do not grow along the sequence, and unit
queries keep the outputs O(1), the premise of the tolerance table (the block's further
1 / sqrt(d_k) on q is left out, which would shrink them below atol).  With queries of
norm sqrt(d_k) a plain DeltaNet's outputs reach 19, and a pipeline of bf16 matmuls (fla's
kernels and torch-mixed round the scores and the new values to bf16) misses atol on the
outputs whose terms cancel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ssmbench import ops
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
        q, k, v = inputs.randn(b, t, h, dk), inputs.randn(b, t, h, dk), inputs.randn(b, t, h, dv)
        q, k = (F.normalize(x.float(), dim=-1).to(x.dtype) for x in (q, k))  # (b t h k)
        beta = inputs.rand(b, t, h, low=0.05, high=0.95)
        log_decay = -inputs.rand(b, t, h, low=0.0, high=0.5)
        state0 = inputs.randn(b, h, dk, dv)
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
