"""One function per figure.  Reads tables only; imports pandas and matplotlib, never torch.

Every figure colours a family the same way, draws a backend with the same line style,
names the hardware, dtype and batch, and shows cells that did not run (``oom``,
``timeout``, ``unavailable``, ``failed``) as labelled markers instead of gaps.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

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
    "compile": dict(linestyle="--", marker="^"),
    "fused": dict(linestyle="-", marker="D", linewidth=2.2),
    "torch-graph": dict(linestyle="-.", marker="v"),
    "fused-graph": dict(linestyle="-.", marker="P"),
}
STATUS_MARKERS = {"oom": "X", "timeout": "$T$", "unavailable": "$U$", "failed": "$F$"}


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
    names = sorted({str(n) for n in cells.device_name.dropna() if str(n)})
    return ", ".join(names) if names else ", ".join(sorted(set(cells.device)))


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
        floor = ax.get_ylim()[0] if not ok.empty else 1.0
        for (model, status), rows in not_ok.groupby(["model", "status"]):
            ax.scatter(
                rows.seq_len,
                [floor] * len(rows),
                marker=STATUS_MARKERS.get(status, "x"),
                color=FAMILY_COLORS.get(model, "black"),
                s=60,
                clip_on=False,
                label=f"{model}: {status}",
            )


FIGURES = {"latency_scaling": latency_scaling}


def draw(name: str, cells: pd.DataFrame, **filters) -> plt.Figure:
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
