"""The workload table (``tables/workload.csv``): what each cell asks of a processor.

Meant for a hardware designer, who loads it first: per cell, the work (FLOPs, bytes read
and written, operator dispatches), the memory it keeps (the fixed-size state per sequence,
the KV cache that grows with T), how long its dependency chain is (sequential steps on the
critical path), its arithmetic intensity, and the three floors of :mod:`ssmbench.floors`
with the bound and how much of the measured time the bound explains.  Every column with
its unit and definition: docs/results-schema.md, "workload.csv".

**Sequential steps** (:func:`sequential_steps`) count the steps that must run one after
another in one call, whatever the hardware's width: the layers of the residual stack run
in order, and inside a layer the sequence operator's form decides.

=============================  ======================================  ====================
family, backend                form (prefill, the train forward)       steps per layer
=============================  ======================================  ====================
attention, every backend       all tokens at once (QK^T, softmax, PV)  1
naive (every SSM)              a loop over tokens                      T
s4d torch                      FFT convolution                         1
mamba torch, compile           blocks of 16 tokens (``blocked_scan``)  ceil(T / 16)
mamba fused                    mamba_ssm's scan, 2048-token chunks     ceil(T / 2048)
mamba2, mamba3 torch, mixed,   chunked SSD: the state between chunks   1
compile                        is one decay matmul
mamba2, mamba3 fused           mamba_ssm's state passing, chunk by     ceil(T / chunk)
                               chunk
deltanet torch, mixed,         a loop over chunks carrying the state   ceil(T / chunk)
compile, fused
=============================  ======================================  ====================

A decode step is 1 per layer (one token; a graph replay the same chain); train runs the
forward and then its backward, twice the forward's steps, except Mamba-1's torch train
form, a per-token recurrence both ways (``models.mamba.chunked_scan``): 2 T.  The hybrid
counts each layer by its kind.  A chunk is the size preset's ``chunk`` (at most T).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields

import pandas as pd
import pandera.pandas as pa

from ssmbench.counts import cache_split, counts
from ssmbench.floors import FLOOR_COLUMNS, FLOORS, ensure_floors
from ssmbench.matrix import DTYPE_BYTES, Size
from ssmbench.registry import verified_backend
from ssmbench.tables import KEYS, SIZE_COLUMNS, with_columns

MAMBA_TIME_BLOCK = 16  # ssmbench.models.mamba.TIME_BLOCK (tests/test_workload.py holds them equal)
MAMBA_FUSED_CHUNK = 2048  # mamba_ssm's selective scan: 128 threads x 16 items per chunk
PARALLEL = ("compile", "torch", "torch-mixed")  # the chunked / parallel PyTorch forms

WORKLOAD_COLUMNS = [
    *KEYS,
    "device",
    "device_name",
    "status",
    "compute_dtype",
    "time_s",
    "flop",
    "bytes_read",
    "bytes_written",
    "n_ops",
    "n_ops_kind",
    "state_bytes_per_seq",
    "kv_cache_bytes",
    "sequential_steps",
    "intensity",
    *FLOOR_COLUMNS,
]
_TEXT = ("device", "device_name", "status", "compute_dtype", "n_ops_kind", "bound", "floor_flag")
_COUNTS = ("sequential_steps", "n_ops")

_nonneg = pa.Check.ge(0)
WORKLOAD_SCHEMA = pa.DataFrameSchema(
    {
        **{
            k: pa.Column(
                str if k in ("run", "model", "backend", "phase", "dtype") else int, coerce=True
            )
            for k in KEYS
        },
        **{c: pa.Column(str, nullable=True, coerce=True) for c in _TEXT},
        **{c: pa.Column(pd.Int64Dtype(), _nonneg, nullable=True, coerce=True) for c in _COUNTS},
        **{
            c: pa.Column(float, _nonneg, nullable=True, coerce=True)
            for c in WORKLOAD_COLUMNS
            if c not in KEYS and c not in _TEXT and c not in _COUNTS
        },
        "bound": pa.Column(str, pa.Check.isin(["", *FLOORS]), coerce=True),
    },
    unique=KEYS,
    strict=True,
)


def forward_steps(family: str, backend: str, phase: str, seq_len: int, chunk: int) -> int:
    """Sequential steps of one layer of ``family``'s sequence operator over ``seq_len``
    tokens in ``backend``'s form (the module docstring's table); a train call's forward."""
    base = verified_backend(backend)
    chunks = math.ceil(seq_len / max(1, min(chunk, seq_len)))
    if family == "attention":
        return 1
    if base == "naive":
        return seq_len
    if family == "s4d":
        return 1
    if family == "mamba":
        if base == "fused":
            return math.ceil(seq_len / MAMBA_FUSED_CHUNK)
        return seq_len if phase == "train" else math.ceil(seq_len / MAMBA_TIME_BLOCK)
    if family in ("mamba2", "mamba3"):
        return chunks if base == "fused" else 1
    if family == "deltanet":
        return chunks
    raise ValueError(f"no sequential steps for family {family!r}")


