"""Where the time goes: each cell's measured time over its three floors (dispatch,
bandwidth, compute; :mod:`ssmbench.floors`), and the roofline extended by a dispatch
ceiling."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from ssmbench.figures import panels as P
from ssmbench.figures.data import (
    cells_of,
    families,
    none_found,
    not_ok_note,
    one_setting,
    phases,
)
from ssmbench.figures.panels import plt
from ssmbench.figures.style import FLAGGED_COLOR, FLOOR_STYLES, PHASE_MARKERS, color, line_style
from ssmbench.figures.utilization import draw_roofline_points, draw_roofs
from ssmbench.floors import FLOORS, dispatch_missing, ensure_floors

NAME = "Where the time goes: measured time over its three floors"
FLAGGED_LABEL = "measured below a floor (floor_flag; listed by the run)"
DISPATCH_MISSING = (
    "dispatch floor missing: this run's cells have no operator count (n_ops) or its "
    "device.json no dispatch cost"
)
DISPATCH_BAR_LABEL = "a cell's dispatch ceiling: its FLOPs / (n_ops x dispatch cost)"


def floors(
    cells: pd.DataFrame,
    phase: str | Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    batch: int | Sequence[int] | None = None,
    dtype: str | Sequence[str] | None = None,
) -> plt.Figure:
    """A panel per (phase, family) over T, log-log: the measured median of each backend
    (the family's colour, the backend's line style) with the cell's floors beneath it in
    greys (dispatch per backend, bandwidth and compute), cells measured below a floor
    ringed in red; under them one wide panel, the roofline of every ok cell (achieved
    TFLOP/s against FLOP per byte, the measured memory and compute roofs) with each cell's
    dispatch ceiling, its FLOPs over its dispatch floor, as a bar at its intensity.  One
    batch and dtype (the smallest batch and the most common dtype unless given).  A table
    without floor columns (a shipped run from before them) gets them from its own columns
    and has no dispatch floor, which the title says."""
    wanted = dict(phase=phase, model=models, backend=backends, batch=batch, dtype=dtype)
    data = cells_of(ensure_floors(cells), **wanted)
    data = one_setting(data, batch, dtype)
    if data.empty:
        return P.empty_figure(NAME, none_found("cells", **wanted), cells)
    shown, fams = phases(data), families(data)
    fig = plt.figure(figsize=(3.4 * len(fams) + 0.6, 2.9 * len(shown) + 4.2))
    grid = fig.add_gridspec(len(shown) + 1, len(fams), height_ratios=[1] * len(shown) + [1.5])
    for i, ph in enumerate(shown):
        for j, family in enumerate(fams):
            ax = fig.add_subplot(grid[i, j])
            _time_panel(ax, data[(data.phase == ph) & (data.model == family)], ph, family)
            if j == 0:
                ax.set_ylabel(f"{ph}: one call (s)")
    _roofline_panel(fig.add_subplot(grid[len(shown), :]), data)
    missing = DISPATCH_MISSING if dispatch_missing(data) else ""
    P.title(fig, NAME, data, missing)
    P.figure_legend(fig, _floor_keys())
    fig.tight_layout()
    return fig


def _time_panel(ax: plt.Axes, panel: pd.DataFrame, phase: str, family: str) -> None:
    """One family's cells of one phase: each backend's measured median over T with its
    floors, flagged cells ringed, cells that did not run at the foot."""
    ax.set_title(f"{family}, {phase}", fontsize=9)
    ok = panel[(panel.status == "ok") & (panel.time_ms_median > 0)].sort_values("seq_len")
    if ok.empty:
        P.missing(ax, f"no ok {phase} cell of {family}" + not_ok_note(panel))
        return
    for backend, rows in ok.groupby("backend", sort=True):
        ax.plot(
            rows.seq_len,
            rows.time_ms_median * 1e-3,
            label=f"{family} / {backend}",
            **line_style(family, backend),
        )
        dispatch = rows.t_dispatch_s
        if dispatch.notna().any():
            ax.plot(rows.seq_len, dispatch, **FLOOR_STYLES["dispatch"])
    by_t = ok.groupby("seq_len")
    for name in ("bandwidth", "compute"):  # the same work in every backend: the loosest
        floor = by_t[f"t_{name}_s"].min()
        if floor.notna().any():
            ax.plot(floor.index, floor.to_numpy(), **FLOOR_STYLES[name])
    flagged = ok[ok.floor_flag.fillna("").astype(str) != ""]
    if not flagged.empty:
        ax.scatter(
            flagged.seq_len,
            flagged.time_ms_median * 1e-3,
            s=110,
            facecolors="none",
            edgecolors=FLAGGED_COLOR,
            linewidths=1.4,
            zorder=5,
            label=FLAGGED_LABEL,
        )
    P.log_log(ax, "context length T" if phase == "decode" else "sequence length T")
    P.mark_not_ok(ax, panel, floor=ax.get_ylim()[0])


def _roofline_panel(ax: plt.Axes, data: pd.DataFrame) -> None:
    """Every ok cell on the measured roofline, and where the table has a dispatch floor,
    each cell's dispatch ceiling (its FLOPs / its dispatch floor, in TFLOP/s) as a bar at
    its intensity: the cell's own roof, since it depends on its FLOPs per dispatch."""
    ax.set_title("roofline with dispatch ceilings (every phase; marker = phase)", fontsize=9)
    ok = data[(data.status == "ok") & (data.intensity > 0) & (data.tflops > 0)]
    if ok.empty:
        P.missing(ax, "no ok cell with both intensity and achieved FLOP/s" + not_ok_note(data))
        return
    draw_roofline_points(ax, ok, size=26)
    ceiling = ok.flop / ok.t_dispatch_s / 1e12  # TFLOP/s
    bars = ok[np.isfinite(ceiling) & (ceiling > 0)]
    if not bars.empty:
        ax.scatter(
            bars.intensity,
            (bars.flop / bars.t_dispatch_s / 1e12),
            c=[color(f) for f in bars.model],
            marker="_",
            s=160,
            linewidths=1.6,
            zorder=2,
            label=DISPATCH_BAR_LABEL,
        )
    flagged = ok[ok.floor_flag.fillna("").astype(str) != ""]
    if not flagged.empty:
        ax.scatter(
            flagged.intensity,
            flagged.tflops,
            s=110,
            facecolors="none",
            edgecolors=FLAGGED_COLOR,
            linewidths=1.4,
            zorder=5,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    draw_roofs(ax, data, ok)
    if bars.empty:
        ax.text(0.99, 0.02, DISPATCH_MISSING, transform=ax.transAxes, ha="right", fontsize=7)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.grid(True, which="both", alpha=0.3)


def _floor_keys() -> list[Line2D]:
    """Legend entries of the three floors and of the phases' markers."""
    keys = [Line2D([], [], label=f"{name} floor", **FLOOR_STYLES[name]) for name in FLOORS]
    keys += [
        Line2D([], [], linestyle="", color="0.5", marker=m, label=f"{p} (roofline)")
        for p, m in PHASE_MARKERS.items()
    ]
    return keys
