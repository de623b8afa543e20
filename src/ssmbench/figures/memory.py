"""Memory footprint: weights, state or KV cache and activations, stacked, against T."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from ssmbench.figures import panels as P
from ssmbench.figures.data import (
    as_list,
    byte_unit,
    cells_of,
    families,
    none_found,
    not_ok_note,
    one_setting,
)
from ssmbench.figures.panels import plt
from ssmbench.figures.style import MEMORY_PARTS, color
from ssmbench.tables import family_of


def _backend(data: pd.DataFrame, backends) -> str:
    """The first of ``backends`` the table has; by default ``torch``, else the most common."""
    choices = as_list(backends) or ["torch"]
    present = [b for b in choices if b in set(data.backend)]
    if present:
        return present[0]
    if as_list(backends) is None and not data.empty:
        counts = data.backend.value_counts()
        return sorted(counts.index[counts == counts.max()])[0]
    return choices[0]


def memory_footprint(
    cells: pd.DataFrame,
    phase: str = "prefill",
    models: Sequence[str] | None = None,
    backends: str | Sequence[str] | None = None,
    batch: int | None = None,
    dtype: str | None = None,
) -> plt.Figure:
    """Stacked bars of weights, state or KV cache and activations (MiB or GiB) against T, one
    panel per family, for one phase and one backend (the first of ``backends`` the table
    has; by default ``torch``, else the most common); a black dash marks the measured peak.
    The batch is ``batch`` or the smallest, the dtype ``dtype`` or the most common.  Cells
    that did not run (an ``oom``) are labelled markers at the foot of their bar."""
    wanted = dict(phase=phase, model=models)
    data = cells_of(cells, **wanted)
    backend = _backend(data, backends)
    data = one_setting(data[data.backend == backend], batch, dtype)
    name = f"Memory footprint, {phase}, backend {backend}"
    if data.empty:
        message = none_found("cells", **wanted, backend=backend, batch=batch, dtype=dtype)
        return P.empty_figure(name, message, cells)
    parts = [p for p, *_ in MEMORY_PARTS]
    divisor, unit = byte_unit(pd.concat([data[c] for c in parts + ["peak_bytes"]]))
    models_here = families(data)
    fig, axes = P.grid(len(models_here), sharey=True)
    for ax, model in zip(axes, models_here, strict=True):
        panel = data[data.model == model]
        shade = color(family_of(panel).iloc[0])  # a zoo or imported model by its family
        ax.set_title(model, color=shade, fontsize=10)
        lengths = sorted(set(panel.seq_len))
        where = {t: i for i, t in enumerate(lengths)}
        ok = panel[panel.status == "ok"].sort_values("seq_len")
        if not ok[parts + ["peak_bytes"]].notna().any(axis=1).any():
            P.missing(ax, "no memory recorded for the ok cells here" + not_ok_note(panel))
            continue
        pos = ok.seq_len.map(where).to_numpy(dtype=float)
        bottom = np.zeros(len(ok))
        for col, _, hatch, alpha in MEMORY_PARTS:
            height = (ok[col] / divisor).fillna(0.0).to_numpy()
            ax.bar(
                pos,
                height,
                bottom=bottom,
                width=0.7,
                color=shade,
                alpha=alpha,
                hatch=hatch,
                edgecolor=shade,
                linewidth=0.6,
            )
            bottom += height
        peak = ok.peak_bytes / divisor
        ax.scatter(
            pos[peak.notna().to_numpy()],
            peak.dropna(),
            marker="_",
            s=300,
            color="black",
            zorder=3,
            label="measured peak",
        )
        not_ok = panel[panel.status != "ok"]
        not_ok = not_ok.assign(position=not_ok.seq_len.map(where).astype(float))
        P.mark_not_ok(ax, not_ok, floor=0.0, x="position")
        for row in not_ok.itertuples():
            ax.annotate(
                row.status,
                (row.position, 0.0),
                xytext=(0, 9),
                textcoords="offset points",
                ha="center",
                fontsize=7,
                rotation=90,
                color=shade,
            )
        ax.set_xticks(range(len(lengths)), [str(t) for t in lengths])
        ax.set_xlim(-0.6, len(lengths) - 0.4)
        ax.set_xlabel("sequence length T (tokens)")
        ax.set_ylabel(f"memory ({unit})")
        ax.grid(True, axis="y", alpha=0.3)
    first = [
        Patch(facecolor="0.5", alpha=alpha, hatch=hatch, edgecolor="0.3", label=label)
        for _, label, hatch, alpha in MEMORY_PARTS
    ]
    P.title(fig, name, data)
    P.figure_legend(fig, first)
    fig.tight_layout()
    return fig
