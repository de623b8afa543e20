"""The quality axis: how well each family learns the case study's tasks, and what that
quality costs in time.  Both figures read a task table (one row per task, eval, family and
seed, made by the workflow's figure_table rule); pandas and matplotlib, never torch.

A panel is one scored split, ``(task, eval)``: parity and selective copying are scored on
``test``, exact copying at each evaluation length (``L32``, ``L64``, ``L128``), IMDb on
``test``.  A seed that did not run is a labelled status marker at the foot of its panel; a
panel whose rows are all ``unavailable`` (IMDb not on disk) says so with the reason.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ssmbench.figures import panels as P
from ssmbench.figures.data import joined, none_found, select, with_columns
from ssmbench.figures.panels import plt
from ssmbench.figures.style import STATUS_MARKERS, color
from ssmbench.registry import FAMILIES, VARIANTS

# The task table's columns (quality_vs_speed.csv adds the SPEED ones), read as numbers or text
# whatever the table's vintage, so an empty or older table draws a panel instead of failing.
NUMERIC = ("seed", "value", "study", "chance")
TEXT = ("task", "eval", "metric", "family", "status", "reason", "cut", "device")
SPEED_NUMERIC = ("prefill_ms", "decode_ms", "speed_T", "speed_batch")
SPEED_TEXT = ("speed_backend",)

# The panels' order: the case study's order of its tasks; a task it lacks comes after, by name.
TASK_ORDER = ("parity", "selective_copy", "exact_copy", "imdb")
# The case study's published numbers are one training run each, on its author's laptop GPU.
STUDY_LABEL = "case study (1 seed, RTX 4050)"
JITTER = 0.09  # x offset between neighbouring seeds, in family slots (deterministic)
FLOOR = 0.0  # the height of a seed that did not run: the foot of a [0, 1] panel


def _rows(table: pd.DataFrame, speed: bool = False) -> pd.DataFrame:
    """``table`` with every column a task figure reads, less rows that name no task (a table
    of another kind, such as the cells table, has none)."""
    numeric = NUMERIC + (SPEED_NUMERIC if speed else ())
    text = TEXT + (SPEED_TEXT if speed else ())
    rows = with_columns(table, numeric, text)
    return rows[rows.task != ""]


def _split_key(split: tuple[str, str]) -> tuple:
    """Sort key of a ``(task, eval)``: TASK_ORDER, then ``test`` before the lengths, which
    go shortest first (``L32`` < ``L64`` < ``L128``)."""
    task, ev = split
    rank = TASK_ORDER.index(task) if task in TASK_ORDER else len(TASK_ORDER)
    digits = ev[1:] if ev[:1] == "L" else ""
    length = int(digits) if digits.isdigit() else -1
    return (rank, task, length, ev)


def _splits(data: pd.DataFrame) -> list[tuple[str, str]]:
    return sorted(data.groupby(["task", "eval"]).groups, key=_split_key)


def _families(data: pd.DataFrame) -> list[str]:
    """The families of ``data`` in the registry's order, each named variant right after
    its family, then any other by name."""
    present = set(data.family)
    known = [name for f in FAMILIES for name in (f, *_variants_of(f))]
    return [f for f in known if f in present] + sorted(present - set(known))


def _variants_of(family: str) -> list[str]:
    return [v.name for v in VARIANTS.values() if v.family == family]


def _split_title(task: str, ev: str) -> str:
    return task if ev in ("test", "") else f"{task}, {ev}"


def _ok(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows that ran and were scored."""
    return rows[(rows.status == "ok") & rows.value.notna()]


def _unavailable_message(task: str, ev: str, rows: pd.DataFrame) -> str | None:
    """What a panel says when every one of its rows is ``unavailable``, else None."""
    if rows.empty or not (rows.status == "unavailable").all():
        return None
    return f"{_split_title(task, ev)}: unavailable: {joined(rows, 'reason') or 'no reason given'}"


