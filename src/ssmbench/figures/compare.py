"""Cross-device figures: two or more runs side by side, from the comparison table
(:func:`ssmbench.compare.compare_table`): latency over T, the go/no-go ratio with its
interval, and utilization of each device's own ceilings.  A family keeps its colour
(:mod:`ssmbench.figures.style`); a run is told by its line style and marker
(:data:`RUN_STYLES`), named with its device as the catalogue names it.  Only (family, phase,
batch) lines where two runs meet at some T are drawn: filled markers where they meet, open
ones where only this run measured; the title says what met nowhere
(:func:`ssmbench.compare.unmet`)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import pandas as pd
from matplotlib.lines import Line2D

from ssmbench.compare import POINT, compared, unmet
from ssmbench.figures import panels as P
from ssmbench.figures.data import as_list
from ssmbench.figures.panels import plt
from ssmbench.figures.style import color
from ssmbench.registry import PHASES

# a run's (line style, marker), in the order the runs appear in the table
RUN_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1)), "v"))
MEASURED = {"compute": "compute_util", "bandwidth": "bw_util"}


def _run_styles(table: pd.DataFrame) -> dict[str, tuple]:
    runs = compared(table)
    return {run: RUN_STYLES[i % len(RUN_STYLES)] for i, run in enumerate(runs)}


def _run_labels(table: pd.DataFrame) -> dict[str, str]:
    """``run (device kind; dtypes of its cells)`` for every run of ``table``."""
    labels = {}
    for run, rows in table[table.quantity == "time_ms"].groupby("run", sort=False):
        kinds = ", ".join(sorted(set(rows.device_kind) - {""})) or "unknown device"
        dtypes = ", ".join(sorted(set(rows["dtype"]) - {""}))
        labels[run] = f"{run} ({kinds}; {dtypes})" if dtypes else f"{run} ({kinds})"
    return labels


def _met_lines(rows: pd.DataFrame, at=None) -> pd.DataFrame:
    """The rows of (run, family, phase, batch) lines that meet another run at some T
    (``at``: a set of POINT tuples where they must meet instead of their own ``meets``)."""
    if at is not None:
        rows = rows.assign(meets=[tuple(p) in at for p in rows[POINT].itertuples(index=False)])
    line = ["run", "family", "phase", "batch"]
    return rows[rows.groupby(line).meets.transform("any")]


def _selected(table: pd.DataFrame, quantity: str, models, batch) -> pd.DataFrame:
    rows = table[table.quantity == quantity]
    if as_list(models):
        rows = rows[rows.family.isin(as_list(models))]
    if batch is not None:
        rows = rows[rows.batch == int(batch)]
    return rows


def _draw_line(ax, line: pd.DataFrame, family: str, style: tuple) -> None:
    """One run's line of one family: filled markers where it meets another run, open where
    it does not, error bars where it has an interval."""
    line = line.sort_values("seq_len")
    linestyle, marker = style
    c = color(family)
    ax.plot(line.seq_len, line.value, color=c, linestyle=linestyle, linewidth=1.3)
    for part, face in ((line[line.meets], c), (line[~line.meets], "white")):
        ax.plot(part.seq_len, part.value, linestyle="none", marker=marker, color=c,
                markerfacecolor=face, markersize=5)  # fmt: skip
    P.error_bars(ax, line.seq_len, line.value, line.lo, line.hi, dict(color=c))


def _panels(fig_rows: pd.DataFrame, ncols: int = 3):
    shown = [p for p in PHASES if p in set(fig_rows.phase)]
    fig, axes = P.grid(len(shown), ncols=ncols, width=5.0, height=4.0)
    return fig, dict(zip(shown, axes, strict=True))


def _legend(fig, table: pd.DataFrame, drawn: pd.DataFrame, extra: Sequence = ()) -> None:
    styles, labels = _run_styles(table), _run_labels(table)
    handles = [
        Line2D([], [], color="0.3", linestyle=styles[r][0], marker=styles[r][1], label=labels[r])
        for r in dict.fromkeys(drawn.run)
    ]
    handles += [
        Line2D([], [], color=color(f), label=f) for f in sorted(set(drawn.family))
    ]  # fmt: skip
    handles += [
        Line2D([], [], color="0.3", marker="o", linestyle="none", label="point two runs share"),
        Line2D([], [], color="0.3", marker="o", markerfacecolor="white", linestyle="none",
               label="this run only"),
        *extra,
    ]  # fmt: skip
    P.figure_legend(fig, handles)


def _models_note(drawn: pd.DataFrame) -> str:
    """The runs whose rows are models of their own (an imported run's whole models), not
    our blocks named by family: ``ssm-scope-rtx4090 draws falcon-h1-0.5b (hybrid), ...``."""
    said = []
    for run, rows in drawn.groupby("run", sort=False):
        own = rows[rows.model != rows.family].drop_duplicates(["model", "family"])
        if not own.empty:
            models = ", ".join(
                f"{m} ({f})" for m, f in sorted(zip(own.model, own.family, strict=True))
            )
            said.append(f"{run} draws {models}")
    return "; ".join(said)


def _title(fig, name: str, table: pd.DataFrame, quantity: str, *notes: str) -> None:
    """The figure's title: the runs, what met nowhere, and ``notes``."""
    runs = compared(table)
    missing = unmet(table, quantity, runs)
    said = "; ".join(missing) if missing else "nothing" if runs else "no runs to compare"
    lines = [f"{name}: {', '.join(runs)}", f"not met: {said}", *[n for n in notes if n]]
    fig.suptitle("\n".join(textwrap.fill(line, 150) for line in lines), fontsize=9)


def _empty(name: str, table: pd.DataFrame, quantity: str, what: str) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    P.missing(ax, f"no {what} where two runs meet (same family, phase, batch and T)")
    _title(fig, name, table, quantity)
    fig.tight_layout()
    return fig


def latency_across_devices(
    table: pd.DataFrame,
    models: Sequence[str] | None = None,
    batch: int | None = None,
    phase: str | None = None,
    backends: Sequence[str] | None = None,
) -> plt.Figure:
    """Latency against T, a panel per phase, each run's line per family where two runs
    meet: each run at its lowest measured precision and fastest backend there (the legend
    names the runs' devices and dtypes), with the interval over processes of a replicated
    cell.  Devices, precisions and kinds of model differ between runs (a block against a
    whole model, for an imported run): the shapes over T compare, the absolute times are
    each run's own.  ``models`` selects families, ``batch`` one batch; ``phase`` and
    ``backends`` are accepted for a uniform notebook interface."""
    name = "Latency across devices"
    rows = _met_lines(_selected(table, "time_ms", models, batch))
    if rows.empty:
        return _empty(name, table, "time_ms", "latency")
    fig, axes = _panels(rows)
    styles = _run_styles(table)
    for ph, ax in axes.items():
        part = rows[rows.phase == ph]
        for (run, family, _batch), line in part.groupby(["run", "family", "batch"], sort=False):
            _draw_line(ax, line, family, styles[run])
        ax.set_title(f"{ph} (batch {', '.join(map(str, sorted(set(part.batch))))})", fontsize=9)
        P.log_log(ax, ylabel="time per call (ms)")
    _legend(fig, table, rows)
    _title(fig, name, table, "time_ms", _models_note(rows))
    fig.tight_layout()
    return fig


def go_no_go_across_devices(
    table: pd.DataFrame,
    models: Sequence[str] | None = None,
    batch: int | None = None,
    phase: str | None = None,
    backends: Sequence[str] | None = None,
) -> plt.Figure:
    """Attention's latency over each SSM's against T, a panel per phase, each run's line per
    SSM family where two runs meet, with the run's own 95% interval (a run's go/no-go table:
    paired or separate cells; an imported run's single measurements have none, and the
    title says so).  Above 1 the SSM is faster on that device.  ``models`` selects SSM
    families, ``batch`` one batch."""
    name = "Go / no-go across devices: attention over SSM latency"
    rows = _met_lines(_selected(table, "latency_ratio", models, batch))
    if rows.empty:
        return _empty(name, table, "latency_ratio", "attention / SSM ratio")
    fig, axes = _panels(rows)
    styles = _run_styles(table)
    for ph, ax in axes.items():
        part = rows[rows.phase == ph]
        for (run, family, _batch), line in part.groupby(["run", "family", "batch"], sort=False):
            _draw_line(ax, line, family, styles[run])
        ax.axhline(1.0, color="0.3", linewidth=1)
        ax.set_title(f"{ph} (batch {', '.join(map(str, sorted(set(part.batch))))})", fontsize=9)
        P.log_log(ax, ylabel="attention / SSM latency")
    without = sorted(set(rows.run[rows.lo.isna() | rows.hi.isna()]))
    note = f"no interval: {', '.join(without)} (single measurements)" if without else ""
    _legend(fig, table, rows)
    _title(fig, name, table, "latency_ratio", note, _models_note(rows))
    fig.tight_layout()
    return fig


def utilization_across_devices(
    table: pd.DataFrame,
    models: Sequence[str] | None = None,
    batch: int | None = None,
    phase: str | None = None,
    backends: Sequence[str] | None = None,
) -> plt.Figure:
    """Each run's utilization of its own device's ceilings, at the points where two runs'
    latencies meet: compute (achieved TFLOP/s over the ceiling at the cell's compute
    precision) and memory bandwidth, a row each, a panel per phase; solid of the run's
    measured ceilings (device.json), dotted of the vendor's peaks where the device
    catalogue has them.  A run without ceilings (an imported one) is named in the title.
    ``models`` selects families, ``batch`` one batch."""
    name = "Utilization across devices, of each device's own ceilings"
    times = table[(table.quantity == "time_ms") & table.meets]
    at = set(times[POINT].itertuples(index=False, name=None))
    parts = {
        (resource, kind): _met_lines(_selected(table, quantity, models, batch), at)
        for resource, measured in MEASURED.items()
        for kind, quantity in (("measured", measured), ("datasheet", f"{measured}_datasheet"))
    }
    drawn = pd.concat(parts.values(), ignore_index=True)
    if drawn.empty:
        return _empty(name, table, "compute_util", "utilization")
    shown = [p for p in PHASES if p in set(drawn.phase)]
    fig, axes = plt.subplots(
        2, len(shown), figsize=(5.0 * len(shown), 7.6), squeeze=False, sharex="col"
    )
    styles = _run_styles(table)
    for col, ph in enumerate(shown):
        for row, resource in enumerate(MEASURED):
            ax = axes[row][col]
            for kind, dotted in (("measured", False), ("datasheet", True)):
                part = parts[(resource, kind)]
                part = part[part.phase == ph]
                for (run, family, _batch), line in part.groupby(["run", "family", "batch"]):
                    style = (":", styles[run][1]) if dotted else styles[run]
                    _draw_line(ax, line, family, style)
            ax.set_title(f"{ph}: {resource}", fontsize=9)
            P.log_log(ax, ylabel=f"fraction of the {resource} ceiling")
    without = sorted(set(compared(table)) - set(drawn.run))
    note = f"no ceilings: {', '.join(without)}" if without else ""
    extra = [Line2D([], [], color="0.3", linestyle=":", label="of the vendor's peak")]
    _legend(fig, table, drawn, extra)
    _title(fig, name, table, "time_ms", note, _models_note(drawn))
    fig.tight_layout()
    return fig
