"""The pieces every figure draws with: titles, panels that say what is missing, lines,
markers for cells that did not run, one legend per figure, grids of panels, error bars."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ssmbench.figures.data import caption, hardware_label  # noqa: E402
from ssmbench.figures.style import STATUS_MARKERS, color  # noqa: E402
from ssmbench.tables import family_of  # noqa: E402


def title(fig: plt.Figure, name: str, table: pd.DataFrame, *extra: str) -> None:
    """The figure's title: ``name: hardware`` over the caption of ``table`` (and ``extra``)."""
    fig.suptitle(f"{name}: {hardware_label(table)}\n{caption(table, *extra)}", fontsize=10)


def missing(ax: plt.Axes, message: str) -> None:
    """Turn ``ax`` into a panel that says what is missing."""
    ax.text(
        0.5,
        0.5,
        textwrap.fill(message, 48),
        ha="center",
        va="center",
        transform=ax.transAxes,
        fontsize=9,
        color="0.25",
    )
    ax.set_xticks([])
    ax.set_yticks([])


def empty_figure(name: str, message: str, table: pd.DataFrame) -> plt.Figure:
    """A one-panel figure titled ``name`` whose panel says ``message``."""
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    missing(ax, message)
    title(fig, name, table)
    fig.tight_layout()
    return fig


def log_log(ax: plt.Axes, xlabel: str = "sequence length T (tokens)", ylabel: str = "") -> None:
    """Log axes (base 2 along T) with a grid, and their labels."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)


def draw_lines(ax: plt.Axes, lines: Sequence[dict]) -> int:
    """Plot each of :func:`ssmbench.figures.data.family_lines`; returns how many."""
    for line in lines:
        ax.plot(line["x"], line["y"], label=line["label"], **line["style"])
    return len(lines)


def mark_not_ok(ax: plt.Axes, rows: pd.DataFrame, floor: float, x: str = "seq_len") -> None:
    """Cells that did not run, at the x they would have had and at height ``floor``, one
    marker per status (STATUS_MARKERS) in the family's colour, labelled ``model: status``."""
    rows = rows[rows.status != "ok"]
    rows = rows[pd.to_numeric(rows[x], errors="coerce").notna()]
    rows = rows.assign(_family=family_of(rows))
    for (model, status), group in rows.groupby(["model", "status"], sort=True):
        ax.scatter(
            group[x],
            [floor] * len(group),
            marker=STATUS_MARKERS.get(status, "x"),
            color=color(group._family.iloc[0]),
            s=60,
            clip_on=False,
            zorder=4,
            label=f"{model}: {status}",
        )


def figure_legend(fig: plt.Figure, first: Sequence = ()) -> None:
    """One legend for the whole figure, right of the panels: ``first`` handles, then every
    labelled artist of every panel, each label once."""
    seen: dict[str, object] = {}
    for handle in first:
        seen.setdefault(handle.get_label(), handle)
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    if seen:
        fig.legend(
            list(seen.values()),
            list(seen),
            loc="center left",
            bbox_to_anchor=(1.0, 0.5),
            fontsize=8,
        )


def grid(n: int, ncols: int = 4, width: float = 4.2, height: float = 3.6, **kw):
    """A figure with ``n`` panels in rows of at most ``ncols``; spare axes removed."""
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(width * ncols, height * nrows + 0.6), squeeze=False, **kw
    )
    flat = list(axes.flat)
    for ax in flat[n:]:
        fig.delaxes(ax)
    return fig, flat[:n]


def error_bars(ax: plt.Axes, x, y, low, high, style: dict) -> None:
    """Error bars from ``low`` to ``high`` around ``y`` where both ends are known."""
    known = low.notna() & high.notna()
    if not known.any():
        return
    y, low, high = y[known], low[known], high[known]
    err = np.vstack([(y - low).clip(lower=0), (high - y).clip(lower=0)])
    ax.errorbar(
        x[known], y, yerr=err, fmt="none", ecolor=style.get("color", "black"), capsize=3, lw=1
    )
