"""One function per figure.  Reads tables only; imports pandas and matplotlib, never torch.

Every figure colours a family the same way, draws a backend with the same line style,
names the hardware, dtype and batch, and shows cells that did not run (``oom``,
``timeout``, ``unavailable``, ``failed``) as labelled markers instead of gaps.
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Callable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from ssmbench.analysis import (  # noqa: E402, F401  (names the figures and notebooks use)
    BACKEND_TIERS,
    GRAPH_PAIRS,
    GRAPH_TARGET,
    SSM_FAMILIES,
    go_no_go_table,
    graph_speedups,
    speedups_table,
)
from ssmbench.tables import family_of  # noqa: E402

FAMILY_COLORS = {
    "attention": "#d62728",
    "mamba": "#1f77b4",
    "mamba2": "#2ca02c",
    "mamba3": "#17becf",
    "s4d": "#9467bd",
    "deltanet": "#ff7f0e",
    "hybrid": "#8c564b",
}
BACKEND_STYLES = {
    "naive": dict(linestyle=":", marker="o"),
    "torch": dict(linestyle="-", marker="s"),
    "torch-mixed": dict(linestyle="-", marker="h"),
    "compile": dict(linestyle="--", marker="^"),
    "fused": dict(linestyle="-", marker="D", linewidth=2.2),
    "torch-graph": dict(linestyle="-.", marker="v"),
    "fused-graph": dict(linestyle="-.", marker="P"),
}
STATUS_MARKERS = {
    "oom": "X",
    "timeout": "$T$",
    "unavailable": "$U$",
    "failed": "$F$",
    "not_run": "$N$",  # a budgeted run never reached the cell
}
PHASES = ("prefill", "decode", "train")
PHASE_MARKERS = {"prefill": "o", "decode": "s", "train": "^"}
# Operator buckets of the ops table, in the one order every figure stacks and lists them.
BUCKET_COLORS = {
    "gemm": "#4e79a7",
    "attention": "#e15759",
    "ssm_scan": "#59a14f",
    "convolution": "#edc948",
    "normalization": "#b07aa1",
    "elementwise": "#76b7b2",
    "other": "#bab0ac",
}
# The parts of a cell's peak memory, bottom to top of a stacked bar: (column, label, hatch, alpha).
MEMORY_PARTS = (
    ("weights_bytes", "weights", "", 0.95),
    ("cache_bytes", "state / KV cache", "//", 0.6),
    ("activations_bytes", "activations", "..", 0.3),
)


def select(cells: pd.DataFrame, phase=None, models=None, backends=None) -> pd.DataFrame:
    """Rows of ``cells`` in the given phase, models and backends (None keeps all)."""
    keep = pd.Series(True, index=cells.index)
    if phase is not None:
        keep &= cells.phase == phase
    if models:
        keep &= cells.model.isin(models)
    if backends:
        keep &= cells.backend.isin(backends)
    return cells[keep]


def hardware_label(cells: pd.DataFrame) -> str:
    """The device names of ``cells`` (``device_name``, else ``device``), comma-separated."""
    for col in ("device_name", "device"):
        if col in cells:
            names = sorted({str(n) for n in cells[col].dropna() if str(n)})
            if names:
                return ", ".join(names)
    return "unknown hardware"


def latency_scaling(
    cells: pd.DataFrame,
    phase: str = "prefill",
    models: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
) -> plt.Figure:
    """Median latency vs sequence length, log-log, one line per model x backend, the band
    from median to P95; one panel per (batch, dtype).  Cells that did not run are markers
    at the foot of the panel, labelled with their status."""
    data = select(cells, phase, models, backends)
    if data.empty:
        raise ValueError(f"latency_scaling: no cells with phase={phase!r} in the table")
    panels = sorted(data.groupby(["batch", "dtype"]).groups)
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False, sharey=True
    )
    for ax, (batch, dtype) in zip(axes[0], panels, strict=True):
        panel = data[(data.batch == batch) & (data.dtype == dtype)]
        _latency_panel(ax, panel)
        ax.set_title(f"batch {batch}, {dtype}")
    axes[0][0].set_ylabel(f"{phase} latency, median (ms)")
    run = ", ".join(sorted(set(data.run)))
    fig.suptitle(f"Latency scaling, {phase}: {hardware_label(data)} (run {run})", fontsize=10)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    return fig


def _latency_panel(ax: plt.Axes, panel: pd.DataFrame) -> None:
    ok = panel[panel.status == "ok"]
    for (model, backend), line in ok.groupby(["model", "backend"], sort=True):
        line = line.sort_values("seq_len")
        color = FAMILY_COLORS.get(model, "black")
        style = BACKEND_STYLES.get(backend, dict(linestyle="-", marker="."))
        ax.plot(
            line.seq_len,
            line.time_ms_median,
            color=color,
            label=f"{model} / {backend}",
            markersize=4,
            **style,
        )
        ax.fill_between(
            line.seq_len,
            line.time_ms_median,
            line.time_ms_p95,
            color=color,
            alpha=0.15,
            linewidth=0,
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length T (tokens)")
    ax.grid(True, which="both", alpha=0.3)
    not_ok = panel[panel.status != "ok"]
    if not not_ok.empty:
        _mark_not_ok(ax, not_ok, floor=ax.get_ylim()[0] if not ok.empty else 1.0)


# ---------------------------------------------------------------------------------------
# Shared pieces: filters, missing columns, captions, status markers, placeholder panels.


def _as_list(value) -> list | None:
    """None or an empty sequence keep everything; a scalar is a one-item list."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        return [value]
    return list(value) or None


def _filter(table: pd.DataFrame, **wanted) -> pd.DataFrame:
    """Rows of ``table`` whose columns hold the wanted values (``phase="prefill"``,
    ``model=["mamba"]``, ...); None keeps every value."""
    keep = pd.Series(True, index=table.index)
    for col, value in wanted.items():
        values = _as_list(value)
        if values is not None:
            keep &= table[col].isin(values) if col in table else False
    return table[keep]


def _none_found(what: str, **wanted) -> str:
    """``no <what> in the table``, naming the filters that are set."""
    said = [f"{k}={v!r}" for k, v in wanted.items() if _as_list(v) is not None]
    return f"no {what} in the table" + (f" with {', '.join(said)}" if said else "")


