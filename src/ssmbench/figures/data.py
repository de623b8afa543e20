"""Selecting and shaping the rows a figure draws: filters, missing columns, one setting
per panel, the lines of a panel, and the words that name a selection.  pandas only: no
drawing happens here."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ssmbench.figures.style import (
    BACKEND_STYLES,
    DEFAULT_STYLE,
    FAMILY_COLORS,
    MODEL_MARKERS,
    PHASES,
    color,
)
from ssmbench.tables import (  # noqa: F401  (with_columns: figures read it here)
    NUMERIC_COLUMNS,
    TEXT_COLUMNS,
    family_of,
    with_columns,
)

# The columns of the cells table a figure reads, made to exist (NaN / "") by with_columns:
# the record's (ssmbench.tables, from ssmbench.records.CellRecord), and the run's name.
CELL_NUMERIC = tuple(NUMERIC_COLUMNS)
CELL_TEXT = ("run", *TEXT_COLUMNS)


def as_list(value) -> list | None:
    """None or an empty sequence keep everything; a scalar is a one-item list."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        return [value]
    return list(value) or None


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


def none_found(what: str, **wanted) -> str:
    """``no <what> in the table``, naming the filters that are set."""
    said = [f"{k}={v!r}" for k, v in wanted.items() if as_list(v) is not None]
    return f"no {what} in the table" + (f" with {', '.join(said)}" if said else "")


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


def phases(table: pd.DataFrame) -> list[str]:
    """The phases of ``table``, in PHASES order, then any other by name."""
    present = set(table.phase)
    return [p for p in PHASES if p in present] + sorted(present - set(PHASES))


def families(table: pd.DataFrame) -> list[str]:
    """The models of ``table``, in FAMILY_COLORS order, then any other by name."""
    present = set(table.model)
    return [m for m in FAMILY_COLORS if m in present] + sorted(present - set(FAMILY_COLORS))


def family_lines(table: pd.DataFrame, y: str, x: str = "seq_len") -> list[dict]:
    """One line per (run, model, backend, dtype) of the ok rows with a positive ``y``:
    ``{"label", "model", "family", "x", "y", "rows", "style"}``, x ascending (``rows``: the
    line's rows, in that order).  Coloured by :func:`ssmbench.tables.family_of`, so our runs
    (model = family) and imported ones (a ``family`` column) draw alike; an imported model
    gets a marker of its own within its family.  Labels name the dtype and the run only
    where the table has several."""
    ok = table[(table.status == "ok") & (table[y] > 0) & table[x].notna()]
    ok = ok.assign(_family=family_of(ok))
    several_dtypes = table.dtype.nunique() > 1
    several_runs = table.run.nunique() > 1 if "run" in table else False
    in_family: dict[str, list[str]] = {}
    for family, model in sorted(set(zip(ok._family, ok.model, strict=True))):
        in_family.setdefault(family, []).append(model)
    lines = []
    keys = ["run", "model", "backend", "dtype"] if "run" in ok else ["model", "backend", "dtype"]
    for key, line in ok.groupby(keys, sort=True):
        model, backend, dt = key[-3:]
        line = line.sort_values(x)
        family = line._family.iloc[0]
        style = dict(BACKEND_STYLES.get(backend, DEFAULT_STYLE))
        if model != family:  # an imported model: a marker of its own within the family
            markers = in_family[family]
            style["marker"] = MODEL_MARKERS[markers.index(model) % len(MODEL_MARKERS)]
        label = f"{model} / {backend}"
        label += f" ({dt})" if several_dtypes else ""
        label += f" [{key[0]}]" if several_runs else ""
        lines.append(
            dict(
                label=label,
                model=model,
                family=family,
                x=line[x].to_numpy(dtype=float),
                y=line[y].to_numpy(dtype=float),
                rows=line.drop(columns="_family"),
                style=dict(color=color(family), markersize=4, **style),
            )
        )
    return lines


def byte_unit(values: pd.Series) -> tuple[float, str]:
    """Divisor and name of the unit (MiB or GiB) that suits ``values`` in bytes."""
    top = values.max() if values.notna().any() else 0.0
    return (2.0**30, "GiB") if top >= 2.0**30 else (2.0**20, "MiB")


def joined(table: pd.DataFrame, col: str) -> str:
    """The distinct non-empty values of ``col``, sorted, comma-separated ("" if none)."""
    if col not in table:
        return ""
    return ", ".join(str(v) for v in sorted(set(table[col].dropna())) if str(v))


def hardware_label(cells: pd.DataFrame) -> str:
    """The device names of ``cells`` (``device_name``, else ``device``), comma-separated."""
    for col in ("device_name", "device"):
        if col in cells:
            names = sorted({str(n) for n in cells[col].dropna() if str(n)})
            if names:
                return ", ".join(names)
    return "unknown hardware"


def caption(table: pd.DataFrame, *extra: str) -> str:
    """One line naming what a figure shows: dtype(s), batch(es), backends, run."""
    parts = [
        f"{label} {joined(table, col)}"
        for label, col in (
            ("dtype", "dtype"),
            ("batch", "batch"),
            ("backends", "backend"),
            ("run", "run"),
        )
        if joined(table, col)
    ]
    return " | ".join(parts + [e for e in extra if e])


def status_summary(rows: pd.DataFrame) -> str:
    """``2 oom, 1 timeout``: how many of ``rows`` did not run, by status."""
    if "status" not in rows:
        return ""
    counts = rows.status[rows.status != "ok"].value_counts().sort_index()
    return ", ".join(f"{n} {status}" for status, n in counts.items())


def not_ok_note(rows: pd.DataFrame) -> str:
    """`` (not ok: 2 oom)`` when some of ``rows`` did not run, else ""."""
    summary = status_summary(rows)
    return f" (not ok: {summary})" if summary else ""
