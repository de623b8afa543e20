"""Shaping the rows a figure draws: the loaders a notebook reads its table with, the
selection helpers of :mod:`ssmbench.select`, the styled lines of a panel, the order of
phases and families, and the words that name a selection.  pandas only: no drawing
happens here."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from ssmbench.figures.style import (
    BACKEND_STYLES,
    DEFAULT_STYLE,
    FAMILY_COLORS,
    MODEL_MARKERS,
    color,
)
from ssmbench.lm.table import cells_view, read_lm_table
from ssmbench.registry import PHASES
from ssmbench.select import (  # noqa: F401  (the figures read them here)
    CELL_NUMERIC,
    CELL_TEXT,
    as_list,
    cells_of,
    lines,
    one_setting,
    select,
    smallest_batch,
)
from ssmbench.tables import family_of, read_cells, read_ops, with_columns  # noqa: F401

# Columns only an lm table (ssmbench.lm.table) has, which tell it from a cells table.
LM_ONLY = ("new_tokens", "ttft_ms_median", "tpot_ms_median")


def _columns(path: Path) -> list[str]:
    """The column names of a CSV or Parquet table, without reading its rows."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    return list(pd.read_csv(path, nrows=0).columns)


def load_cells(path: str | os.PathLike) -> pd.DataFrame:
    """The cells table a figure draws, from a file of either kind (CSV or Parquet): a cells
    table (ours, a shipped run's or an imported one's: ``tables.read_cells``) or a
    whole-model lm table (``lm.read_lm_table``, then ``lm.table.cells_view``).  The kind is
    told by the file's columns, not its name (a figure's table is ``<figure>.csv`` whatever
    it holds): a table with every column of :data:`LM_ONLY` is an lm table.  A missing or
    invalid file raises naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"cells table {path} does not exist")
    if not set(LM_ONLY) <= set(_columns(path)):
        return read_cells(path)
    try:
        return cells_view(read_lm_table(path))
    except KeyError as e:  # read_lm_table fills the text columns it expects
        raise ValueError(f"{path}: not a valid lm table: no column {e}") from None
    except ValueError as e:
        message = str(e)
        raise ValueError(message if str(path) in message else f"{path}: {message}") from None


def load_ops(path: str | os.PathLike) -> pd.DataFrame:
    """The ops table a figure draws, checked (``tables.read_ops``): a run's ``ops.csv``, an
    imported run's, or a whole-model run's ``lm_ops.csv`` (already ops-shaped:
    ``lm.table.lm_ops_table``)."""
    return read_ops(path)


def none_found(what: str, **wanted) -> str:
    """``no <what> in the table``, naming the filters that are set."""
    said = [f"{k}={v!r}" for k, v in wanted.items() if as_list(v) is not None]
    return f"no {what} in the table" + (f" with {', '.join(said)}" if said else "")


def phases(table: pd.DataFrame) -> list[str]:
    """The phases of ``table``, in PHASES order, then any other by name."""
    present = set(table.phase)
    return [p for p in PHASES if p in present] + sorted(present - set(PHASES))


def families(table: pd.DataFrame) -> list[str]:
    """The models of ``table``, in FAMILY_COLORS order, then any other by name."""
    present = set(table.model)
    return [m for m in FAMILY_COLORS if m in present] + sorted(present - set(FAMILY_COLORS))


def family_lines(table: pd.DataFrame, y: str, x: str = "seq_len") -> list[dict]:
    """:func:`ssmbench.select.lines`, each with its ``style``: coloured by family, marked by
    backend, and an imported model (model != family) with a marker of its own within its
    family."""
    found = lines(table, y, x)
    in_family: dict[str, list[str]] = {}
    for family, model in sorted({(line["family"], line["model"]) for line in found}):
        in_family.setdefault(family, []).append(model)
    for line in found:
        family, model = line["family"], line["model"]
        style = dict(BACKEND_STYLES.get(line["backend"], DEFAULT_STYLE))
        if model != family:
            markers = in_family[family]
            style["marker"] = MODEL_MARKERS[markers.index(model) % len(MODEL_MARKERS)]
        line["style"] = dict(color=color(family), markersize=4, **style)
    return found


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
