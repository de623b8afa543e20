"""The hybrid has no operator of its own: check both of its parts' operators (the block
check in :mod:`ssmbench.verify` then covers them stacked, caches included), each with the
backend it runs in the hybrid (:func:`ssmbench.models.hybrid.attention_backend`)."""

from __future__ import annotations

from ssmbench.models.hybrid import attention_backend
from ssmbench.verify import Inputs, PhaseGuard, attention, mamba2


def op_shapes(backend: str) -> list[dict]:
    """The operator shapes :func:`op_checks` runs for ``backend``: both parts'."""
    return attention.op_shapes(attention_backend(backend)) + mamba2.op_shapes(backend)


def op_checks(
    backend: str, inputs: Inputs, dtype: str, guard: PhaseGuard | None = None
) -> tuple[list, list]:
    guard = guard or PhaseGuard()
    checks, shapes = [], []
    for part, part_backend in ((attention, attention_backend(backend)), (mamba2, backend)):
        part_checks, part_shapes = part.op_checks(part_backend, inputs, dtype, guard)
        checks += part_checks
        shapes += part_shapes
    return checks, shapes
