"""Attention against the float64 reference: both masks, and step() token by token."""

from __future__ import annotations

import torch

from ssmbench import ops, reference
from ssmbench.models import attention
from ssmbench.models.attention import CONCAT_BACKENDS, kv_buffer
from ssmbench.numerics import compare, to_numpy
from ssmbench.verify import FUSED, SEQUENCE_PHASES, STEP_PHASES, Inputs, PhaseGuard

# (b, t, h, d): t = 37 and 70 are not multiples of 16 or 64, d = 17 is odd
ATTENTION_SHAPES = ((2, 37, 3, 24), (2, 70, 3, 17))
# ... and for the fused backends, head dims FlashAttention-2 runs without padding (multiples
# of 8; neither is a power of two)
ATTENTION_FUSED_SHAPES = ((2, 37, 3, 24), (2, 70, 3, 40))


def op_shapes(backend: str) -> list[dict]:
    """The operator shapes :func:`op_checks` runs for ``backend``."""
    return [
        {"op": op, "b": b, "t": t, "h": h, "d": d}
        for b, t, h, d in (ATTENTION_FUSED_SHAPES if backend in FUSED else ATTENTION_SHAPES)
        for op in ("attention", "attention_step")
    ]


def op_checks(
    backend: str, inputs: Inputs, dtype: str, guard: PhaseGuard | None = None
) -> tuple[list, list]:
    guard = guard or PhaseGuard()
    checks, shapes = [], []
    for b, t, h, d in ATTENTION_FUSED_SHAPES if backend in FUSED else ATTENTION_SHAPES:
        label = f"b{b}-t{t}-h{h}-d{d}"
        shapes.append({"op": "attention", "b": b, "t": t, "h": h, "d": d})
        q, k, v = attention.random_inputs(inputs, b, t, h, d).values()
        with guard(*SEQUENCE_PHASES):
            for causal in (True, False):
                ref = reference.attention(to_numpy(q), to_numpy(k), to_numpy(v), causal=causal)
                out = ops.attention(q, k, v, causal=causal, backend=backend)
                checks.append(compare(f"attention.y[{label}-causal={causal}]", ref, out, dtype))

        ref = reference.attention(to_numpy(q), to_numpy(k), to_numpy(v), causal=True)
        with guard(*STEP_PHASES):
            cache, ys = None, []
            for i in range(t):
                y_t, cache = ops.attention_step(q[:, i], k[:, i], v[:, i], cache, backend=backend)
                ys.append(y_t)
            checks.append(compare(f"attention_step.y[{label}]", ref, torch.stack(ys, 1), dtype))
            if backend not in CONCAT_BACKENDS:  # as a decode cell does: a prefix's cache in a
                # buffer of exactly the tokens to come, each step written in place
                t0 = t // 2
                cache = kv_buffer((k[:, :t0], v[:, :t0]), capacity=t, like=k[:, 0])
                ys = []
                for i in range(t0, t):
                    y_t, cache = ops.attention_step(q[:, i], k[:, i], v[:, i], cache, backend)
                    ys.append(y_t)
                name = f"attention_step.y[{label}-from-a-buffer-of-{t}]"
                checks.append(compare(name, ref[:, t0:], torch.stack(ys, 1), dtype))
    return checks, shapes