def _with_columns(table: pd.DataFrame, numeric=(), text=()) -> pd.DataFrame:
    """A copy of ``table`` in which every named column exists: numeric ones as floats (NaN
    where empty or absent), text ones as strings ("" where empty or absent)."""
    out = table.copy()
    for col in numeric:
        out[col] = pd.to_numeric(out[col], errors="coerce") if col in out else np.nan
        out[col] = out[col].astype(float)
    for col in text:
        out[col] = out[col].astype(object).fillna("").astype(str) if col in out else ""
    return out


def _join(table: pd.DataFrame, col: str) -> str:
    if col not in table:
        return ""
    return ", ".join(str(v) for v in sorted(set(table[col].dropna())) if str(v))


def _caption(table: pd.DataFrame, *extra: str) -> str:
    """One line naming what a figure shows: dtype(s), batch(es), backends, run."""
    parts = [
        f"{label} {_join(table, col)}"
        for label, col in (
            ("dtype", "dtype"),
            ("batch", "batch"),
            ("backends", "backend"),
            ("run", "run"),
        )
        if _join(table, col)
    ]
    return " | ".join(parts + [e for e in extra if e])


def _title(fig: plt.Figure, title: str, table: pd.DataFrame, *extra: str) -> None:
    fig.suptitle(f"{title}: {hardware_label(table)}\n{_caption(table, *extra)}", fontsize=10)


def _status_summary(rows: pd.DataFrame) -> str:
    counts = rows.status[rows.status != "ok"].value_counts().sort_index()
    return ", ".join(f"{n} {status}" for status, n in counts.items())


def _missing(ax: plt.Axes, message: str) -> None:
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


def _empty_figure(title: str, message: str, table: pd.DataFrame) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    _missing(ax, message)
    _title(fig, title, table)
    fig.tight_layout()
    return fig


def _line_style(model: str, backend: str) -> dict:
    style = dict(BACKEND_STYLES.get(backend, dict(linestyle="-", marker=".")))
    return dict(color=FAMILY_COLORS.get(model, "black"), markersize=4, **style)


def _lines(ax: plt.Axes, ok: pd.DataFrame, y: str, x: str = "seq_len") -> int:
    """One line per (model, backend) of ``y`` against ``x``; returns how many were drawn."""
    drawn = 0
    ok = ok[ok[x].notna() & ok[y].notna()]
    for (model, backend), line in ok.groupby(["model", "backend"], sort=True):
        line = line.sort_values(x)
        ax.plot(line[x], line[y], label=f"{model} / {backend}", **_line_style(model, backend))
        drawn += 1
    return drawn


def _mark_not_ok(ax: plt.Axes, rows: pd.DataFrame, floor: float, x: str = "seq_len") -> None:
    """Cells that did not run, at the x they would have had and at height ``floor``, one
    marker per status (STATUS_MARKERS) in the family's colour, labelled ``model: status``."""
    rows = rows[rows.status != "ok"]
    rows = rows[pd.to_numeric(rows[x], errors="coerce").notna()]
    for (model, status), group in rows.groupby(["model", "status"], sort=True):
        ax.scatter(
            group[x],
            [floor] * len(group),
            marker=STATUS_MARKERS.get(status, "x"),
            color=FAMILY_COLORS.get(model, "black"),
            s=60,
            clip_on=False,
            zorder=4,
            label=f"{model}: {status}",
        )


def _figure_legend(fig: plt.Figure, first: Sequence = ()) -> None:
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


def _phases(table: pd.DataFrame) -> list[str]:
    present = set(table.phase)
    return [p for p in PHASES if p in present] + sorted(present - set(PHASES))


def _families(table: pd.DataFrame) -> list[str]:
    present = set(table.model)
    return [m for m in FAMILY_COLORS if m in present] + sorted(present - set(FAMILY_COLORS))


def _one_setting(table: pd.DataFrame, batch=None, dtype=None) -> pd.DataFrame:
    """The rows of one batch and one dtype: the wanted ones, else the smallest batch and the
    most common dtype (ties: the first by name), so a bar or a line never mixes settings."""
    table = _filter(table, batch=batch, dtype=dtype)
    if table.empty:
        return table
    if "batch" in table and (_as_list(batch) is None or table.batch.nunique() > 1):
        table = table[table.batch == table.batch.min()]
    if "dtype" in table and (_as_list(dtype) is None or table.dtype.nunique() > 1):
        counts = table.dtype.value_counts()
        table = table[table.dtype == sorted(counts.index[counts == counts.max()])[0]]
    return table


def _byte_unit(values: pd.Series) -> tuple[float, str]:
    """Divisor and name of the unit (MiB or GiB) that suits ``values`` in bytes."""
    top = values.max() if values.notna().any() else 0.0
    return (2.0**30, "GiB") if top >= 2.0**30 else (2.0**20, "MiB")


def _grid(n: int, ncols: int = 4, width: float = 4.2, height: float = 3.6, **kw):
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


# ---------------------------------------------------------------------------------------
# Utilization and energy: one metric against T, a panel per phase (and per batch x dtype).

_CELL_NUMERIC = (
    "time_ms_median",
    "tokens",
    "intensity",
    "tflops",
    "bw_gbps",
    "ceiling_tflops",
    "ceiling_bw_gbps",
    "compute_util",
    "bw_util",
    "peak_bytes",
    "weights_bytes",
    "cache_bytes",
    "activations_bytes",
    "energy_j",
    "energy_j_per_token",
)
_CELL_TEXT = ("run", "device", "device_name", "reason", "energy_method", "energy_reason")


CACHE_RESIDENT_LABEL = "working set fits in the last-level cache (may exceed memory bandwidth)"


def _mark_cache_resident(ax, ok: pd.DataFrame, column: str) -> None:
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


