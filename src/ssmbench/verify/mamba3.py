"""The Mamba-3 SISO operator against the float64 reference: every chunk size, mamba3_step()
token by token, y and all four parts of the state, from a random initial state, with A
per token and head; and the lam = 1, theta = 0 limit against Mamba-2's SSD reference, whose
A is one value per head: there the Mamba-3 operator gets that A repeated at every token."""

from __future__ import annotations

import torch

from ssmbench import ops
from ssmbench.models import mamba3
from ssmbench.numerics import compare, to_numpy
from ssmbench.reference import ssd as reference_ssd
from ssmbench.reference.mamba3 import Mamba3State
from ssmbench.reference.mamba3 import mamba3 as reference_mamba3
from ssmbench.verify import (
    CHUNKED,
    FUSED,
    SEQUENCE_PHASES,
    STEP_PHASES,
    Inputs,
    PhaseGuard,
    compare_phase,
)

# (b, t, h, g, p, n, r): lengths that are no chunk multiple; p = 7, n = 5 (odd: the last
# state channel is not rotated) and r < n / 2 (a partial rotation) are awkward on purpose
MAMBA3_SHAPES = ((2, 37, 4, 2, 8, 6, 3), (2, 70, 3, 1, 7, 5, 1))
# ... and for the fused backends, what mamba_ssm's kernels take
# (ssmbench.models.mamba3.mamba3_shape_reason): p and n powers of two, r even and <= n / 2;
# still lengths no chunk divides, partial rotations (r < n / 2) and shared B, C groups.  One
# (p, n) for both, that of FUSED_BLOCK_SIZE: the chunked kernel autotunes 27 configs per
# (chunk, p, n, flags), so every other (p, n) would cost a verify job another round
MAMBA3_FUSED_SHAPES = ((2, 37, 4, 2, 16, 16, 4), (2, 70, 3, 1, 16, 16, 2))
MAMBA3_CHUNK_SIZES = (16, 64)


def op_shapes(backend: str) -> list[dict]:
    """The operator shapes :func:`op_checks` runs for ``backend``."""
    shapes = MAMBA3_FUSED_SHAPES if backend in FUSED else MAMBA3_SHAPES
    return [
        {"op": op, "b": b, "t": t, "h": h, "g": g, "p": p, "n": n, "r": r}
        for b, t, h, g, p, n, r in shapes
        for op in ("mamba3", "mamba3_step", "mamba3_as_ssd")
    ]


def _compare_state(name: str, ref: Mamba3State, out: Mamba3State, dtype: str) -> list:
    """Every part of the state; the phase modulo 2 pi (mamba_ssm reduces it)."""
    return [
        (compare_phase if field == "phase" else compare)(
            f"{name}.{field}", ref_part, out_part, dtype
        )
        for field, ref_part, out_part in zip(Mamba3State._fields, ref, out, strict=True)
    ]


def op_checks(
    backend: str, inputs: Inputs, dtype: str, guard: PhaseGuard | None = None
) -> tuple[list, list]:
    guard = guard or PhaseGuard()
    checks, shapes = [], []
    chunk_sizes = MAMBA3_CHUNK_SIZES if backend in CHUNKED else (None,)
    for b, t, h, g, p, n, r in MAMBA3_FUSED_SHAPES if backend in FUSED else MAMBA3_SHAPES:
        drawn = mamba3.random_inputs(inputs, b, t, h, g, p, n, r)
        D, h0 = drawn.pop("D"), drawn.pop("initial_state")
        args = tuple(drawn.values())  # (x, dt, A, B, C, theta, lam)
        ref_y, ref_state = reference_mamba3(
            *map(to_numpy, args), D=to_numpy(D), initial_state=tuple(map(to_numpy, h0))
        )
        size = {"b": b, "t": t, "h": h, "g": g, "p": p, "n": n, "r": r}
        label = f"b{b}-t{t}-h{h}-g{g}-p{p}-n{n}-r{r}"

        with guard(*SEQUENCE_PHASES):
            for chunk_size in chunk_sizes:
                name = f"mamba3.{{}}[{label}" + (f"-c{chunk_size}]" if chunk_size else "]")
                shapes.append({"op": "mamba3", **size, "chunk_size": chunk_size})
                y, state = ops.mamba3(
                    *args, D=D, chunk_size=chunk_size or 64, initial_state=h0, backend=backend
                )
                checks.append(compare(name.format("y"), ref_y, y, dtype))
                checks += _compare_state(name.format("final_state"), ref_state, state, dtype)

        x, dt, A, B, C, theta, lam = args
        with guard(*STEP_PHASES):
            state, ys = h0, []
            for i in range(t):
                token = (x[:, i], dt[:, i], A[:, i], B[:, i], C[:, i], theta[:, i], lam[:, i])
                y_t, state = ops.mamba3_step(*token, D=D, state=state, backend=backend)
                ys.append(y_t)
            shapes.append({"op": "mamba3_step", **size})
            name = f"mamba3_step.{{}}[{label}]"
            checks.append(compare(name.format("y"), ref_y, torch.stack(ys, 1), dtype))
            checks += _compare_state(name.format("final_state"), ref_state, state, dtype)

        # lam = 1, theta = 0 and A the same at every token (SSD's A is one per head, the
        # first token's here): exponential Euler, no rotation, i.e. Mamba-2's SSD
        with guard(*SEQUENCE_PHASES):
            A_head = A[0, 0]  # (h)
            ssd_y, ssd_state = reference_ssd(
                *map(to_numpy, (x, dt, A_head, B, C)),
                D=to_numpy(D),
                initial_state=to_numpy(h0.ssm),
            )
            no_rotation, euler = torch.zeros_like(theta), torch.ones_like(lam)
            A_const = A_head.expand_as(dt)  # (b t h)
            y, state = ops.mamba3(
                x,
                dt,
                A_const,
                B,
                C,
                no_rotation,
                euler,
                D=D,
                initial_state=h0.ssm,
                backend=backend,
            )
            shapes.append({"op": "mamba3_as_ssd", **size})
            checks.append(compare(f"mamba3_as_ssd.y[{label}]", ssd_y, y, dtype))
            checks.append(
                compare(f"mamba3_as_ssd.final_state[{label}]", ssd_state, state.ssm, dtype)
            )
    return checks, shapes
