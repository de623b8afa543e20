"""Time against T: latency scaling, time to first token against time per output token (with
their crossovers), and throughput.  Lines are coloured by family
(:func:`ssmbench.tables.family_of`), so our runs and imported ones draw alike."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ssmbench.analysis import CROSSOVER_COLUMNS, crossover_data, crossovers, steps
from ssmbench.figures import panels as P
from ssmbench.figures.data import (
    cells_of,
    family_lines,
    none_found,
    not_ok_note,
    phases,
    smallest_batch,
    with_columns,
)
from ssmbench.figures.panels import plt


def latency_scaling(
    cells: pd.DataFrame,
    phase: str | None = "prefill",
    models: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    batch: int | Sequence[int] | None = None,
    dtype: str | Sequence[str] | None = None,
) -> plt.Figure:
    """Median latency vs sequence length, log-log, one line per model x backend, the band
    from median to P95; one panel per (batch, dtype).  Cells that did not run are markers
    at the foot of the panel, labelled with their status."""
    name = f"Latency scaling, {phase or 'every phase'}"
    wanted = dict(phase=phase, model=models, backend=backends, batch=batch, dtype=dtype)
    data = with_columns(cells_of(cells, **wanted), ("time_ms_p95",))
    if data.empty:
        return P.empty_figure(name, none_found("cells", **wanted), cells)
    settings = sorted(data.groupby(["batch", "dtype"]).groups)
    fig, axes = plt.subplots(
        1, len(settings), figsize=(5.5 * len(settings), 4.2), squeeze=False, sharey=True
    )
    for ax, (b, dt) in zip(axes[0], settings, strict=True):
        panel = data[(data.batch == b) & (data.dtype == dt)]
        ax.set_title(f"batch {b}, {dt}")
        lines = family_lines(panel, "time_ms_median")
        if not P.draw_lines(ax, lines):
            P.missing(ax, f"no ok {phase or ''} cell with a time here" + not_ok_note(panel))
            continue
        for line in lines:
            p95 = line["rows"].time_ms_p95.to_numpy(dtype=float)
            ax.fill_between(
                line["x"], line["y"], p95, color=line["style"]["color"], alpha=0.15, linewidth=0
            )
        P.log_log(ax)
        P.mark_not_ok(ax, panel, floor=ax.get_ylim()[0])
    axes[0][0].set_ylabel(f"{phase or 'cell'} latency, median (ms)")
    P.title(fig, name, data)
    P.figure_legend(fig)
    fig.tight_layout()
    return fig


_CROSSOVER_PANELS = {
    # phase: (title, y label)
    "prefill": ("(a) time to first token (prefill)", "prefill latency, median (ms)"),
    "decode": ("(b) time per output token (decode)", "decode ms per token, median"),
}


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
    tokens per sequence); a line per (model, backend), coloured by family, so SSM, attention
    and hybrid lines are told apart.  A star marks each T where a recurrent-family line
    crosses an attention line (:func:`ssmbench.analysis.crossovers`), labelled with
    the pair and T.  One batch (``batch``, else the smallest); every dtype unless ``dtype``
    says which (labels name it when several remain).  Cells that did not run are labelled
    markers at the foot of their panel.  ``phase`` is accepted for a uniform notebook
    interface and ignored: both phases are drawn."""
    name = "Time to first token and time per output token"
    data = crossover_data(cells, models, backends, batch, dtype)
    if data.empty:
        message = none_found(
            "prefill or decode cells", model=models, backend=backends, batch=batch, dtype=dtype
        )
        return P.empty_figure(name, message, cells)
    points = crossovers(cells, models, backends, batch, dtype)
    fig, axes = plt.subplots(1, len(_CROSSOVER_PANELS), figsize=(12.0, 4.6), squeeze=False)
    for ax, (ph, column) in zip(axes[0], CROSSOVER_COLUMNS, strict=True):
        panel = data[data.phase == ph]
        panel_title, ylabel = _CROSSOVER_PANELS[ph]
        ax.set_title(panel_title, fontsize=9)
        if not P.draw_lines(ax, family_lines(panel, column)):
            P.missing(ax, f"no ok {ph} cell with a time here" + not_ok_note(panel))
            continue
        P.log_log(ax, "context length T (tokens)", ylabel)
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
        P.mark_not_ok(ax, panel, floor=ax.get_ylim()[0])
    P.title(fig, name, data)
    P.figure_legend(fig)
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
    coloured by family.  Where ``tokens`` is empty it is batch x T for prefill and train and
    batch for decode.  One batch (``batch``, else the smallest); every dtype unless
    ``dtype`` says which.  Cells that did not run are labelled markers."""
    name = "Throughput"
    wanted = dict(phase=phase, model=models, backend=backends, dtype=dtype)
    data = smallest_batch(cells_of(cells, **wanted), batch)
    if data.empty:
        return P.empty_figure(name, none_found("cells", **wanted, batch=batch), cells)
    data = data.assign(tokens_per_s=steps(data) * data.batch / (data.time_ms_median / 1e3))
    shown = phases(data)
    fig, axes = plt.subplots(1, len(shown), figsize=(5.4 * len(shown), 4.4), squeeze=False)
    for ax, ph in zip(axes[0], shown, strict=True):
        panel = data[data.phase == ph]
        ax.set_title(ph, fontsize=9)
        if not P.draw_lines(ax, family_lines(panel, "tokens_per_s")):
            P.missing(ax, f"no ok {ph} cell with a time here" + not_ok_note(panel))
            continue
        kind = "context" if ph == "decode" else "sequence"
        P.log_log(ax, f"{kind} length T (tokens)", "tokens / s")
        P.mark_not_ok(ax, panel, floor=ax.get_ylim()[0])
    P.title(fig, name, data)
    P.figure_legend(fig)
    fig.tight_layout()
    return fig