def _not_run(ax: plt.Axes, xs: list[float], status: str, family: str) -> None:
    """Seeds of ``family`` that did not run, as its status's marker at the panel's foot."""
    ax.scatter(
        xs,
        [FLOOR] * len(xs),
        marker=STATUS_MARKERS.get(status, "x"),
        color=color(family),
        s=50,
        clip_on=False,
        zorder=4,
        label=f"{family}: {status}",
    )


def _first(rows: pd.DataFrame, col: str) -> float:
    """The first known value of ``col`` in ``rows`` (NaN if none)."""
    known = rows[col].dropna()
    return float(known.iloc[0]) if len(known) else float("nan")


def _chance(ax: plt.Axes, rows: pd.DataFrame) -> None:
    chance = _first(rows, "chance")
    if not np.isnan(chance):
        ax.axhline(chance, linestyle="--", color="0.45", linewidth=1, label="chance")


def _budget(data: pd.DataFrame) -> str:
    """The title's words on the budget: whether this run's training was cut from the study's."""
    cut = joined(data, "cut")
    return "budget cut from the case study's (footnote)" if cut else "the case study's budget"


def _cut_note(data: pd.DataFrame) -> str:
    """The cut, said once per task (each task's training is cut on its own), or ""."""
    by_task = [
        (task, joined(data[data.task == task], "cut"))
        for task in sorted(set(data.task), key=lambda t: _split_key((t, "")))
    ]
    cuts = [(task, cut) for task, cut in by_task if cut]
    if len({cut for _, cut in cuts}) <= 1:  # one cut for every task: said once
        return cuts[0][1] if cuts else ""
    return "; ".join(f"{task}: {cut}" for task, cut in cuts)


def _footnote(fig: plt.Figure, data: pd.DataFrame, *extra: str) -> None:
    """The cut note (how this run's budget differs from the study's) under the panels."""
    cut = _cut_note(data)
    words = [f"budget cut: {cut}" if cut else "budget: as the case study's", *extra]
    fig.text(
        0.01,
        -0.01,
        textwrap.fill(" | ".join(w for w in words if w), 160),
        ha="left",
        va="top",
        fontsize=8,
        color="0.25",
    )


def _seeds_line(data: pd.DataFrame) -> str:
    seeds = sorted({int(s) for s in data.seed.dropna()})
    return f"seeds {', '.join(map(str, seeds))}" if seeds else ""


def _asked(value) -> list[str]:
    return [value] if isinstance(value, str) else list(value or ())


def _missing_splits(data: pd.DataFrame, tasks) -> list[tuple[str, str]]:
    """A ``(task, "")`` for each asked-for task the table has no row of."""
    return [(t, "") for t in _asked(tasks) if t not in set(data.task)]


def _absent(data: pd.DataFrame, **asked) -> str:
    """``no rows of family 'x'``: the asked-for values the selection holds no row of."""
    said = [
        f"{col} {value!r}"
        for col, values in asked.items()
        for value in _asked(values)
        if value not in set(data[col])
    ]
    return f"no rows of {', '.join(said)}" if said else ""


def _legend_keys() -> list[Line2D]:
    """What the black marks of task_accuracy mean (the colours are the families')."""
    return [
        Line2D([], [], color="black", marker="o", linestyle="", markersize=4, label="a seed"),
        Line2D([], [], color="black", linewidth=2.2, label="mean over seeds"),
        Line2D([], [], color="black", linewidth=1, label="min-max over seeds"),
    ]


