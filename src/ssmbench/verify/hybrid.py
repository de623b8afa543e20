"""The hybrid has no operator of its own: check both of its parts' operators (the block
check in :mod:`ssmbench.verify` then covers them stacked, caches included)."""

from __future__ import annotations

from ssmbench.verify import Inputs, PhaseGuard, attention, mamba2


def op_shapes(backend: str) -> list[dict]:
    """The operator shapes :func:`op_checks` runs for ``backend``: both parts'."""
    return attention.op_shapes(backend) + mamba2.op_shapes(backend)


def op_checks(
    backend: str, inputs: Inputs, dtype: str, guard: PhaseGuard | None = None
) -> tuple[list, list]:
    guard = guard or PhaseGuard()
    checks, shapes = [], []
    for part in (attention, mamba2):
        part_checks, part_shapes = part.op_checks(backend, inputs, dtype, guard)
        checks += part_checks
        shapes += part_shapes
    return checks, shapes
