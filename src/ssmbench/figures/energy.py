"""Energy per token against T, laid out as the utilization figures."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ssmbench.figures.data import joined
from ssmbench.figures.panels import plt
from ssmbench.figures.utilization import metric_by_phase


def _energy_empty(rows: pd.DataFrame) -> str:
    reasons = sorted({r for r in rows.energy_reason if r})
    if not reasons:
        return "energy not measured here (no energy_j_per_token and no energy_reason recorded)"
    return "energy not measured here: " + "; ".join(reasons)


def energy_per_token(
    cells: pd.DataFrame,
    phase: str | Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    batch: int | Sequence[int] | None = None,
    dtype: str | Sequence[str] | None = None,
) -> plt.Figure:
    """Joules per token (``energy_j_per_token``) against T, log-log, a line per (model,
    backend), a panel per phase.  Where no cell has energy, one panel quotes why
    (``energy_reason``, e.g. "/sys/class/powercap not present")."""
    return metric_by_phase(
        cells,
        column="energy_j_per_token",
        name="Energy per token",
        ylabel="energy per token (J)",
        why_empty=_energy_empty,
        extra=lambda d: (
            f"energy method {joined(d, 'energy_method')}" if joined(d, "energy_method") else ""
        ),
        phase=phase,
        models=models,
        backends=backends,
        batch=batch,
        dtype=dtype,
    )
