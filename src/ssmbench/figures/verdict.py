"""The verdict's figures: go / no-go (attention against each SSM, strongest backend against
strongest backend, from ssmbench.analysis.go_no_go_table) and the claims table (published
numbers against ours, from ssmbench.claims)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from ssmbench.figures import panels as P
from ssmbench.figures.data import as_list, caption, one_setting, with_columns
from ssmbench.figures.panels import plt
from ssmbench.figures.style import VERDICT_COLORS, color
from ssmbench.registry import PHASES


def go_no_go(
    table: pd.DataFrame,
    models: Sequence[str] | None = None,
    batch: int | None = None,
    phase: str | None = None,
    backends: Sequence[str] | None = None,
) -> plt.Figure:
    """Attention over each SSM, against T, a panel per phase: the FLOP ratio (dashed) next
    to the realized latency ratio (solid, with its 95% interval as error bars: filled
    markers where the interval is paired, open where it comes from separate cells; small
    faint dots behind a paired point are its replicate processes' own ratios) and,
    where measured, the energy ratio (dotted), from the go/no-go table
    (:func:`ssmbench.analysis.go_no_go_table`).  Above 1, the SSM does less / is faster;
    a point whose interval holds 1 is inconclusive.  When the latency ratio tracks the
    FLOP ratio the hardware turns the SSM's smaller work into time; when it stays below,
    the SSM's arithmetic runs at a lower rate than attention's.  ``models`` selects SSM
    families, ``batch`` one batch (default: the smallest); ``phase`` and ``backends`` are
    accepted for a uniform notebook interface (every phase is drawn, each side at its
    strongest backend)."""
    name = "Go / no-go: attention over SSM, strongest backends"
    numeric = ("flop_ratio", "latency_ratio", "latency_lo", "latency_hi", "energy_ratio")
    text = ("interval", "answer", "attention_compute_dtype", "ssm_compute_dtype", "process_ratios")
    table = with_columns(table, numeric, text)
    if models:
        table = table[table.ssm.isin(as_list(models))]
    table = one_setting(table, batch, None)
    if table.empty:
        return P.empty_figure(name, "no phase and T with ok attention and SSM cells", table)
    shown = [p for p in PHASES if p in set(table.phase)]
    fig, axes = plt.subplots(1, len(shown), figsize=(5.6 * len(shown), 4.4), squeeze=False)
    for ax, ph in zip(axes[0], shown, strict=True):
        panel = table[table.phase == ph]
        backends_used = sorted(set(panel.attention_backend) | set(panel.ssm_backend))
        ax.set_title(f"{ph} (backends {', '.join(backends_used)})", fontsize=9)
        for ssm, line in panel.groupby("ssm", sort=True):
            line = line.sort_values("seq_len")
            c = color(ssm)
            ax.plot(line.seq_len, line.latency_ratio, color=c, label=f"{ssm}: latency")
            _process_points(ax, line, c)
            paired = line.interval.isin(PAIRED_KINDS)
            for part, marker_face in ((line[paired], c), (line[~paired], "white")):
                ax.plot(
                    part.seq_len,
                    part.latency_ratio,
                    linestyle="none",
                    marker="o",
                    color=c,
                    markerfacecolor=marker_face,
                )
            low, high = line.latency_lo, line.latency_hi
            P.error_bars(ax, line.seq_len, line.latency_ratio, low, high, dict(color=c))
            ax.plot(line.seq_len, line.flop_ratio, color=c, linestyle="--", alpha=0.7)
            if line.energy_ratio.notna().any():
                ax.plot(line.seq_len, line.energy_ratio, color=c, linestyle=":")
        ax.axhline(1.0, color="0.3", linewidth=1)
        P.log_log(ax, ylabel="attention / SSM")
    styles = [
        Line2D([], [], color="0.3", marker="o", label="latency ratio, paired cells (95% CI)"),
        Line2D(
            [],
            [],
            color="0.3",
            marker=".",
            linestyle="none",
            alpha=0.45,
            label="one replicate process's ratio",
        ),  # fmt: skip
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
    fig.suptitle(f"{name}\n{caption(table, _precision_note(table))}", fontsize=10)
    P.figure_legend(fig, styles)
    fig.tight_layout()
    return fig


# go/no-go interval kinds that come from paired cells (ssmbench.analysis.PAIRED_SOURCES,
# and "paired" in tables from before replicates)
PAIRED_KINDS = ("hierarchical", "within-process", "paired")


def _process_points(ax, line: pd.DataFrame, c) -> None:
    """Each row's per-process ratios (``process_ratios``, ";"-joined) as faint dots at its
    T, spread a little sideways so that equal ones stay visible."""
    for seq_len, ratios in zip(line.seq_len, line.process_ratios, strict=True):
        values = [float(v) for v in str(ratios).split(";") if v.strip()]
        if len(values) < 2:
            continue
        offsets = np.linspace(-0.04, 0.04, len(values))
        ax.plot(seq_len * np.exp(offsets), values, linestyle="none", marker=".", color=c,
                alpha=0.45, markersize=4)  # fmt: skip


def _precision_note(table: pd.DataFrame) -> str:
    """Which rows compare different compute precisions ("" when none do)."""
    a, s = table.attention_compute_dtype, table.ssm_compute_dtype
    mixed = table[(a != s) & (a != "") & (s != "")]
    if mixed.empty:
        return ""
    combos = sorted(
        {
            f"attention {x} vs SSM {y}"
            for x, y in zip(mixed.attention_compute_dtype, mixed.ssm_compute_dtype, strict=True)
        }
    )
    return "compute precision differs: " + ", ".join(combos)


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
    name = "Claims: published numbers against this run"
    if table.empty:
        fig, ax = plt.subplots(figsize=(8, 2))
        P.missing(ax, "no claims in the table")
        fig.suptitle(name)
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
    fig.suptitle(f"{name} (run {runs})", fontsize=11)
    return fig
