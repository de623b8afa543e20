"""Operator breakdown: where the profiled time goes, from the ops table."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ssmbench.figures import panels as P
from ssmbench.figures.data import (
    families,
    joined,
    none_found,
    one_setting,
    phases,
    select,
    with_columns,
)
from ssmbench.figures.panels import plt
from ssmbench.figures.style import BUCKET_COLORS, color


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
    name = "Operator breakdown"
    wanted = dict(phase=phase, model=models, backend=backends)
    if "status" in ops:  # a cell that could not be profiled has a status row, no times
        ops = ops[ops.status.fillna("ok") == "ok"]
    data = with_columns(
        select(ops, **wanted),
        ("time_ms", "share", "n_kernels"),
        ("time_basis", "bucket", "dtype", "run", "device_name"),
    )
    data = one_setting(data, batch, dtype)
    if data.empty:
        message = none_found("operator profile", **wanted, batch=batch, dtype=dtype)
        return P.empty_figure(name, message.replace("the table", "the ops table"), ops)
    buckets = [b for b in BUCKET_COLORS if b in set(data.bucket)]
    buckets += sorted(set(data.bucket) - set(BUCKET_COLORS))
    several_phases = data.phase.nunique() > 1
    keys = sorted(
        data.groupby(["model", "backend", "phase"]).groups,
        key=lambda k: (families(data).index(k[0]), k[1], phases(data).index(k[2])),
    )
    fig, axes = P.grid(len(keys), height=3.8)
    for ax, (model, backend, ph) in zip(axes, keys, strict=True):
        panel = data[(data.model == model) & (data.backend == backend) & (data.phase == ph)]
        basis = joined(panel, "time_basis") or "time basis not recorded"
        label = f"{model} / {backend}" + (f", {ph}" if several_phases else "")
        ax.set_title(f"{label}\n({basis})", color=color(model), fontsize=9)
        lengths = sorted(set(panel.seq_len))
        total_ms = panel.groupby("seq_len").time_ms.sum(min_count=1)
        share = panel.share.where(panel.share.notna(), panel.time_ms / panel.seq_len.map(total_ms))
        shares = panel.assign(share=share).pivot_table(
            index="seq_len", columns="bucket", values="share", aggfunc="sum"
        )
        shares = shares.reindex(index=lengths, columns=buckets).fillna(0.0)
        if not shares.to_numpy().any():
            P.missing(ax, "no operator times recorded here")
            continue
        bottom = np.zeros(len(lengths))
        for bucket in buckets:
            if not shares[bucket].any():
                continue
            ax.bar(
                range(len(lengths)),
                shares[bucket].to_numpy(),
                bottom=bottom,
                width=0.7,
                color=BUCKET_COLORS.get(bucket, "0.8"),
                edgecolor="white",
                linewidth=0.5,
                label=bucket,
            )
            bottom += shares[bucket].to_numpy()
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
    bases = joined(data, "time_basis")
    P.title(fig, name, data, f"time basis: {bases}" if bases else "")
    P.figure_legend(fig)
    fig.tight_layout()
    return fig