def sequential_steps(model: str, backend: str, phase: str, seq_len: int, size: Size) -> int:
    """Steps on the critical path of one call: the stack's layers in order, each its
    operator's steps (:func:`forward_steps`; 1 for a decode step; the forward's twice for
    train, forward then backward)."""
    total = 0
    for index in range(size.n_layers):
        family = model
        if model == "hybrid":
            family = "attention" if size.layer_kind(index) == "A" else "mamba2"
        if phase == "decode":
            total += 1
        else:
            steps = forward_steps(family, backend, phase, seq_len, size.chunk)
            total += 2 * steps if phase == "train" else steps
    return total


def _size(row, sizes: Mapping[tuple, Size]) -> Size | None:
    """The size preset of a row: the run's (from its records, with the hybrid's pattern),
    else the row's own size columns; None where neither is known."""
    key = tuple(getattr(row, k) for k in KEYS)
    if key in sizes:
        return sizes[key]
    values = {c: getattr(row, c, None) for c in SIZE_COLUMNS}
    if any(v is None or pd.isna(v) for v in values.values()):
        return None
    return Size(**{c: int(v) for c, v in values.items()})


def size_of(record_size: dict) -> Size:
    """A record's ``size`` as a :class:`~ssmbench.matrix.Size` (its known fields only)."""
    names = {f.name for f in fields(Size)}
    return Size(**{k: v for k, v in record_size.items() if k in names})


def _work(row, size: Size | None) -> dict:
    """The analytic columns of one row: bytes read and written, the state per sequence,
    the KV cache, and the sequential steps (empty where the size or the family is
    unknown: an imported model)."""
    if size is None or row.dtype not in DTYPE_BYTES:
        return {}
    decode = row.phase == "decode"
    width = DTYPE_BYTES[row.dtype]
    try:
        c = counts(row.model, row.phase, size, row.batch, row.seq_len, row.d_state, row.dtype)
        state, _ = cache_split(row.model, size, 1, row.seq_len, row.d_state, decode)
        _, kv = cache_split(row.model, size, row.batch, row.seq_len, row.d_state, decode)
        steps = sequential_steps(row.model, row.backend, row.phase, row.seq_len, size)
    except ValueError:  # a model counts does not know
        return {}
    return {
        "bytes_read": c.bytes_read,
        "bytes_written": c.bytes_written,
        "state_bytes_per_seq": float(state * width),
        "kv_cache_bytes": float(kv * width),
        "sequential_steps": steps,
    }


def workload_table(cells: pd.DataFrame, sizes: Mapping[tuple, Size] | None = None) -> pd.DataFrame:
    """One row per cell of ``cells`` (a cells table; its floors as it has them, else
    computed from its columns, ``ssmbench.floors.ensure_floors``): :data:`WORKLOAD_COLUMNS`.
    ``sizes`` maps a cell's KEYS to its run's size preset (the records' ``size``, which
    holds the hybrid's layer pattern the table's columns lack)."""
    cells = ensure_floors(cells)
    data = with_columns(cells, ("n_ops", "flop", "intensity", "time_ms_median"), _TEXT)
    rows = []
    for row in data.itertuples(index=False):
        out = {c: getattr(row, c, None) for c in WORKLOAD_COLUMNS}
        out["time_s"] = row.time_ms_median * 1e-3
        out.update(_work(row, _size(row, sizes or {})))
        rows.append(out)
    table = pd.DataFrame(rows, columns=WORKLOAD_COLUMNS)
    for col in _TEXT:
        table[col] = table[col].astype(object).fillna("").astype(str)
    return WORKLOAD_SCHEMA.validate(table.sort_values(KEYS, ignore_index=True))


def read_workload(path) -> pd.DataFrame:
    """Read a workload table (CSV or Parquet) and check it, naming the file on failure."""
    from pathlib import Path

    path = Path(path)
    if path.suffix == ".parquet":
        df = pd.read_parquet(path)
    else:
        df = pd.read_csv(path, dtype={c: object for c in _TEXT})
        for col in _TEXT:
            df[col] = df[col].fillna("").astype(str)
    try:
        return WORKLOAD_SCHEMA.validate(df, lazy=True)
    except (pa.errors.SchemaErrors, pa.errors.SchemaError) as e:
        raise ValueError(f"{path}: not a valid workload table:\n{e}") from None
