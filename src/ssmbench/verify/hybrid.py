"""The hybrid has no operator of its own: check both of its parts' operators (the block
check in :mod:`ssmbench.verify` then covers them stacked, caches included)."""

from __future__ import annotations

from ssmbench.verify import Inputs, attention, mamba2


def op_checks(backend: str, inputs: Inputs, dtype: str) -> tuple[list, list]:
    checks, shapes = [], []
    for part in (attention, mamba2):
        part_checks, part_shapes = part.op_checks(backend, inputs, dtype)
        checks += part_checks
        shapes += part_shapes
    return checks, shapes
