"""Selecting rows of a table: by column values, one batch and one dtype, the lines of a
latency-like quantity over T (one per run, model, backend and dtype), and the device kind
a row ran on, so that no ratio sets two kinds against each other (:func:`one_kind`).
pandas only; the figures (``ssmbench.figures.data``), the claims and the analysis
(``ssmbench.analysis``) share it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ssmbench.tables import NUMERIC_COLUMNS, TEXT_COLUMNS, family_of, with_columns

# The columns of the cells table a figure or a ratio reads, made to exist (NaN / "") by
# with_columns: the record's (ssmbench.tables, from ssmbench.records.CellRecord), and the
# run's name.
CELL_NUMERIC = tuple(NUMERIC_COLUMNS)
CELL_TEXT = ("run", *TEXT_COLUMNS)


def as_list(value) -> list | None:
    """None or an empty sequence keep everything; a scalar is a one-item list."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        return [value]
    return list(value) or None


def device_kind(row) -> str:
    """The device a row of a table ran on: its ``device_name`` (the GPU's model as torch
    and the lease name it, ``gpulease.gpu_record``; the CPU's model), else ``device``.  A
    replicated cell whose processes ran on several kinds names them all, "; "-joined
    (``ssmbench.tables``)."""
    name = row.get("device_name", "")
    name = "" if pd.isna(name) else str(name)
    return name or str(row.get("device", ""))


def one_kind(*kinds: str) -> bool:
    """Whether ``kinds`` (:func:`device_kind` of each side) are one device kind, so that a
    ratio of their times compares like with like: never two GPU models in one ratio."""
    return len(set(kinds)) == 1 and not any("; " in k for k in kinds)


def select(table: pd.DataFrame, **wanted) -> pd.DataFrame:
    """Rows of ``table`` whose columns hold the wanted values (``phase="prefill"``,
    ``model=["mamba"]``, ...); None or an empty list keeps every value, a column the table
    lacks keeps none."""
    keep = pd.Series(True, index=table.index)
    for col, value in wanted.items():
        values = as_list(value)
        if values is not None:
            keep &= table[col].isin(values) if col in table else False
    return table[keep]


def cells_of(cells: pd.DataFrame, **wanted) -> pd.DataFrame:
    """The selected rows of a cells table, with every column a figure reads."""
    return with_columns(select(cells, **wanted), CELL_NUMERIC, CELL_TEXT)


def one_setting(table: pd.DataFrame, batch=None, dtype=None) -> pd.DataFrame:
    """The rows of one batch and one dtype: the wanted ones, else the smallest batch and the
    most common dtype (ties: the first by name), so a bar or a line never mixes settings."""
    table = select(table, batch=batch, dtype=dtype)
    if table.empty:
        return table
    if "batch" in table and (as_list(batch) is None or table.batch.nunique() > 1):
        table = table[table.batch == table.batch.min()]
    if "dtype" in table and (as_list(dtype) is None or table.dtype.nunique() > 1):
        counts = table.dtype.value_counts()
        table = table[table.dtype == sorted(counts.index[counts == counts.max()])[0]]
    return table


def smallest_batch(table: pd.DataFrame, batch=None) -> pd.DataFrame:
    """The rows at ``batch`` (one or several), else at the table's smallest batch; every
    dtype (unlike :func:`one_setting`)."""
    table = select(table, batch=batch)
    if as_list(batch) is None and not table.empty:
        table = table[table.batch == table.batch.min()]
    return table


def lines(table: pd.DataFrame, y: str, x: str = "seq_len") -> list[dict]:
    """One line per (run, model, backend, dtype) of the ok rows with a positive ``y``:
    ``{"label", "model", "backend", "family", "x", "y", "rows"}``, x ascending (``rows``:
    the line's rows, in that order).  ``family`` is :func:`ssmbench.tables.family_of`, so
    our runs (model = family) and imported ones (a ``family`` column) group alike.  Labels
    name the dtype and the run only where the table has several."""
    ok = table[(table.status == "ok") & (table[y] > 0) & table[x].notna()]
    ok = ok.assign(_family=family_of(ok))
    several_dtypes = table.dtype.nunique() > 1
    several_runs = table.run.nunique() > 1 if "run" in table else False
    found = []
    keys = ["run", "model", "backend", "dtype"] if "run" in ok else ["model", "backend", "dtype"]
    for key, line in ok.groupby(keys, sort=True):
        model, backend, dt = key[-3:]
        line = line.sort_values(x)
        label = f"{model} / {backend}"
        label += f" ({dt})" if several_dtypes else ""
        label += f" [{key[0]}]" if several_runs else ""
        found.append(
            dict(
                label=label,
                model=model,
                backend=backend,
                family=line._family.iloc[0],
                x=line[x].to_numpy(dtype=float),
                y=line[y].to_numpy(dtype=float),
                rows=line.drop(columns="_family"),
            )
        )
    return found
