"""Whole-model records -> ``tables/lm.csv`` and ``lm.parquet``: one row per cell, checked.

The columns are the cell's keys, its status, the measured numbers (TTFT, TPOT, the
end-to-end TPOT, throughput, the memory split, energy), the layer implementations as a
short string, and where it ran.  Imports pandas and pandera only (no torch).

The figures and the claims read the cells schema (``ssmbench.tables.CELLS_SCHEMA``), so
:func:`cells_view` gives an lm table as a cells table: a prefill row's time is its TTFT, a
decode row's its TPOT, and the family is the block family of the model's layers
(:func:`model_family`), as the SSM-Scope importer names its checkpoints'.
:func:`lm_ops_table` does the same for the rows of ``profile_lm_cell`` (the ops schema;
``tables.write_ops`` and ``tables.read_ops`` write and read ``lm_ops.csv``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np
import pandas as pd
import pandera.pandas as pa

from ssmbench.lm import zoo
from ssmbench.lm.record import LMRecord
from ssmbench.registry import STATUSES
from ssmbench.tables import (
    CELL_COLUMNS,
    CELLS_SCHEMA,
    OPS_COLUMNS,
    OPS_SCHEMA,
    SIZE_COLUMNS,
    TEXT_COLUMNS,
)
from ssmbench.tables import KEYS as CELL_KEYS

KEYS = ["run", "model", "backend", "phase", "batch", "seq_len", "new_tokens", "dtype"]
NUMBERS = [
    "n_samples",
    "ttft_ms_median",
    "ttft_ms_p95",
    "tpot_ms_median",
    "tpot_ms_p95",
    "e2e_tpot_ms",
    "tokens_per_s",
    "weights_bytes",
    "cache_bytes",
    "activations_bytes",
    "peak_bytes",
    "cache_formula_bytes",
    "energy_j",
    "energy_j_per_token",
]
FLAGS = ["e2e_agrees", "cache_formula_ok"]
TEXT = ["preset", "family", "status", "reason", "energy_reason", "layer_impls", "isolation"]
TEXT += ["device", "device_name", "git_commit"]
COLUMNS = KEYS + TEXT[:4] + NUMBERS + FLAGS + TEXT[4:]


def _ok(df: pd.DataFrame) -> pd.Series:
    return df.status == "ok"


LM_SCHEMA = pa.DataFrameSchema(
    {
        **{k: pa.Column(str, coerce=True) for k in ("run", "model", "backend", "dtype")},
        "phase": pa.Column(str, pa.Check.isin(["prefill", "decode"]), coerce=True),
        **{k: pa.Column(int, pa.Check.ge(1), coerce=True) for k in ("batch", "seq_len")},
        "new_tokens": pa.Column(int, pa.Check.ge(1), coerce=True),
        "status": pa.Column(str, pa.Check.isin(list(STATUSES)), coerce=True),
        "n_samples": pa.Column(int, pa.Check.ge(0), coerce=True),
        **{c: pa.Column(float, pa.Check.ge(0), nullable=True, coerce=True) for c in NUMBERS[1:]},
        # a difference of two generate times: negative where their noise swamps it
        "e2e_tpot_ms": pa.Column(float, nullable=True, coerce=True),
        **{c: pa.Column("boolean", nullable=True, coerce=True) for c in FLAGS},
        **{c: pa.Column(str, coerce=True) for c in TEXT if c != "status"},
    },
    checks=[
        pa.Check(lambda df: _ok(df) | (df.reason.str.len() > 0), name="why_not_ok"),
        pa.Check(lambda df: ~_ok(df) | df.tokens_per_s.notna(), name="ok_has_throughput"),
        pa.Check(
            lambda df: ~(_ok(df) & (df.phase == "prefill")) | (df.ttft_ms_p95 >= df.ttft_ms_median),
            name="ttft_p95_ge_median",
        ),
        pa.Check(
            lambda df: ~(_ok(df) & (df.phase == "decode")) | (df.tpot_ms_p95 >= df.tpot_ms_median),
            name="tpot_p95_ge_median",
        ),
        # the split adds up: peak = weights + cache + activations (to a byte, in floats)
        pa.Check(
            lambda df: (
                ~_ok(df)
                | (
                    (df.weights_bytes + df.cache_bytes + df.activations_bytes - df.peak_bytes).abs()
                    < 1
                )
            ),
            name="memory_split_adds_up",
        ),
    ],
    unique=KEYS,
    strict=True,
)


def lm_table(records: Iterable[LMRecord]) -> pd.DataFrame:
    """One row per record, sorted by the keys, checked against :data:`LM_SCHEMA`."""
    rows = [{c: getattr(r, c) for c in COLUMNS} for r in records]
    df = pd.DataFrame(rows, columns=COLUMNS).sort_values(KEYS, ignore_index=True)
    for flag in FLAGS:  # True / False / None as pandas' nullable booleans
        df[flag] = df[flag].astype("boolean")
    return LM_SCHEMA.validate(df)


def write_lm_tables(table: pd.DataFrame, csv_path: str | os.PathLike, parquet_path) -> None:
    """``lm.csv`` and ``lm.parquet``, each written to a temporary file and renamed."""
    for path, write in ((csv_path, table.to_csv), (parquet_path, table.to_parquet)):
        os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
        tmp = f"{os.fspath(path)}.tmp"
        write(tmp, index=False)
        os.replace(tmp, path)


def read_lm_table(path: str | os.PathLike) -> pd.DataFrame:
    """A written lm table (csv or parquet), checked again; a bad one raises ValueError
    naming the file."""
    path = os.fspath(path)
    df = pd.read_parquet(path) if path.endswith(".parquet") else pd.read_csv(path)
    for c in TEXT:
        df[c] = df[c].astype(object).fillna("").astype(str)
    try:
        return LM_SCHEMA.validate(df)
    except (pa.errors.SchemaError, pa.errors.SchemaErrors) as e:
        raise ValueError(f"{path}: not a valid lm table:\n{e}") from None


# ---------------------------------------------------------------------------------------
# The lm table as the cells table the figures and the claims read.

# A zoo family (config/models.yaml) -> the family that colours a line
# (ssmbench.figures.style) and that the crossovers and the claims select by.  A pure SSM's
# is the block family of its layers, told by its config class, with the config field of
# its state size N (the cells' d_state); as the SSM-Scope importer does for a checkpoint,
# attention and hybrid models have d_state 0 (no single state axis).
ZOO_FAMILIES = {"transformer": "attention", "hybrid": "hybrid"}
SSM_CLASSES = {  # config class -> (block family, the state-size field)
    "MambaConfig": ("mamba", "state_size"),
    "Mamba2Config": ("mamba2", "state_size"),
}
# cells column <- lm column, for the columns that mean the same in both
SAME = {
    **{c: c for c in ("run", "model", "backend", "phase", "batch", "seq_len", "dtype")},
    **{c: c for c in ("device", "device_name", "status", "reason", "n_samples", "git_commit")},
    **{c: c for c in ("peak_bytes", "weights_bytes", "cache_bytes", "activations_bytes")},
    **{c: c for c in ("energy_j", "energy_j_per_token", "energy_reason")},
    "cache_bytes_analytic": "cache_formula_bytes",  # lm.verify.cache_formula, at the dtype
}
VIEW_COLUMNS = CELL_COLUMNS + SIZE_COLUMNS + ["family"]


def model_family(model: str, preset: str) -> tuple[str, int]:
    """(family, d_state) of zoo entry ``model`` at size ``preset``: "attention" and 0 for a
    transformer, "hybrid" and 0 for a hybrid, the block family ("mamba", "mamba2") and the
    preset's state size for a pure SSM.  Raises ValueError naming the model where the zoo
    has no such entry or no block family for its config class."""
    try:
        found = zoo.entry(model)
    except zoo.ZooError as e:
        raise ValueError(f"lm model {model!r}: {e}") from None
    if found.family in ZOO_FAMILIES:
        return ZOO_FAMILIES[found.family], 0
    if found.config_class not in SSM_CLASSES:
        raise ValueError(
            f"lm model {model!r}: no block family for its config class "
            f"{found.config_class!r} (ssmbench.lm.table.SSM_CLASSES knows {sorted(SSM_CLASSES)})"
        )
    family, field = SSM_CLASSES[found.config_class]
    config = found.config_kwargs(preset)
    if field not in config:
        raise ValueError(f"lm model {model!r} ({preset}): config/models.yaml sets no {field}")
    return family, int(config[field])


def cells_view(lm: pd.DataFrame) -> pd.DataFrame:
    """The lm table ``lm`` as a cells table (``tables.CELLS_SCHEMA``), one row per lm row:
    ``time_ms_median`` / ``time_ms_p95`` are a prefill row's TTFT and a decode row's TPOT;
    ``tokens`` the tokens of one timed call (batch x T for a prefill, batch for a decode
    step, as in block cells); ``family`` and ``d_state`` from :func:`model_family`; the
    columns of :data:`SAME` as they are.  A column the lm table lacks stays empty (NaN, or
    "" for text), the size preset columns too.  Raises ValueError where two lm rows become
    one cell (decode cells of one T at several new_tokens: select one first)."""
    lm = LM_SCHEMA.validate(lm)
    facts = {key: model_family(*key) for key in set(zip(lm.model, lm.preset, strict=True))}
    prefill = lm.phase == "prefill"
    view = pd.DataFrame({ours: lm[theirs] for ours, theirs in SAME.items()}, index=lm.index)
    view["family"] = [facts[key][0] for key in zip(lm.model, lm.preset, strict=True)]
    view["d_state"] = [facts[key][1] for key in zip(lm.model, lm.preset, strict=True)]
    view["time_ms_median"] = lm.ttft_ms_median.where(prefill, lm.tpot_ms_median)
    view["time_ms_p95"] = lm.ttft_ms_p95.where(prefill, lm.tpot_ms_p95)
    view["tokens"] = (lm.batch * lm.seq_len).where(prefill, lm.batch).astype(float)
    view = view.reindex(columns=VIEW_COLUMNS)
    for col in TEXT_COLUMNS:
        view[col] = view[col].astype(object).fillna("").astype(str)
    for col in SIZE_COLUMNS:
        view[col] = view[col].astype(pd.Int64Dtype())
    twins = view.duplicated(CELL_KEYS, keep=False)
    if twins.any():
        rows = lm[twins]
        raise ValueError(
            f"lm table: {len(rows)} rows are one cell of the cells view, at new_tokens "
            f"{sorted(set(rows.new_tokens))} ({rows.iloc[0].model}/{rows.iloc[0].backend} "
            f"{rows.iloc[0].phase} b{rows.iloc[0].batch} T{rows.iloc[0].seq_len}): "
            f"select one new_tokens first"
        )
    return CELLS_SCHEMA.validate(view.sort_values(CELL_KEYS, ignore_index=True))


def lm_ops_table(rows: list[dict]) -> pd.DataFrame:
    """The rows of ``ssmbench.lm.cell.profile_lm_cell`` (its cell's keys, ``device_name``
    and one row per bucket) as an ops table (``tables.OPS_SCHEMA``, the table of
    ``ops.csv`` that the op_breakdown figure reads): ``d_state`` from :func:`model_family`,
    ``status`` ok and an empty reason unless a row says otherwise (a profile job's status
    row); new_tokens, preset and seed are not ops columns.  Raises ValueError naming what
    is wrong where the rows do not make a valid ops table."""
    table = pd.DataFrame(
        [
            {
                **{c: row.get(c, np.nan) for c in OPS_COLUMNS},
                "d_state": model_family(row["model"], row["preset"])[1],
                "status": row.get("status") or "ok",
                "reason": row.get("reason") or "",
            }
            for row in rows
        ],
        columns=OPS_COLUMNS,
    )
    table["top_kernels"] = table.top_kernels.astype(object).fillna("").astype(str)
    try:
        return OPS_SCHEMA.validate(table.sort_values([*CELL_KEYS, "bucket"], ignore_index=True))
    except (pa.errors.SchemaError, pa.errors.SchemaErrors) as e:
        raise ValueError(f"lm profile rows: not a valid ops table:\n{e}") from None
