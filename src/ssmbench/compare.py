"""Runs side by side: the quantities of two or more runs (on different devices, or another
study's imported run) joined where they meet, for the cross-device figures
(:mod:`ssmbench.figures.compare`).  pandas only, torch-free.

A run contributes, per (family, phase, batch, T), one cell: its ok cell at the lowest
precision it measured there (:data:`DTYPE_PREFERENCE`: what an accelerator is run at), of
its fastest backend at that precision; the row names the model, backend and dtype.  From
that cell come

- ``time_ms``: its median (with the interval over processes of a replicated cell),
- ``compute_util`` and ``bw_util``: its utilization of the run's own measured ceilings
  (its device.json, as its cells table holds them), and ``compute_util_datasheet`` /
  ``bw_util_datasheet`` of the vendor's peaks where the device catalogue knows them;
  only where the run has them;

and per (SSM family, phase, batch, T) ``latency_ratio``, attention over the SSM: the run's
own go/no-go row (``ssmbench.analysis.go_no_go_table``: its interval and kind) where it has
a go/no-go table, else the ratio of the two cells above (an imported run's single
measurements: no interval, kind :data:`NO_INTERVAL`).

The table is long: one row per (run, quantity, family, phase, batch, T), ``meets`` True
where another run has the same quantity at the same (family, phase, batch, T).  Quantities
that meet nowhere stay in the table, and :func:`unmet` says what they are, for the caption.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ssmbench.analysis import GO_NO_GO_COLUMNS, read_table
from ssmbench.catalogue import device_kind
from ssmbench.registry import PHASES
from ssmbench.tables import family_of, read_cells, with_columns

__all__ = [
    "COLUMNS",
    "QUANTITIES",
    "Run",
    "compare_table",
    "compared",
    "read_compare",
    "read_run",
    "unmet",
]

# lowest precision first: the one a run's point is compared at
DTYPE_PREFERENCE = ("bf16", "fp16", "fp32", "fp64")
UTILIZATIONS = ("compute_util", "bw_util", "compute_util_datasheet", "bw_util_datasheet")
# ok_cells: one row per run (family and phase "", batch and T 0), its count of timed ok
# cells, so that a run with nothing to compare is still named
QUANTITIES = ("ok_cells", "time_ms", "latency_ratio", *UTILIZATIONS)
POINT = ["family", "phase", "batch", "seq_len"]  # where two runs' quantities meet
COLUMNS = [
    "run",
    "device_kind",
    "quantity",
    *POINT,
    "dtype",
    "model",
    "backend",
    "value",
    "lo",
    "hi",
    "interval",
    "meets",
]
# the interval kind of a ratio of two single measurements (an imported run's)
NO_INTERVAL = "none: separate single measurements"
TEXT = ("run", "device_kind", "quantity", "family", "phase", "dtype", "model", "backend")


@dataclass(frozen=True)
class Run:
    """One run's tables: its cells (whose utilization columns already divide by the run's
    own ceilings, measured and the catalogue's) and its go/no-go table (None where it has
    none: an imported run)."""

    name: str
    cells: pd.DataFrame
    go_no_go: pd.DataFrame | None = None


def read_run(name: str, tables: str | os.PathLike) -> Run:
    """The run ``name`` from its tables folder: ``cells.csv``, and ``go_no_go.csv`` where
    the folder has one."""
    tables = Path(tables)
    go = tables / "go_no_go.csv"
    return Run(
        name=name,
        cells=read_cells(tables / "cells.csv"),
        go_no_go=read_table(go, GO_NO_GO_COLUMNS) if go.is_file() else None,
    )


def _device_kinds(cells: pd.DataFrame) -> pd.Series:
    """Each row's ``device_kind``: the table's own where it has the column (tables from
    before it lack it, the shipped runs'), else derived as the tables derive it."""
    derived = pd.Series(
        [
            device_kind(str(d), str(n) if pd.notna(n) else "")
            for d, n in zip(cells.device, cells.device_name, strict=True)
        ],
        index=cells.index,
        dtype=object,
    )
    if "device_kind" not in cells:
        return derived
    own = cells.device_kind.fillna("").astype(str)
    return own.where(own != "", derived)


def _chosen_cells(run: Run) -> pd.DataFrame:
    """The run's one cell per POINT: ok, at the lowest precision measured there, its
    fastest backend at that precision."""
    cells = with_columns(
        run.cells,
        ("time_ms_median", "time_ms_lo", "time_ms_hi", *UTILIZATIONS),
        ("device_name", "time_interval"),
    )
    cells = cells[(cells.status == "ok") & cells.time_ms_median.notna()]
    cells = cells.assign(
        family=family_of(cells),
        device_kind=_device_kinds(cells),
        rank=cells["dtype"].map({d: i for i, d in enumerate(DTYPE_PREFERENCE)}).fillna(99),
    )
    cells = cells.sort_values([*POINT, "rank", "time_ms_median", "backend"])
    return cells.drop_duplicates(POINT, keep="first")


def _rows(run: Run, cells: pd.DataFrame, quantity: str, value: str, lo=None, hi=None):
    """Long rows of ``quantity`` from the column ``value`` of ``cells`` (NaN ones dropped),
    with its interval's columns ``lo`` / ``hi`` where given."""
    known = cells[cells[value].notna()]
    interval = known.time_interval if quantity == "time_ms" else ""
    return pd.DataFrame(
        {
            "run": run.name,
            "device_kind": known.device_kind,
            "quantity": quantity,
            **{c: known[c] for c in POINT},
            "dtype": known["dtype"],
            "model": known.model,
            "backend": known.backend,
            "value": known[value].astype(float),
            "lo": known[lo].astype(float) if lo else np.nan,
            "hi": known[hi].astype(float) if hi else np.nan,
            "interval": interval,
        }
    )


def _ratios_from_go_no_go(run: Run, kind: str) -> pd.DataFrame:
    """The run's go/no-go rows, one per (SSM, phase, batch, T), at the lowest precision."""
    ranks = {d: i for i, d in enumerate(DTYPE_PREFERENCE)}
    go = run.go_no_go[run.go_no_go.latency_ratio.notna()]
    go = go.assign(rank=go["dtype"].map(ranks)).sort_values(
        ["ssm", "phase", "batch", "seq_len", "rank"]
    )
    go = go.drop_duplicates(["ssm", "phase", "batch", "seq_len"], keep="first")
    return pd.DataFrame(
        {
            "run": run.name,
            "device_kind": kind,
            "quantity": "latency_ratio",
            "family": go.ssm,
            "phase": go.phase,
            "batch": go.batch,
            "seq_len": go.seq_len,
            "dtype": go["dtype"],
            "model": go.ssm,
            "backend": go.attention_backend + " / " + go.ssm_backend,
            "value": go.latency_ratio.astype(float),
            "lo": go.latency_lo.astype(float),
            "hi": go.latency_hi.astype(float),
            "interval": go.interval,
        }
    )


def _ratios_from_cells(run: Run, cells: pd.DataFrame) -> pd.DataFrame:
    """Attention's time over each SSM's at the points where the run has both (its chosen
    cells): single measurements, so no interval."""
    attention = cells[cells.family == "attention"].set_index(POINT[1:])
    rows = []
    for _, ssm in cells[cells.family != "attention"].iterrows():
        key = tuple(ssm[c] for c in POINT[1:])
        if key not in attention.index:
            continue
        att = attention.loc[key]  # a row as a Series: its "dtype" is the column, not .dtype
        same = att["dtype"] == ssm["dtype"]
        dtype = ssm["dtype"] if same else f"{att['dtype']} / {ssm['dtype']}"
        rows.append(
            {
                "run": run.name,
                "device_kind": ssm.device_kind,
                "quantity": "latency_ratio",
                **{c: ssm[c] for c in POINT},
                "dtype": dtype,
                "model": f"{att.model} / {ssm.model}",
                "backend": f"{att.backend} / {ssm.backend}",
                "value": float(att.time_ms_median / ssm.time_ms_median),
                "lo": np.nan,
                "hi": np.nan,
                "interval": NO_INTERVAL,
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS[:-1])


def _count_row(run: Run, cells: pd.DataFrame) -> pd.DataFrame:
    """The run's ``ok_cells`` row: how many points it timed (0: nothing to compare)."""
    kinds = sorted(set(cells.device_kind))
    return pd.DataFrame(
        [
            {
                "run": run.name,
                "device_kind": ", ".join(kinds),
                "quantity": "ok_cells",
                **{"family": "", "phase": "", "batch": 0, "seq_len": 0},
                **{"dtype": "", "model": "", "backend": "", "interval": ""},
                **{"value": float(len(cells)), "lo": np.nan, "hi": np.nan},
            }
        ]
    )


def _run_rows(run: Run) -> pd.DataFrame:
    cells = _chosen_cells(run)
    parts = [_count_row(run, cells)]
    parts.append(_rows(run, cells, "time_ms", "time_ms_median", "time_ms_lo", "time_ms_hi"))
    parts += [_rows(run, cells, q, q) for q in UTILIZATIONS]
    if run.go_no_go is not None:
        kind = cells.device_kind.iloc[0] if len(cells) else ""
        parts.append(_ratios_from_go_no_go(run, kind))
    else:
        parts.append(_ratios_from_cells(run, cells))
    return pd.concat([p for p in parts if not p.empty], ignore_index=True)


def compare_table(runs: list[Run]) -> pd.DataFrame:
    """Every run's quantities in one long table (COLUMNS), ``meets`` marking the rows whose
    (quantity, family, phase, batch, T) another run also has.  Run names must differ."""
    names = [r.name for r in runs]
    if len(set(names)) < len(names):
        raise ValueError(f"runs to compare must have distinct names, got {names}")
    parts = [_run_rows(run) for run in runs]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    table = pd.concat(parts, ignore_index=True)
    for col in TEXT:
        table[col] = table[col].fillna("").astype(str)
    table["batch"] = table.batch.astype(int)
    table["seq_len"] = table.seq_len.astype(int)
    runs_at = table.groupby(["quantity", *POINT]).run.transform("nunique")
    table["meets"] = (runs_at >= 2) & (table.quantity != "ok_cells")
    order = {q: i for i, q in enumerate(QUANTITIES)}
    table = table.assign(_q=table.quantity.map(order))
    table = table.assign(_r=table.run.map({name: i for i, name in enumerate(names)}))
    table = table.sort_values(["_q", "_r", *POINT], ignore_index=True)
    return table[COLUMNS]


def read_compare(path: str | os.PathLike) -> pd.DataFrame:
    """A comparison table from CSV (what :func:`compare_table` wrote), checked to hold
    COLUMNS; text read as strings, ``meets`` as booleans."""
    table = read_table(path, COLUMNS)
    for col in TEXT:
        table[col] = table[col].astype(str)
    table["meets"] = table.meets.astype(str).str.lower() == "true"
    return table


def _ts(values) -> str:
    return ", ".join(str(int(t)) for t in sorted(set(values)))


def compared(table: pd.DataFrame) -> list[str]:
    """The runs of a comparison table, in the order they were given."""
    return list(dict.fromkeys(table.run[table.quantity == "ok_cells"]))


def unmet(table: pd.DataFrame, quantity: str, runs: list[str] | None = None) -> list[str]:
    """What of ``quantity`` met no other run, per run (``runs``, default every run of the
    table), for a caption: ``"cpu: mamba, s4d (no other run has these families)"``,
    ``"cpu: train (no other run has this phase)"``, ``"cpu: prefill batch 1: T 256,
    512"``; a run without the quantity at all ``"<run>: none"``."""
    rows = table[table.quantity == quantity]
    met = rows[rows.meets]
    said = []
    for run in runs if runs is not None else compared(table):
        own = rows[rows.run == run]
        if own.empty:
            said.append(f"{run}: none")
            continue
        lonely = own[~own.meets]
        families = sorted(set(lonely.family) - set(met.family))
        if families:
            said.append(f"{run}: {', '.join(families)} (no other run has these families)")
        lonely = lonely[~lonely.family.isin(families)]
        for phase in [p for p in PHASES if p in set(lonely.phase)]:
            part = lonely[lonely.phase == phase]
            if phase not in set(met.phase):
                said.append(f"{run}: {phase} (no other run has this phase)")
                continue
            for batch, points in part.groupby("batch", sort=True):
                said.append(f"{run}: {phase} batch {batch}: T {_ts(points.seq_len)}")
    return said
