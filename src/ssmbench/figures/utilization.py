"""How well the hardware is used: bandwidth and compute utilization against T (and the
shared one-metric-per-phase layout energy uses too), the roofline under the run's measured
roofs, and the four-panel efficiency sweep."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from ssmbench.figures import panels as P
from ssmbench.figures.data import (
    byte_unit,
    cells_of,
    families,
    family_lines,
    joined,
    none_found,
    not_ok_note,
    one_setting,
    phases,
)
from ssmbench.figures.panels import plt
from ssmbench.figures.style import PHASE_MARKERS, color

CACHE_RESIDENT_LABEL = "working set fits in the last-level cache (may exceed memory bandwidth)"


def _mark_cache_resident(ax: plt.Axes, ok: pd.DataFrame, column: str) -> None:
    """Ring the points of cells flagged ``cache_resident``: their bytes may come from the
    cache, so a bandwidth utilization above 1 is explained, not a measurement error."""
    if "cache_resident" not in ok:
        return
    resident = ok[ok["cache_resident"].fillna(False).astype(bool) & ok[column].notna()]
    if resident.empty:
        return
    ax.scatter(
        resident.seq_len,
        resident[column],
        s=90,
        facecolors="none",
        edgecolors="0.2",
        linewidths=1.0,
        zorder=5,
        label=CACHE_RESIDENT_LABEL,
    )


def metric_by_phase(
    cells: pd.DataFrame,
    *,
    column: str,
    name: str,
    ylabel: str,
    why_empty: Callable[[pd.DataFrame], str],
    reference: tuple[float, str] | None = None,
    extra: Callable[[pd.DataFrame], str] = lambda data: "",
    mark_resident: bool = False,
    **filters,
) -> plt.Figure:
    """``column`` of ok cells against T, log-log, a line per (model, backend); panels: a
    column per phase, a row per (batch, dtype).  ``why_empty(rows)`` words a panel (or the
    whole figure) without a single value; ``reference`` is a dashed (y, label) line;
    ``mark_resident`` rings the cells whose working set fits in the last-level cache."""
    wanted = dict(
        phase=filters.get("phase"),
        model=filters.get("models"),
        backend=filters.get("backends"),
        batch=filters.get("batch"),
        dtype=filters.get("dtype"),
    )
    data = cells_of(cells, **wanted)
    if data.empty:
        return P.empty_figure(name, none_found("cells", **wanted), cells)
    has_value = (data.status == "ok") & data[column].notna()
    if not has_value.any():
        return P.empty_figure(name, why_empty(data), data)

    shown = phases(data)
    settings = sorted(data.groupby(["batch", "dtype"]).groups)
    fig, axes = plt.subplots(
        len(settings),
        len(shown),
        figsize=(5.0 * len(shown), 3.8 * len(settings) + 0.6),
        squeeze=False,
    )
    for row, (batch, dtype) in zip(axes, settings, strict=True):
        for ax, phase in zip(row, shown, strict=True):
            panel = data[(data.batch == batch) & (data.dtype == dtype) & (data.phase == phase)]
            ax.set_title(f"{phase}, batch {batch}, {dtype}", fontsize=9)
            if panel.empty:
                P.missing(ax, f"no {phase} cells at batch {batch}, {dtype}")
                continue
            if not P.draw_lines(ax, family_lines(panel, column)):
                P.missing(ax, why_empty(panel) + not_ok_note(panel))
                continue
            if mark_resident:
                _mark_cache_resident(ax, panel[panel.status == "ok"], column)
            P.log_log(ax, ylabel=ylabel)
            if reference is not None:
                ax.axhline(
                    reference[0], color="0.4", linestyle="--", linewidth=1, label=reference[1]
                )
            P.mark_not_ok(ax, panel, floor=ax.get_ylim()[0])
    P.title(fig, name, data, extra(data))
    P.figure_legend(fig)
    fig.tight_layout()
    return fig


def _ceiling_note(table: pd.DataFrame, col: str, unit: str) -> str:
    values = sorted(set(table[col].dropna()))
    return f"measured ceiling {', '.join(f'{v:.3g}' for v in values)} {unit}" if values else ""


def _util_empty(column: str, ceiling: str) -> Callable[[pd.DataFrame], str]:
    def why(rows: pd.DataFrame) -> str:
        message = f"{column} is empty in every ok cell here"
        if rows[ceiling].isna().all():
            message += f": no measured ceiling ({ceiling}) for this run"
        return message

    return why


def bandwidth_utilization(
    cells: pd.DataFrame,
    phase: str | Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    batch: int | Sequence[int] | None = None,
    dtype: str | Sequence[str] | None = None,
) -> plt.Figure:
    """Achieved memory bandwidth as a fraction of the run's measured copy bandwidth
    (``bw_util``) against T, log-log, a line per (model, backend), a panel per phase;
    the dashed line is the measured ceiling.  Cells that did not run are labelled markers;
    cells whose working set fits in the last-level cache are ringed (``cache_resident``:
    their bytes may come from the cache, so above 1 is explained)."""
    return metric_by_phase(
        cells,
        column="bw_util",
        name="Bandwidth utilization (achieved / measured copy bandwidth)",
        ylabel="bw_util (fraction of measured ceiling)",
        why_empty=_util_empty("bw_util", "ceiling_bw_gbps"),
        reference=(1.0, "measured ceiling"),
        extra=lambda d: _ceiling_note(d, "ceiling_bw_gbps", "GB/s"),
        mark_resident=True,
        phase=phase,
        models=models,
        backends=backends,
        batch=batch,
        dtype=dtype,
    )


def compute_utilization(
    cells: pd.DataFrame,
    phase: str | Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    batch: int | Sequence[int] | None = None,
    dtype: str | Sequence[str] | None = None,
) -> plt.Figure:
    """Achieved FLOP rate as a fraction of the run's measured matmul rate (``compute_util``)
    against T, laid out as :func:`bandwidth_utilization`."""
    return metric_by_phase(
        cells,
        column="compute_util",
        name="Compute utilization (achieved / measured matmul FLOP/s)",
        ylabel="compute_util (fraction of measured ceiling)",
        why_empty=_util_empty("compute_util", "ceiling_tflops"),
        reference=(1.0, "measured ceiling"),
        extra=lambda d: _ceiling_note(d, "ceiling_tflops", "TFLOP/s"),
        phase=phase,
        models=models,
        backends=backends,
        batch=batch,
        dtype=dtype,
    )


def roofline(
    cells: pd.DataFrame,
    phase: str | Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    batch: int | Sequence[int] | None = None,
    dtype: str | Sequence[str] | None = None,
) -> plt.Figure:
    """Achieved TFLOP/s against arithmetic intensity (FLOP/byte), log-log, under the run's
    measured roofs: the compute roof (``ceiling_tflops``), the memory roof
    (``ceiling_bw_gbps`` x intensity) and their ridge point.  One marker per ok cell, colour
    = family, shape = phase; a panel per dtype.  Cells that did not run sit on the floor at
    their intensity, labelled with their status."""
    name = "Roofline (measured ceilings)"
    wanted = dict(phase=phase, model=models, backend=backends, batch=batch, dtype=dtype)
    data = cells_of(cells, **wanted)
    if data.empty:
        return P.empty_figure(name, none_found("cells", **wanted), cells)
    dtypes = sorted(set(data.dtype))
    fig, axes = plt.subplots(1, len(dtypes), figsize=(6.2 * len(dtypes), 4.8), squeeze=False)
    for ax, dt in zip(axes[0], dtypes, strict=True):
        panel = data[data.dtype == dt]
        ax.set_title(dt, fontsize=9)
        ok = panel[(panel.status == "ok") & (panel.intensity > 0) & (panel.tflops > 0)]
        if ok.empty:
            P.missing(
                ax,
                f"no ok {dt} cell with both intensity and achieved FLOP/s" + not_ok_note(panel),
            )
            continue
        draw_roofline_points(ax, ok, size=30, alpha=0.85)
        ax.set_xscale("log")
        ax.set_yscale("log")
        draw_roofs(ax, panel, ok)
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("achieved TFLOP/s")
        ax.grid(True, which="both", alpha=0.3)
        P.mark_not_ok(ax, panel[panel.intensity > 0], floor=ax.get_ylim()[0], x="intensity")
    ran = data[data.status == "ok"]
    first = [_key(m, color=color(m), marker="o") for m in families(ran)]
    first += [
        _key(f"{p} (phase)", color="0.5", marker=PHASE_MARKERS.get(p, "o")) for p in phases(ran)
    ]
    P.title(fig, name, data, f"phases {', '.join(phases(data))}")
    P.figure_legend(fig, first)
    fig.tight_layout()
    return fig


def _key(label: str, **style) -> Line2D:
    """A legend entry: a marker without a line."""
    return Line2D([], [], linestyle="", label=label, **style)


def draw_roofline_points(ax: plt.Axes, ok: pd.DataFrame, size: float, alpha=None) -> None:
    """Each ok cell at (intensity, achieved TFLOP/s): its family's colour, its phase's
    marker."""
    for (model, ph), points in ok.groupby(["model", "phase"], sort=True):
        ax.scatter(
            points.intensity,
            points.tflops,
            color=color(model),
            marker=PHASE_MARKERS.get(ph, "o"),
            s=size,
            edgecolors="black",
            linewidths=0.4,
            alpha=alpha,
            zorder=3,
        )


def draw_roofs(ax: plt.Axes, panel: pd.DataFrame, ok: pd.DataFrame) -> None:
    """The measured roofs of each run in ``panel`` on log-log ``ax``, with the ridge point;
    a note in the corner when the table has none."""
    roofs = panel[["run", "ceiling_tflops", "ceiling_bw_gbps"]].drop_duplicates()
    roofs = roofs[roofs.ceiling_tflops.notna() | roofs.ceiling_bw_gbps.notna()]
    if roofs.empty:
        ax.text(
            0.02,
            0.98,
            "measured ceilings missing (no ceiling_tflops / ceiling_bw_gbps): roofs not drawn",
            transform=ax.transAxes,
            va="top",
            fontsize=7,
            color="0.3",
        )
        return
    lo, hi = ok.intensity.min() / 4, ok.intensity.max() * 4
    ridges = (roofs.ceiling_tflops * 1e3 / roofs.ceiling_bw_gbps).dropna()
    if not ridges.empty:
        lo, hi = min(lo, ridges.min() / 4), max(hi, ridges.max() * 4)
    x = np.geomspace(lo, hi, 256)
    several = roofs.run.nunique() > 1
    for roof in roofs.itertuples():
        suffix = f" ({roof.run})" if several else ""
        compute = roof.ceiling_tflops  # TFLOP/s
        memory = roof.ceiling_bw_gbps * x / 1e3  # GB/s x FLOP/byte = GFLOP/s -> TFLOP/s
        if math.isnan(compute):
            y = memory
        elif math.isnan(roof.ceiling_bw_gbps):
            y = np.full_like(x, compute)
        else:
            y = np.minimum(compute, memory)
        ax.plot(x, y, color="black", linewidth=1.4, label=f"measured roof{suffix}", zorder=2)
        if not math.isnan(compute):
            ax.annotate(
                f"compute roof {compute:.3g} TFLOP/s",
                (x[-1], compute),
                xytext=(-4, 4),
                textcoords="offset points",
                ha="right",
                fontsize=7,
            )
        if not math.isnan(roof.ceiling_bw_gbps):
            ax.annotate(
                f"memory roof {roof.ceiling_bw_gbps:.3g} GB/s",
                (x[0], y[0]),
                xytext=(4, 6),
                textcoords="offset points",
                fontsize=7,
            )
        if not (math.isnan(compute) or math.isnan(roof.ceiling_bw_gbps)):
            ridge = compute * 1e3 / roof.ceiling_bw_gbps  # FLOP/byte
            ax.plot(
                [ridge],
                [compute],
                marker="o",
                markerfacecolor="white",
                markeredgecolor="black",
                linestyle="",
                zorder=4,
                label=f"ridge point{suffix}",
            )
            ax.annotate(
                f"ridge {ridge:.3g} FLOP/B",
                (ridge, compute),
                xytext=(0, -12),
                textcoords="offset points",
                ha="center",
                fontsize=7,
            )


_SWEEP_PANELS = (
    # (phase, quantity, title, y label)
    ("train", "time_ms_median", "(a) train step latency", "train step, median (ms)"),
    ("train", "peak_bytes", "(b) peak memory, train", "peak allocated"),
    ("prefill", "tokens_per_s", "(c) prefill throughput", "tokens / s"),
    ("decode", "ms_per_token", "(d) decode cost", "decode, median ms per token"),
)


def efficiency_sweep(
    cells: pd.DataFrame,
    models: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    batch: int | None = None,
    dtype: str | None = None,
) -> plt.Figure:
    """The case study in four panels, each log-log against T with a line per family (line
    style = backend): (a) train-step latency, (b) train peak memory, (c) prefill throughput
    in tokens/s, (d) decode time per generated token against the context length.  Each
    phase at ``batch`` (default its smallest) and ``dtype`` (default its most common);
    oom and timeout cells are labelled markers at the foot of their panel."""
    name = "Efficiency sweep"
    wanted = dict(model=models, backend=backends)
    data = cells_of(cells, **wanted)
    fig, axes = plt.subplots(2, 2, figsize=(11.0, 8.2))
    shown = []
    divisor, unit = byte_unit(data[data.phase == "train"].peak_bytes)
    for ax, (phase, quantity, panel_title, ylabel) in zip(axes.flat, _SWEEP_PANELS, strict=True):
        panel = one_setting(data[data.phase == phase], batch, dtype)
        if panel.empty:
            ax.set_title(panel_title, fontsize=9)
            P.missing(ax, none_found(f"{phase} cells", **wanted, batch=batch, dtype=dtype))
            continue
        shown.append(panel)
        setting = f"batch {joined(panel, 'batch')}, {joined(panel, 'dtype')}"
        ax.set_title(f"{panel_title} ({setting})", fontsize=9)
        per_token = panel.tokens.where(panel.tokens > 0, panel.batch)
        values = {
            "time_ms_median": panel.time_ms_median,
            "peak_bytes": panel.peak_bytes / divisor,
            "tokens_per_s": per_token / (panel.time_ms_median / 1e3),
            "ms_per_token": panel.time_ms_median / per_token,
        }[quantity]
        panel = panel.assign(value=values)
        if not P.draw_lines(ax, family_lines(panel, "value")):
            P.missing(ax, f"no ok {phase} cell with a value here" + not_ok_note(panel))
            continue
        kind = "context" if phase == "decode" else "sequence"
        P.log_log(
            ax,
            f"{kind} length T (tokens)",
            f"{ylabel} ({unit})" if quantity == "peak_bytes" else ylabel,
        )
        P.mark_not_ok(ax, panel, floor=ax.get_ylim()[0])
    P.title(fig, name, pd.concat(shown) if shown else data)
    P.figure_legend(fig)
    fig.tight_layout()
    return fig
