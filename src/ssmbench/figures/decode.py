"""CUDA-graph decode: the eager step over its graph replay, from the speed-ups table."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ssmbench.analysis import GRAPH_TARGET
from ssmbench.figures import panels as P
from ssmbench.figures.data import caption, none_found, select, status_summary, with_columns
from ssmbench.figures.panels import plt
from ssmbench.figures.style import line_style
from ssmbench.registry import GRAPH_PAIRS


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
    name = f"Decode: eager step / CUDA-graph replay, batch {batch}"
    data = with_columns(
        select(table, model=models, batch=batch),
        ("eager_ms", "graph_ms", "speedup", "speedup_lo", "speedup_hi"),
        ("run", "reason"),
    )
    if data.empty:
        message = none_found("CUDA-graph decode cells", model=models, batch=batch)
        return P.empty_figure(name, message, table)
    fig, axes = plt.subplots(
        1, len(GRAPH_PAIRS), figsize=(6.0 * len(GRAPH_PAIRS), 4.2), squeeze=False
    )
    for ax, (eager, graph) in zip(axes[0], GRAPH_PAIRS, strict=True):
        ax.set_title(f"{eager} / {graph}", fontsize=9)
        rows = data[data.graph == graph]
        pairs = rows[(rows.status == "ok") & rows.speedup.notna()]
        not_ok = rows[rows.status != "ok"]
        if pairs.empty:
            summary = status_summary(rows)
            P.missing(
                ax,
                f"no ok {graph} decode cells with an ok {eager} twin"
                + (f" ({summary})" if summary else ""),
            )
            P.mark_not_ok(ax, not_ok, floor=0.5)
            continue
        for model, line in pairs.groupby("model", sort=True):
            line = line.sort_values("seq_len")
            style = line_style(model, graph)
            ax.plot(line.seq_len, line.speedup, label=model, **style)
            P.error_bars(ax, line.seq_len, line.speedup, line.speedup_lo, line.speedup_hi, style)
        ax.axhline(GRAPH_TARGET, color="0.4", linestyle="--", linewidth=1, label="3x target")
        P.log_log(ax, "cached tokens T", "eager / graph latency (95% interval)")
        P.mark_not_ok(ax, not_ok, floor=ax.get_ylim()[0])
    fig.suptitle(f"{name}\n{caption(data)}", fontsize=10)
    P.figure_legend(fig)
    fig.tight_layout()
    return fig