def _metric_by_phase(
    cells: pd.DataFrame,
    *,
    column: str,
    title: str,
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
    data = _with_columns(_filter(cells, **wanted), _CELL_NUMERIC, _CELL_TEXT)
    if data.empty:
        return _empty_figure(title, _none_found("cells", **wanted), cells)
    has_value = (data.status == "ok") & data[column].notna()
    if not has_value.any():
        return _empty_figure(title, why_empty(data), data)

    phases = _phases(data)
    settings = sorted(data.groupby(["batch", "dtype"]).groups)
    fig, axes = plt.subplots(
        len(settings),
        len(phases),
        figsize=(5.0 * len(phases), 3.8 * len(settings) + 0.6),
        squeeze=False,
    )
    for row, (batch, dtype) in zip(axes, settings, strict=True):
        for ax, phase in zip(row, phases, strict=True):
            panel = data[(data.batch == batch) & (data.dtype == dtype) & (data.phase == phase)]
            ax.set_title(f"{phase}, batch {batch}, {dtype}", fontsize=9)
            if panel.empty:
                _missing(ax, f"no {phase} cells at batch {batch}, {dtype}")
                continue
            ok = panel[panel.status == "ok"]
            if not _lines(ax, ok, column):
                summary = _status_summary(panel)
                _missing(ax, why_empty(panel) + (f" (not ok: {summary})" if summary else ""))
                continue
            if mark_resident:
                _mark_cache_resident(ax, ok, column)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_xlabel("sequence length T (tokens)")
            ax.set_ylabel(ylabel)
            if reference is not None:
                ax.axhline(
                    reference[0], color="0.4", linestyle="--", linewidth=1, label=reference[1]
                )
            _mark_not_ok(ax, panel, floor=ax.get_ylim()[0])
    _title(fig, title, data, extra(data))
    _figure_legend(fig)
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
    return _metric_by_phase(
        cells,
        column="bw_util",
        title="Bandwidth utilization (achieved / measured copy bandwidth)",
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
    return _metric_by_phase(
        cells,
        column="compute_util",
        title="Compute utilization (achieved / measured matmul FLOP/s)",
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
    return _metric_by_phase(
        cells,
        column="energy_j_per_token",
        title="Energy per token",
        ylabel="energy per token (J)",
        why_empty=_energy_empty,
        extra=lambda d: (
            f"energy method {_join(d, 'energy_method')}" if _join(d, "energy_method") else ""
        ),
        phase=phase,
        models=models,
        backends=backends,
        batch=batch,
        dtype=dtype,
    )


# ---------------------------------------------------------------------------------------
# Roofline.


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
    title = "Roofline (measured ceilings)"
    wanted = dict(phase=phase, model=models, backend=backends, batch=batch, dtype=dtype)
    data = _with_columns(_filter(cells, **wanted), _CELL_NUMERIC, _CELL_TEXT)
    if data.empty:
        return _empty_figure(title, _none_found("cells", **wanted), cells)
    dtypes = sorted(set(data.dtype))
    fig, axes = plt.subplots(1, len(dtypes), figsize=(6.2 * len(dtypes), 4.8), squeeze=False)
    for ax, dt in zip(axes[0], dtypes, strict=True):
        panel = data[data.dtype == dt]
        ax.set_title(dt, fontsize=9)
        ok = panel[(panel.status == "ok") & (panel.intensity > 0) & (panel.tflops > 0)]
        if ok.empty:
            summary = _status_summary(panel)
            _missing(
                ax,
                f"no ok {dt} cell with both intensity and achieved FLOP/s"
                + (f" (not ok: {summary})" if summary else ""),
            )
            continue
        for (model, ph), points in ok.groupby(["model", "phase"], sort=True):
            ax.scatter(
                points.intensity,
                points.tflops,
                color=FAMILY_COLORS.get(model, "black"),
                marker=PHASE_MARKERS.get(ph, "o"),
                s=30,
                edgecolors="black",
                linewidths=0.4,
                alpha=0.85,
                zorder=3,
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        _draw_roofs(ax, panel, ok)
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("achieved TFLOP/s")
        ax.grid(True, which="both", alpha=0.3)
        _mark_not_ok(ax, panel[panel.intensity > 0], floor=ax.get_ylim()[0], x="intensity")
    families = _families(data[data.status == "ok"])
    first = [
        Line2D([], [], color=FAMILY_COLORS.get(m, "black"), marker="o", linestyle="", label=m)
        for m in families
    ] + [
        Line2D(
            [],
            [],
            color="0.5",
            marker=PHASE_MARKERS.get(p, "o"),
            linestyle="",
            label=f"{p} (phase)",
        )
        for p in _phases(data[data.status == "ok"])
    ]
    _title(fig, title, data, f"phases {', '.join(_phases(data))}")
    _figure_legend(fig, first)
    fig.tight_layout()
    return fig


def _draw_roofs(ax: plt.Axes, panel: pd.DataFrame, ok: pd.DataFrame) -> None:
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


# ---------------------------------------------------------------------------------------
# Memory footprint.


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
    title = "Memory footprint"
    wanted = dict(phase=phase, model=models)
    data = _with_columns(_filter(cells, **wanted), _CELL_NUMERIC, _CELL_TEXT)
    choices = _as_list(backends) or ["torch"]
    present = [b for b in choices if b in set(data.backend)]
    if present:
        backend = present[0]
    elif _as_list(backends) is None and not data.empty:
        counts = data.backend.value_counts()
        backend = sorted(counts.index[counts == counts.max()])[0]
    else:
        backend = choices[0]
    data = _one_setting(data[data.backend == backend], batch, dtype)
    title = f"{title}, {phase}, backend {backend}"
    if data.empty:
        message = _none_found("cells", **wanted, backend=backend, batch=batch, dtype=dtype)
        return _empty_figure(title, message, cells)
    parts = [p for p, *_ in MEMORY_PARTS]
    divisor, unit = _byte_unit(pd.concat([data[c] for c in parts + ["peak_bytes"]]))
    families = _families(data)
    fig, axes = _grid(len(families), sharey=True)
    for ax, model in zip(axes, families, strict=True):
        panel = data[data.model == model]
        ax.set_title(model, color=FAMILY_COLORS.get(model, "black"), fontsize=10)
        lengths = sorted(set(panel.seq_len))
        where = {t: i for i, t in enumerate(lengths)}
        ok = panel[panel.status == "ok"].sort_values("seq_len")
        known = ok[parts + ["peak_bytes"]].notna().any(axis=1)
        if not known.any():
            summary = _status_summary(panel)
            _missing(
                ax,
                "no memory recorded for the ok cells here"
                + (f" (not ok: {summary})" if summary else ""),
            )
            continue
        pos = ok.seq_len.map(where).to_numpy(dtype=float)
        bottom = np.zeros(len(ok))
        color = FAMILY_COLORS.get(model, "black")
        for col, _, hatch, alpha in MEMORY_PARTS:
            height = (ok[col] / divisor).fillna(0.0).to_numpy()
            ax.bar(
                pos,
                height,
                bottom=bottom,
                width=0.7,
                color=color,
                alpha=alpha,
                hatch=hatch,
                edgecolor=color,
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
        _mark_not_ok(ax, not_ok, floor=0.0, x="position")
        for row in not_ok.itertuples():
            ax.annotate(
                row.status,
                (row.position, 0.0),
                xytext=(0, 9),
                textcoords="offset points",
                ha="center",
                fontsize=7,
                rotation=90,
                color=color,
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
    _title(fig, title, data)
    _figure_legend(fig, first)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------
# Operator breakdown (the ops table).


def op_breakdown(
    ops: pd.DataFrame,
    phase: str | Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    batch: int | None = None,
    dtype: str | None = None,
) -> plt.Figure:
    """Where the time goes: for each (model, backend) a panel of stacked bars, one per T,
    of each operator bucket's share (BUCKET_COLORS, always stacked in that order), the total
    profiled ms above each bar, the time basis ("device kernel time" or "CPU self time") in
    the panel's title.  With several phases, a panel per (model, backend, phase)."""
    title = "Operator breakdown"
    wanted = dict(phase=phase, model=models, backend=backends)
    if "status" in ops:  # a cell that could not be profiled has a status row, no times
        ops = ops[ops.status.fillna("ok") == "ok"]
    data = _filter(ops, **wanted)
    data = _with_columns(
        data,
        ("time_ms", "share", "n_kernels"),
        ("time_basis", "bucket", "dtype", "run", "device_name"),
    )
    data = _one_setting(data, batch, dtype)
    if data.empty:
        message = _none_found("operator profile", **wanted, batch=batch, dtype=dtype)
        return _empty_figure(title, message.replace("the table", "the ops table"), ops)
    buckets = [b for b in BUCKET_COLORS if b in set(data.bucket)]
    buckets += sorted(set(data.bucket) - set(BUCKET_COLORS))
    several_phases = data.phase.nunique() > 1
    keys = sorted(
        data.groupby(["model", "backend", "phase"]).groups,
        key=lambda k: (_families(data).index(k[0]), k[1], _phases(data).index(k[2])),
    )
    fig, axes = _grid(len(keys), height=3.8)
    for ax, (model, backend, ph) in zip(axes, keys, strict=True):
        panel = data[(data.model == model) & (data.backend == backend) & (data.phase == ph)]
        basis = _join(panel, "time_basis") or "time basis not recorded"
        name = f"{model} / {backend}" + (f", {ph}" if several_phases else "")
        ax.set_title(f"{name}\n({basis})", color=FAMILY_COLORS.get(model, "black"), fontsize=9)
        lengths = sorted(set(panel.seq_len))
        total_ms = panel.groupby("seq_len").time_ms.sum(min_count=1)
        share = panel.share.where(panel.share.notna(), panel.time_ms / panel.seq_len.map(total_ms))
        table = panel.assign(share=share).pivot_table(
            index="seq_len", columns="bucket", values="share", aggfunc="sum"
        )
        table = table.reindex(index=lengths, columns=buckets).fillna(0.0)
        if not table.to_numpy().any():
            _missing(ax, "no operator times recorded here")
            continue
        bottom = np.zeros(len(lengths))
        for bucket in buckets:
            if not table[bucket].any():
                continue
            ax.bar(
                range(len(lengths)),
                table[bucket].to_numpy(),
                bottom=bottom,
                width=0.7,
                color=BUCKET_COLORS.get(bucket, "0.8"),
                edgecolor="white",
                linewidth=0.5,
                label=bucket,
            )
            bottom += table[bucket].to_numpy()
        for i, t in enumerate(lengths):
            if pd.notna(total_ms.get(t)):
                ax.annotate(
                    f"{total_ms[t]:.3g} ms",
                    (i, bottom[i]),
                    xytext=(0, 2),
                    textcoords="offset points",
                    ha="center",
                    fontsize=6,
                )
        ax.set_xticks(range(len(lengths)), [str(t) for t in lengths])
        ax.set_ylim(0, max(1.0, bottom.max()) * 1.1)
        ax.set_xlabel("sequence length T (tokens)")
        ax.set_ylabel("share of profiled time")
    bases = _join(data, "time_basis")
    _title(fig, title, data, f"time basis: {bases}" if bases else "")
    _figure_legend(fig)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------
# Efficiency sweep: the 2x2 case-study panel.

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
    title = "Efficiency sweep"
    wanted = dict(model=models, backend=backends)
    data = _with_columns(_filter(cells, **wanted), _CELL_NUMERIC, _CELL_TEXT)
    fig, axes = plt.subplots(2, 2, figsize=(11.0, 8.2))
    shown = []
    peak = data[data.phase == "train"].peak_bytes
    divisor, unit = _byte_unit(peak)
    for ax, (phase, quantity, name, ylabel) in zip(axes.flat, _SWEEP_PANELS, strict=True):
        panel = _one_setting(data[data.phase == phase], batch, dtype)
        if panel.empty:
            ax.set_title(name, fontsize=9)
            _missing(ax, _none_found(f"{phase} cells", **wanted, batch=batch, dtype=dtype))
            continue
        shown.append(panel)
        ax.set_title(f"{name} (batch {_join(panel, 'batch')}, {_join(panel, 'dtype')})", fontsize=9)
        per_token = panel.tokens.where(panel.tokens > 0, panel.batch)
        values = {
            "time_ms_median": panel.time_ms_median,
            "peak_bytes": panel.peak_bytes / divisor,
            "tokens_per_s": per_token / (panel.time_ms_median / 1e3),
            "ms_per_token": panel.time_ms_median / per_token,
        }[quantity]
        panel = panel.assign(value=values)
        if not _lines(ax, panel[panel.status == "ok"], "value"):
            summary = _status_summary(panel)
            _missing(
                ax,
                f"no ok {phase} cell with a value here"
                + (f" (not ok: {summary})" if summary else ""),
            )
            continue
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_xlabel(
            "context length T (tokens)" if phase == "decode" else "sequence length T (tokens)"
        )
        ax.set_ylabel(f"{ylabel} ({unit})" if quantity == "peak_bytes" else ylabel)
        _mark_not_ok(ax, panel, floor=ax.get_ylim()[0])
    _title(fig, title, pd.concat(shown) if shown else data)
    _figure_legend(fig)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------
# CUDA-graph decode.


def decode_graph_speedup(
    table: pd.DataFrame,
    models: Sequence[str] | None = None,
    batch: int = 1,
    phase: str | None = None,
    backends: Sequence[str] | None = None,
) -> plt.Figure:
    """Decode-step latency of the eager step over its CUDA-graph replay, against the
    context length T, one line per family with its 95% interval as error bars, from the
    speed-ups table (:func:`ssmbench.analysis.speedups_table`); a panel per pair (torch /
    torch-graph, fused / fused-graph); the dashed line is the 3x target.  Graph cells that
    did not run (every one on a CPU) are labelled markers at the foot of the panel.
    ``phase`` and ``backends`` are accepted for a uniform notebook interface and ignored."""
    title = f"Decode: eager step / CUDA-graph replay, batch {batch}"
    data = _with_columns(
        _filter(table, model=models, batch=batch),
        ("eager_ms", "graph_ms", "speedup", "speedup_lo", "speedup_hi"),
        ("run", "reason"),
    )
    if data.empty:
        return _empty_figure(
            title, _none_found("CUDA-graph decode cells", model=models, batch=batch), table
        )
    fig, axes = plt.subplots(
        1, len(GRAPH_PAIRS), figsize=(6.0 * len(GRAPH_PAIRS), 4.2), squeeze=False
    )
    for ax, (eager, graph) in zip(axes[0], GRAPH_PAIRS, strict=True):
        ax.set_title(f"{eager} / {graph}", fontsize=9)
        rows = data[data.graph == graph]
        pairs = rows[(rows.status == "ok") & rows.speedup.notna()]
        not_ok = rows[rows.status != "ok"]
        if pairs.empty:
            summary = _status_summary(rows)
            _missing(
                ax,
                f"no ok {graph} decode cells with an ok {eager} twin"
                + (f" ({summary})" if summary else ""),
            )
            _mark_not_ok(ax, not_ok, floor=0.5)
            continue
        for model, line in pairs.groupby("model", sort=True):
            line = line.sort_values("seq_len")
            style = _line_style(model, graph)
            ax.plot(line.seq_len, line.speedup, label=model, **style)
            _error_bars(ax, line.seq_len, line.speedup, line.speedup_lo, line.speedup_hi, style)
        ax.axhline(GRAPH_TARGET, color="0.4", linestyle="--", linewidth=1, label="3x target")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("cached tokens T")
        ax.set_ylabel("eager / graph latency (95% interval)")
        ax.grid(True, which="both", alpha=0.3)
        _mark_not_ok(ax, not_ok, floor=ax.get_ylim()[0])
    fig.suptitle(f"{title}\n{_caption(data)}", fontsize=10)
    _figure_legend(fig)
    fig.tight_layout()
    return fig


def _error_bars(ax: plt.Axes, x, y, low, high, style: dict) -> None:
    """Error bars from ``low`` to ``high`` around ``y`` where both ends are known."""
    known = low.notna() & high.notna()
    if not known.any():
        return
    y, low, high = y[known], low[known], high[known]
    err = np.vstack([(y - low).clip(lower=0), (high - y).clip(lower=0)])
    ax.errorbar(
        x[known], y, yerr=err, fmt="none", ecolor=style.get("color", "black"), capsize=3, lw=1
    )


FIGURES = {
    "latency_scaling": latency_scaling,
    "bandwidth_utilization": bandwidth_utilization,
    "compute_utilization": compute_utilization,
    "roofline": roofline,
    "memory_footprint": memory_footprint,
    "energy_per_token": energy_per_token,
    "op_breakdown": op_breakdown,
    "efficiency_sweep": efficiency_sweep,
    "decode_graph_speedup": decode_graph_speedup,
}


def draw(name: str, cells: pd.DataFrame, **filters) -> plt.Figure:
    """Draw figure ``name`` from its table (the ops table for ``op_breakdown``, else cells)."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; known: {sorted(FIGURES)}")
    return FIGURES[name](cells, **filters)


def save(fig: plt.Figure, *paths: str | os.PathLike) -> None:
    """Write ``fig`` to each path (format from the suffix); PDFs carry no creation date, so
    the same table gives the same bytes."""
    for path in paths:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        metadata = {"CreationDate": None} if str(path).endswith(".pdf") else {}
        fig.savefig(path, bbox_inches="tight", dpi=150, metadata=metadata)


# ---------------------------------------------------------------------------------------
# Families of imported runs, the TTFT / TPOT crossover and throughput.
#
# Imported runs (ssmbench.importers) keep their own model names ("mamba-130m", "qwen25-
# instruct") and name each model's family in a ``family`` column; our own runs name models
# by family and have no such column.  The figures below colour by :func:`family_of`, so
# both kinds of table (and their concatenation) draw with FAMILY_COLORS; within a family,
# the models of an imported run are told apart by marker, backends by line style.

# Families whose crossing with an attention line the crossover figure marks.
RECURRENT_FAMILIES = ("mamba", "mamba2", "mamba3", "s4d", "deltanet")
_MODEL_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
_DEFAULT_STYLE = dict(linestyle="-", marker=".")


def _smallest_batch(table: pd.DataFrame, batch=None) -> pd.DataFrame:
    """The rows at ``batch`` (one or several), else at the table's smallest batch."""
    table = _filter(table, batch=batch)
    if _as_list(batch) is None and not table.empty:
        table = table[table.batch == table.batch.min()]
    return table


def _steps(table: pd.DataFrame) -> pd.Series:
    """Tokens per sequence in each timed call (``tokens / batch``): T for a prefill, 1 for
    a decode step; where ``tokens`` is empty, T for prefill and train, 1 for decode."""
    per_sequence = table.tokens / table.batch
    fallback = pd.Series(
        np.where(table.phase == "decode", 1.0, table.seq_len.astype(float)), index=table.index
    )
    return per_sequence.where(per_sequence > 0, fallback)


def _family_lines(table: pd.DataFrame, y: str, x: str = "seq_len") -> list[dict]:
    """One line per (run, model, backend, dtype) of the ok rows with a positive ``y``:
    ``{"label", "model", "family", "x", "y", "style"}``, x ascending.  Labels name the dtype
    and the run only where the table has several."""
    ok = table[(table.status == "ok") & (table[y] > 0) & table[x].notna()]
    ok = ok.assign(_family=family_of(ok))
    several_dtypes = table.dtype.nunique() > 1
    several_runs = table.run.nunique() > 1 if "run" in table else False
    in_family: dict[str, list[str]] = {}
    for family, model in sorted(set(zip(ok._family, ok.model, strict=True))):
        in_family.setdefault(family, []).append(model)
    lines = []
    groups = ok.groupby(["run", "model", "backend", "dtype"], sort=True)
    for (run, model, backend, dt), line in groups:
        line = line.sort_values(x)
        family = line._family.iloc[0]
        style = dict(BACKEND_STYLES.get(backend, _DEFAULT_STYLE))
        if model != family:  # an imported model: a marker of its own within the family
            markers = in_family[family]
            style["marker"] = _MODEL_MARKERS[markers.index(model) % len(_MODEL_MARKERS)]
        label = f"{model} / {backend}"
        label += f" ({dt})" if several_dtypes else ""
        label += f" [{run}]" if several_runs else ""
        lines.append(
            dict(
                label=label,
                model=model,
                family=family,
                x=line[x].to_numpy(dtype=float),
                y=line[y].to_numpy(dtype=float),
                style=dict(color=FAMILY_COLORS.get(family, "black"), markersize=4, **style),
            )
        )
    return lines


def _mark_not_ok_by_family(ax: plt.Axes, rows: pd.DataFrame, floor: float) -> None:
    """As :func:`_mark_not_ok`, coloured by :func:`family_of` instead of the model name."""
    rows = rows[(rows.status != "ok") & rows.seq_len.notna()]
    rows = rows.assign(_family=family_of(rows))
    for (model, status), group in rows.groupby(["model", "status"], sort=True):
        ax.scatter(
            group.seq_len,
            [floor] * len(group),
            marker=STATUS_MARKERS.get(status, "x"),
            color=FAMILY_COLORS.get(group._family.iloc[0], "black"),
            s=60,
            clip_on=False,
            zorder=4,
            label=f"{model}: {status}",
        )


def _crossings(xa, ya, xb, yb) -> list[tuple[float, float]]:
    """Where two polylines cross on log-log axes: both are interpolated linearly in
    (log x, log y) onto the union of their x within the range they share, and each sign
    change of log ya - log yb is solved on its segment.  Returns (x, y) pairs."""
    lo, hi = max(xa.min(), xb.min()), min(xa.max(), xb.max())
    if not lo < hi:
        return []
    grid = np.unique(np.concatenate([xa, xb]))
    lx = np.log(grid[(grid >= lo) & (grid <= hi)])
    la = np.interp(lx, np.log(xa), np.log(ya))
    lb = np.interp(lx, np.log(xb), np.log(yb))
    d = la - lb
    found = []
    for i in range(len(lx) - 1):
        if d[i] * d[i + 1] < 0:
            t = d[i] / (d[i] - d[i + 1])
            found.append((lx[i] + t * (lx[i + 1] - lx[i]), la[i] + t * (la[i + 1] - la[i])))
        elif d[i + 1] == 0 and i + 2 < len(lx) and d[i] * d[i + 2] < 0:  # touches a point
            found.append((lx[i + 1], la[i + 1]))
    return [(float(np.exp(x)), float(np.exp(y))) for x, y in found]


_CROSSOVER_PANELS = (
    # (phase, column, title, y label)
    ("prefill", "ttft_ms", "(a) time to first token (prefill)", "prefill latency, median (ms)"),
    ("decode", "tpot_ms", "(b) time per output token (decode)", "decode ms per token, median"),
)


def _crossover_data(cells, models, backends, batch, dtype) -> pd.DataFrame:
    wanted = dict(phase=["prefill", "decode"], model=models, backend=backends, dtype=dtype)
    data = _with_columns(_filter(cells, **wanted), _CELL_NUMERIC, _CELL_TEXT)
    data = _smallest_batch(data, batch)
    return data.assign(
        ttft_ms=data.time_ms_median.where(data.phase == "prefill"),
        tpot_ms=(data.time_ms_median / _steps(data)).where(data.phase == "decode"),
    )


def crossovers(
    cells: pd.DataFrame,
    models: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    batch: int | None = None,
    dtype: str | Sequence[str] | None = None,
) -> pd.DataFrame:
    """The crossover points of :func:`ttft_tpot_crossover`: for each phase (prefill: time to
    first token; decode: time per output token), each line of a recurrent family
    (RECURRENT_FAMILIES) and each attention line, every T where they cross (log-log
    interpolation between measured points).  Columns phase, recurrent, attention, seq_len,
    time_ms; ``recurrent`` and ``attention`` are line labels."""
    data = _crossover_data(cells, models, backends, batch, dtype)
    rows = []
    for phase, column, *_ in _CROSSOVER_PANELS:
        lines = _family_lines(data[data.phase == phase], column)
        for a in (line for line in lines if line["family"] in RECURRENT_FAMILIES):
            for b in (line for line in lines if line["family"] == "attention"):
                for t, ms in _crossings(a["x"], a["y"], b["x"], b["y"]):
                    rows.append((phase, a["label"], b["label"], t, ms))
    return pd.DataFrame(rows, columns=["phase", "recurrent", "attention", "seq_len", "time_ms"])


def ttft_tpot_crossover(
    cells: pd.DataFrame,
    models: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    batch: int | None = None,
    dtype: str | Sequence[str] | None = None,
    phase: str | None = None,
) -> plt.Figure:
    """Two panels against the context length T, log-log: (a) time to first token (the
    prefill cell's median) and (b) time per output token (the decode cell's median over its
    tokens per sequence); a line per (model, backend), coloured by family
    (:func:`family_of`), so SSM, attention and hybrid lines are told apart.  A star marks
    each T where a recurrent-family line crosses an attention line (:func:`crossovers`),
    labelled with the pair and T.  One batch (``batch``, else the smallest); every dtype
    unless ``dtype`` says which (labels name it when several remain).  Cells that did not
    run are labelled markers at the foot of their panel.  ``phase`` is accepted for a
    uniform notebook interface and ignored: both phases are drawn."""
    title = "Time to first token and time per output token"
    data = _crossover_data(cells, models, backends, batch, dtype)
    if data.empty:
        message = _none_found(
            "prefill or decode cells", model=models, backend=backends, batch=batch, dtype=dtype
        )
        return _empty_figure(title, message, cells)
    points = crossovers(cells, models, backends, batch, dtype)
    fig, axes = plt.subplots(1, len(_CROSSOVER_PANELS), figsize=(12.0, 4.6), squeeze=False)
    for ax, (ph, column, name, ylabel) in zip(axes[0], _CROSSOVER_PANELS, strict=True):
        panel = data[data.phase == ph]
        ax.set_title(name, fontsize=9)
        lines = _family_lines(panel, column)
        if not lines:
            summary = _status_summary(panel)
            _missing(
                ax,
                f"no ok {ph} cell with a time here" + (f" (not ok: {summary})" if summary else ""),
            )
            continue
        for line in lines:
            ax.plot(line["x"], line["y"], label=line["label"], **line["style"])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_xlabel("context length T (tokens)")
        ax.set_ylabel(ylabel)
        here = points[points.phase == ph].reset_index(drop=True)
        for k, p in here.iterrows():
            ax.plot(
                [p.seq_len],
                [p.time_ms],
                marker="*",
                markersize=13,
                markerfacecolor="gold",
                markeredgecolor="black",
                linestyle="",
                zorder=5,
                label="crossover: recurrent = attention",
            )
            ax.annotate(
                f"{p.recurrent.split(' / ')[0]} = {p.attention.split(' / ')[0]}\n"
                f"T ≈ {p.seq_len:,.0f}",
                (p.seq_len, p.time_ms),
                xytext=(-8, 10 + 22 * (k % 3)),
                textcoords="offset points",
                ha="right",
                fontsize=7,
                arrowprops=dict(arrowstyle="-", color="0.4", linewidth=0.6),
            )
        _mark_not_ok_by_family(ax, panel, floor=ax.get_ylim()[0])
    _title(fig, title, data)
    _figure_legend(fig)
    fig.tight_layout()
    return fig


def throughput(
    cells: pd.DataFrame,
    phase: str | Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    batch: int | None = None,
    dtype: str | Sequence[str] | None = None,
) -> plt.Figure:
    """Tokens per second, ``tokens / (time_ms_median / 1e3)``, against T, log-log, a panel
    per phase (prefill, decode, and train where present) and a line per (model, backend),
    coloured by family (:func:`family_of`).  Where ``tokens`` is empty it is batch x T for
    prefill and train and batch for decode.  One batch (``batch``, else the smallest); every
    dtype unless ``dtype`` says which.  Cells that did not run are labelled markers."""
    title = "Throughput"
    wanted = dict(phase=phase, model=models, backend=backends, dtype=dtype)
    data = _with_columns(_filter(cells, **wanted), _CELL_NUMERIC, _CELL_TEXT)
    data = _smallest_batch(data, batch)
    if data.empty:
        return _empty_figure(title, _none_found("cells", **wanted, batch=batch), cells)
    data = data.assign(
        tokens_per_s=_steps(data) * data.batch / (data.time_ms_median / 1e3),
    )
    phases = _phases(data)
    fig, axes = plt.subplots(1, len(phases), figsize=(5.4 * len(phases), 4.4), squeeze=False)
    for ax, ph in zip(axes[0], phases, strict=True):
        panel = data[data.phase == ph]
        ax.set_title(ph, fontsize=9)
        lines = _family_lines(panel, "tokens_per_s")
        if not lines:
            summary = _status_summary(panel)
            _missing(
                ax,
                f"no ok {ph} cell with a time here" + (f" (not ok: {summary})" if summary else ""),
            )
            continue
        for line in lines:
            ax.plot(line["x"], line["y"], label=line["label"], **line["style"])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_xlabel(
            "context length T (tokens)" if ph == "decode" else "sequence length T (tokens)"
        )
        ax.set_ylabel("tokens / s")
        _mark_not_ok_by_family(ax, panel, floor=ax.get_ylim()[0])
    _title(fig, title, data)
    _figure_legend(fig)
    fig.tight_layout()
    return fig


FIGURES["ttft_tpot_crossover"] = ttft_tpot_crossover
FIGURES["throughput"] = throughput


# ---------------------------------------------------------------------------------------
# Go / no-go: attention against each SSM, strongest backend against strongest backend.


def go_no_go(
    table: pd.DataFrame,
    models: Sequence[str] | None = None,
    batch: int | None = None,
    phase: str | None = None,
    backends: Sequence[str] | None = None,
) -> plt.Figure:
    """Attention over each SSM, against T, a panel per phase: the FLOP ratio (dashed) next
    to the realized latency ratio (solid, with its 95% interval as error bars: filled
    markers where the interval is paired, open where it comes from separate cells) and,
    where measured, the energy ratio (dotted), from the go/no-go table
    (:func:`ssmbench.analysis.go_no_go_table`).  Above 1, the SSM does less / is faster;
    a point whose interval holds 1 is inconclusive.  When the latency ratio tracks the
    FLOP ratio the hardware turns the SSM's smaller work into time; when it stays below,
    the SSM's arithmetic runs at a lower rate than attention's.  ``models`` selects SSM
    families, ``batch`` one batch (default: the smallest); ``phase`` and ``backends`` are
    accepted for a uniform notebook interface (every phase is drawn, each side at its
    strongest backend)."""
    title = "Go / no-go: attention over SSM, strongest backends"
    numeric = ("flop_ratio", "latency_ratio", "latency_lo", "latency_hi", "energy_ratio")
    text = ("interval", "answer", "attention_compute_dtype", "ssm_compute_dtype")
    table = _with_columns(table, numeric, text)
    if models:
        table = table[table.ssm.isin(_as_list(models))]
    table = _one_setting(table, batch, None)
    if table.empty:
        return _empty_figure(title, "no phase and T with ok attention and SSM cells", table)
    phases = [p for p in PHASES if p in set(table.phase)]
    fig, axes = plt.subplots(1, len(phases), figsize=(5.6 * len(phases), 4.4), squeeze=False)
    for ax, ph in zip(axes[0], phases, strict=True):
        panel = table[table.phase == ph]
        backends_used = sorted(set(panel.attention_backend) | set(panel.ssm_backend))
        ax.set_title(f"{ph} (backends {', '.join(backends_used)})", fontsize=9)
        for ssm, line in panel.groupby("ssm", sort=True):
            line = line.sort_values("seq_len")
            color = FAMILY_COLORS.get(ssm, "black")
            ax.plot(line.seq_len, line.latency_ratio, color=color, label=f"{ssm}: latency")
            for source, marker_face in (("paired", color), ("separate cells", "white")):
                part = line[line.interval == source]
                ax.plot(
                    part.seq_len,
                    part.latency_ratio,
                    linestyle="none",
                    marker="o",
                    color=color,
                    markerfacecolor=marker_face,
                )
            _error_bars(
                ax,
                line.seq_len,
                line.latency_ratio,
                line.latency_lo,
                line.latency_hi,
                dict(color=color),
            )
            ax.plot(line.seq_len, line.flop_ratio, color=color, linestyle="--", alpha=0.7)
            if line.energy_ratio.notna().any():
                ax.plot(line.seq_len, line.energy_ratio, color=color, linestyle=":")
        ax.axhline(1.0, color="0.3", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T (tokens)")
        ax.set_ylabel("attention / SSM")
        ax.grid(True, which="both", alpha=0.3)
    styles = [
        Line2D([], [], color="0.3", marker="o", label="latency ratio, paired cells (95% CI)"),
        Line2D(
            [],
            [],
            color="0.3",
            marker="o",
            markerfacecolor="white",
            label="latency ratio, separate cells (95% CI)",
        ),
        Line2D([], [], color="0.3", linestyle="--", label="FLOP ratio"),
        Line2D([], [], color="0.3", linestyle=":", label="energy ratio"),
    ]
    mixed = table[
        (table.attention_compute_dtype != table.ssm_compute_dtype)
        & (table.attention_compute_dtype != "")
        & (table.ssm_compute_dtype != "")
    ]
    extra = ""
    if not mixed.empty:
        combos = sorted(
            {
                f"attention {a} vs SSM {b}"
                for a, b in zip(mixed.attention_compute_dtype, mixed.ssm_compute_dtype, strict=True)
            }
        )
        extra = "compute precision differs: " + ", ".join(combos)
    fig.suptitle(f"{title}\n{_caption(table, extra)}", fontsize=10)
    _figure_legend(fig, styles)
    fig.tight_layout()
    return fig


FIGURES["go_no_go"] = go_no_go


# ---------------------------------------------------------------------------------------
# Claims: published numbers against ours (the claims table, ssmbench.claims).

VERDICT_COLORS = {"reproduced": "#2ca02c", "contradicted": "#d62728", "not comparable here": "0.5"}


def _range(low, high) -> str:
    def num(v):
        return f"{v:.4g}"

    if pd.isna(low):
        return f"<= {num(high)}"
    if pd.isna(high):
        return f">= {num(low)}"
    return f"{num(low)}-{num(high)}"


def claims(table: pd.DataFrame, **ignored) -> plt.Figure:
    """One row per published claim (``tables/claims.csv``): the claim, its source and
    hardware, the published value or range, ours, and the verdict in its colour, with the
    reason when this run cannot test it.  Filters are accepted and ignored (a claim names
    its own cells)."""
    title = "Claims: published numbers against this run"
    if table.empty:
        fig, ax = plt.subplots(figsize=(8, 2))
        _missing(ax, "no claims in the table")
        fig.suptitle(title)
        return fig
    wrap = textwrap.TextWrapper(width=58)
    rows, colors = [], []
    for r in table.itertuples():
        ours = "" if pd.isna(r.ours) else f"{r.ours:.3g}"
        low, high = getattr(r, "ours_lo", np.nan), getattr(r, "ours_hi", np.nan)
        if ours and not (pd.isna(low) or pd.isna(high)):
            ours += f"\n[{low:.3g}-{high:.3g}]"  # its 95% interval
        verdict = r.verdict if r.verdict != "not comparable here" else f"not comparable: {r.why}"
        rows.append(
            [
                "\n".join(wrap.wrap(r.claim)),
                "\n".join(wrap.wrap(f"{r.source}; {r.hardware}")),
                r.published
                if "published" in table and isinstance(r.published, str)
                else _range(r.published_low, r.published_high),
                ours,
                "\n".join(textwrap.wrap(verdict, 34)),
            ]
        )
        colors.append(VERDICT_COLORS.get(r.verdict, "black"))
    height = 1.0 + sum(max(cell.count("\n") + 1 for cell in row) for row in rows) * 0.22
    fig, ax = plt.subplots(figsize=(15, height))
    ax.axis("off")
    grid = ax.table(
        cellText=rows,
        colLabels=["claim", "source; hardware", "published", "ours", "verdict"],
        colWidths=[0.33, 0.33, 0.08, 0.06, 0.20],
        loc="upper center",
        cellLoc="left",
    )
    grid.auto_set_font_size(False)
    grid.set_fontsize(7)
    for i, row in enumerate(rows, start=1):
        lines = max(cell.count("\n") + 1 for cell in row)
        for j in range(len(row)):
            grid[i, j].set_height(0.9 * lines / (len(rows) + 1) / max(1, height / 3))
        grid[i, 4].get_text().set_color(colors[i - 1])
    runs = ", ".join(sorted(set(table.run.astype(str))))
    fig.suptitle(f"{title} (run {runs})", fontsize=11)
    return fig


FIGURES["claims"] = claims
