"""Whole-model records -> ``tables/lm.csv`` and ``lm.parquet``: one row per cell, checked.

The columns are the cell's keys, its status, the measured numbers (TTFT, TPOT, the
end-to-end TPOT, throughput, the memory split, energy), the layer implementations as a
short string, and where it ran.  Imports pandas and pandera only (no torch).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import pandas as pd
import pandera.pandas as pa

from ssmbench.lm.record import LMRecord
from ssmbench.records import STATUSES

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
        df[c] = df[c].fillna("").astype(str)
    try:
        return LM_SCHEMA.validate(df)
    except (pa.errors.SchemaError, pa.errors.SchemaErrors) as e:
        raise ValueError(f"{path}: not a valid lm table:\n{e}") from None