def task_accuracy(
    table: pd.DataFrame,
    tasks: Sequence[str] | None = None,
    families: Sequence[str] | None = None,
) -> plt.Figure:
    """The headline metric of each task, a panel per (task, eval), families along x in the
    registry's order: each seed a point (offset by its rank, so the same table gives the
    same figure), the mean over seeds a short bar, the min-max spread a line, the case
    study's value a hollow diamond and chance a dashed line.  A seed that did not run is a
    marker at the foot, one per status, labelled ``family: status``; a panel whose rows are
    all ``unavailable`` says so with the reason, and an asked-for task the table lacks is
    a panel saying it is missing.  The footnote says how the budget was cut."""
    name = "Task accuracy"
    wanted = dict(task=tasks, family=families)
    data = select(_rows(table), **wanted)
    if data.empty:
        return P.empty_figure(name, none_found("task rows", **wanted), table)
    shown = _families(data)
    seeds = sorted({int(s) for s in data.seed.dropna()})
    splits = _splits(data) + _missing_splits(data, tasks)
    fig, axes = P.grid(len(splits), ncols=3, width=4.4, height=3.4)
    for ax, (task, ev) in zip(axes, splits, strict=True):
        rows = data[(data.task == task) & (data["eval"] == ev)]
        ax.set_title(_split_title(task, ev), fontsize=9)
        if rows.empty:
            P.missing(ax, f"no rows of task {task!r} in the table")
            continue
        message = _unavailable_message(task, ev, rows)
        if message:
            P.missing(ax, message)
            continue
        for slot, family in enumerate(shown):
            mine = rows[rows.family == family]
            if mine.empty:  # a family trained on other tasks only
                ax.text(
                    slot,
                    0.5,
                    "no row",
                    rotation=90,
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="0.5",
                )
            _family_column(ax, slot, family, mine, seeds)
        _chance(ax, rows)
        ax.set_xticks(range(len(shown)), shown, rotation=40, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(shown) - 0.4)
        ax.set_ylim(-0.04, 1.04)
        ax.set_ylabel(joined(rows, "metric") or "accuracy", fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    P.title(fig, name, data, _seeds_line(data), _budget(data))
    P.figure_legend(fig, _legend_keys())
    fig.tight_layout()
    _footnote(fig, data, _absent(data, family=families))
    return fig


def _family_column(
    ax: plt.Axes, slot: int, family: str, rows: pd.DataFrame, seeds: Sequence[int]
) -> None:
    """One family's seeds, mean, spread and study value at x = ``slot``."""
    c = color(family)

    def x_of(seed) -> float:  # each seed keeps its offset in every panel
        rank = seeds.index(int(seed)) if not pd.isna(seed) and int(seed) in seeds else 0
        return slot + (rank - (len(seeds) - 1) / 2) * JITTER

    ok = _ok(rows)
    if len(ok):
        values = ok.value.to_numpy(dtype=float)
        ax.scatter([x_of(s) for s in ok.seed], values, color=c, s=16, zorder=3, label=family)
        ax.plot([slot - 0.25, slot + 0.25], [values.mean()] * 2, color=c, lw=2.2, zorder=3)
        ax.plot([slot, slot], [values.min(), values.max()], color=c, lw=1, alpha=0.7)
    for status, group in rows[rows.status != "ok"].groupby("status", sort=True):
        _not_run(ax, [x_of(s) for s in group.seed], status, family)
    study = _first(rows, "study")
    if not np.isnan(study):
        ax.scatter(
            [slot],
            [study],
            marker="D",
            facecolors="none",
            edgecolors=c,
            s=48,
            linewidths=1.4,
            zorder=5,
            label=STUDY_LABEL,
        )


# The two rows of quality_vs_speed: (column, x label)
_SPEEDS = (
    ("prefill_ms", "prefill latency, median (ms)"),
    ("decode_ms", "decode step latency, median (ms)"),
)


def _speed_setting(data: pd.DataFrame) -> str:
    """``speed cells: T 256, batch 1, backend torch``, naming what the table holds."""
    parts = []
    for label, col in (("T", "speed_T"), ("batch", "speed_batch")):
        values = sorted({int(v) for v in data[col].dropna()})
        parts.append(f"{label} {', '.join(map(str, values)) or '?'}")
    parts.append(f"backend {joined(data, 'speed_backend') or '?'}")
    return "speed cells: " + ", ".join(parts)


def quality_vs_speed(
    table: pd.DataFrame,
    tasks: Sequence[str] | None = None,
    evals: Sequence[str] | None = None,
) -> plt.Figure:
    """Mean accuracy over seeds (the min-max spread as an error bar) against the family's
    latency, a column of panels per (task, eval): the top row against a prefill call's
    median over T tokens, the bottom row against one decode step's, both log.  A point per
    family, coloured and labelled by family; a family whose seeds all did not run is a
    status marker at the foot of the panel; a family without a speed cell is listed in the
    panel as "no speed cell".  The title names the speed cells' T, batch and backend and the
    device; the footnote the budget cut."""
    name = "Quality vs speed"
    wanted = dict(task=tasks, eval=evals)
    data = select(_rows(table, speed=True), **wanted)
    if data.empty:
        return P.empty_figure(name, none_found("task rows", **wanted), table)
    splits = _splits(data)
    fig, axes = plt.subplots(
        len(_SPEEDS),
        len(splits),
        figsize=(4.2 * len(splits), 3.5 * len(_SPEEDS) + 0.8),
        squeeze=False,
    )
    for column, (task, ev) in enumerate(splits):
        rows = data[(data.task == task) & (data["eval"] == ev)]
        for row, (speed, xlabel) in enumerate(_SPEEDS):
            ax = axes[row][column]
            ax.set_title(f"{_split_title(task, ev)} vs {speed.split('_')[0]}", fontsize=9)
            _quality_panel(ax, task, ev, rows, speed, xlabel)
    P.title(fig, name, data, _speed_setting(data), _seeds_line(data), _budget(data))
    P.figure_legend(fig)
    fig.tight_layout()
    _footnote(fig, data, _absent(data, task=tasks, eval=evals))
    return fig


def _quality_panel(
    ax: plt.Axes, task: str, ev: str, rows: pd.DataFrame, speed: str, xlabel: str
) -> None:
    message = _unavailable_message(task, ev, rows)
    if message:
        P.missing(ax, message)
        return
    no_speed, placed = [], []
    for family in _families(rows):
        mine = rows[rows.family == family]
        x = _first(mine, speed)
        if np.isnan(x) or x <= 0:
            no_speed.append(family)
            continue
        placed.append(x)
        c = color(family)
        ok = _ok(mine)
        if len(ok):
            values = ok.value.to_numpy(dtype=float)
            mean = values.mean()
            err = [[mean - values.min()], [values.max() - mean]]
            ax.errorbar([x], [mean], yerr=err, fmt="o", color=c, ms=5, capsize=3, label=family)
            y = mean
        else:
            y = FLOOR
        for status in sorted(set(mine.status) - {"ok"}):
            _not_run(ax, [x], status, family)
        ax.annotate(family, (x, y), xytext=(4, 4), textcoords="offset points", fontsize=7, color=c)
    if not placed:
        listed = f" (no speed cell: {', '.join(no_speed)})" if no_speed else ""
        P.missing(ax, f"no family of {_split_title(task, ev)} has a {speed} speed cell{listed}")
        return
    _chance(ax, rows)
    _log_ms(ax, placed)
    ax.set_ylim(-0.04, 1.16)  # the band above 1 holds the "no speed cell" note
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(f"{joined(rows, 'metric') or 'accuracy'}, mean over seeds", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    if no_speed:
        ax.text(
            0.02,
            0.98,
            "no speed cell: " + ", ".join(no_speed),
            transform=ax.transAxes,
            ha="left",
            va="top",
            fontsize=7,
            color="0.3",
        )


def _log_ms(ax: plt.Axes, xs: Sequence[float]) -> None:
    """A log x axis in ms labelled 1, 2, 5 per decade as plain numbers, so close latencies
    print neither overlapping ``3 x 10^0`` labels nor none at all: the limits pad the
    points by 1.6x each side, a span (2.56x) that always holds a 1, 2 or 5."""
    ax.set_xscale("log")
    ax.set_xlim(min(xs) / 1.6, max(xs) * 1.6)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
