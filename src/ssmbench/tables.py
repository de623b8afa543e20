"""Raw records -> tidy tables, and the schemas every table is checked against.

``cells``: one row per cell (docs/ARCHITECTURE.md, "The contract"); ``samples``: one row per timing
sample; ``verify``: one row per verification check.  Imports pandas and pandera only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import fields
from pathlib import Path

import pandas as pd
import pandera.pandas as pa

from ssmbench.catalogue import device_kind
from ssmbench.floors import FLOOR_COLUMNS, FLOOR_TIMES, FLOORS, with_floors
from ssmbench.measure.profile import BUCKETS  # torch-free at import
from ssmbench.records import CellRecord
from ssmbench.registry import PHASES, STATUSES, VERIFY_STATUSES


def family_of(table: pd.DataFrame) -> pd.Series:
    """The family of each row: its ``family`` where the table has that column and the row a
    value, else its ``model`` (an imported run keeps its own model names, such as
    "qwen25-instruct", and names their families; our runs name models by family)."""
    model = table.model.astype(str)
    if "family" not in table:
        return model
    family = table["family"].fillna("").astype(str)
    return family.where(family != "", model)


KEYS = ["run", "model", "backend", "phase", "batch", "seq_len", "d_state", "dtype"]


def with_columns(table: pd.DataFrame, numeric=(), text=()) -> pd.DataFrame:
    """A copy of ``table`` in which every named column exists: numeric ones as floats (NaN
    where empty or absent), text ones as strings ("" where empty or absent), so analysis
    and figures read tables of every vintage (columns added later are absent in older ones)."""
    out = table.copy()
    for col in numeric:
        out[col] = pd.to_numeric(out[col], errors="coerce") if col in out else float("nan")
        out[col] = out[col].astype(float)
    for col in text:
        out[col] = out[col].astype(object).fillna("").astype(str) if col in out else ""
    return out


# The cells table's columns are the record's fields (ssmbench.records.CellRecord), in its
# order, but those that are not one value per cell: the size preset becomes SIZE_COLUMNS,
# the samples the samples table, the verify summary the verify table.
NOT_TABULAR = ("size", "gpu", "samples_ms", "verify", "started", "ended", "schema_version")
CELL_COLUMNS = [f.name for f in fields(CellRecord) if f.name not in NOT_TABULAR]
SIZE_COLUMNS = ["d_model", "n_layers", "n_heads", "head_dim", "expand", "d_conv", "chunk"]
# A headline cell measured in several processes (records.CellRecord.replicate) is one row:
# its median process's record (``replicate`` names it), with how many processes were ok,
# their medians (";"-joined, replicate order), how far they disagree (max/min and the
# coefficient of variation), and the 95% interval of the median of their medians
# (ssmbench.stats.replicated_median; kind "hierarchical"); empty for a one-process cell.
REPLICATE_COLUMNS = [
    "replicates_ok",
    "process_medians_ms",
    "process_maxmin",
    "process_cv",
    "time_ms_lo",
    "time_ms_hi",
    "time_interval",
]
REPLICATE_TEXT = ("process_medians_ms", "time_interval")
# Where the time goes (ssmbench.floors): the three floors, the bound, the share of the
# median the bound explains and the flag of a cell measured below a floor; absent in
# tables aggregated before them (the shipped runs'), which ssmbench.floors.ensure_floors
# fills from their own columns
FLOOR_TEXT = ("bound", "floor_flag")
_TYPES = {f.name: f.type for f in fields(CellRecord)}
# every cells table has these; columns added later may be absent from older tables
# (results/precollected, imported runs) and read as empty (with_columns)
REQUIRED = (*KEYS, "device", "status", "reason")
# the measured numbers and the text of a cell (its keys aside), for with_columns
NUMERIC_COLUMNS = [
    c for c in CELL_COLUMNS if c not in KEYS and _TYPES[c] in ("int", "float | None", "int | None")
]
TEXT_COLUMNS = [c for c in CELL_COLUMNS if c not in KEYS and _TYPES[c] == "str"]

_nonneg = pa.Check.ge(0)


def _column(name: str) -> pa.Column:
    """The schema column of record field ``name``, from its type (and CHECKED's checks)."""
    kind = _TYPES[name]
    required = name in REQUIRED
    nullable = name not in KEYS and name != "status"
    if name in CHECKED:
        dtype, check = CHECKED[name]
        return pa.Column(dtype, check, nullable=nullable, required=required, coerce=True)
    if kind == "str":
        return pa.Column(str, nullable=nullable, required=required, coerce=True)
    if kind == "int":  # empty in an imported run's table: nullable
        return pa.Column(pd.Int64Dtype(), _nonneg, nullable=True, required=required, coerce=True)
    if kind in ("bool", "bool | None"):
        return pa.Column("boolean", nullable=True, required=required, coerce=True)
    return pa.Column(float, _nonneg, nullable=True, required=required, coerce=True)


# the fields whose values are constrained beyond their type
CHECKED = {
    "phase": (str, pa.Check.isin(list(PHASES))),
    "dtype": (str, pa.Check.isin(["fp64", "fp32", "fp16", "bf16"])),
    "status": (str, pa.Check.isin(list(STATUSES))),
    "compute_dtype": (str, pa.Check.isin(["", "fp64", "fp32", "fp16", "bf16"])),
    "batch": (int, pa.Check.ge(1)),
    "seq_len": (int, pa.Check.ge(1)),
    "d_state": (int, pa.Check.ge(0)),
    "clock_drop": (float, pa.Check.isin([0.0, 1.0])),  # True / False / empty, as 1.0 / 0.0
}

CELLS_SCHEMA = pa.DataFrameSchema(
    {
        **{c: _column(c) for c in CELL_COLUMNS},
        # the run's size preset; empty for an imported run of another study's checkpoints
        **{
            c: pa.Column(pd.Int64Dtype(), pa.Check.ge(1), nullable=True, coerce=True)
            for c in SIZE_COLUMNS
        },
        # the family that colours a model in every figure: the model itself for our runs,
        # e.g. "mamba2" for SSM-Scope's "mamba2-780m" (ssmbench.importers.ssm_scope)
        "family": pa.Column(str, nullable=True, coerce=True),
        # the cell's device as the device catalogue names it (ssmbench.catalogue.device_kind:
        # "H100 SXM" for "NVIDIA H100 80GB HBM3"), the same words in every run; absent in
        # older tables
        "device_kind": pa.Column(str, nullable=True, required=False, coerce=True),
        # a replicated cell's processes together (REPLICATE_COLUMNS); absent in older tables
        "replicates_ok": pa.Column(
            pd.Int64Dtype(), pa.Check.ge(0), nullable=True, required=False, coerce=True
        ),
        "process_medians_ms": pa.Column(str, nullable=True, required=False, coerce=True),
        **{
            c: pa.Column(float, _nonneg, nullable=True, required=False, coerce=True)
            for c in ("process_maxmin", "process_cv", "time_ms_lo", "time_ms_hi")
        },
        "time_interval": pa.Column(
            str, pa.Check.isin(["", "hierarchical"]), nullable=True, required=False, coerce=True
        ),
        **{
            c: pa.Column(float, _nonneg, nullable=True, required=False, coerce=True)
            for c in (*FLOOR_TIMES, "explained")
        },
        "bound": pa.Column(
            str, pa.Check.isin(["", *FLOORS]), nullable=True, required=False, coerce=True
        ),
        "floor_flag": pa.Column(
            str,
            pa.Check.str_matches(r"^((cache_resident|below_floor): [a-z+]+)?$"),
            nullable=True,
            required=False,
            coerce=True,
        ),
    },
    checks=[
        # an ok cell has timings, and its P95 is never below its median
        pa.Check(lambda df: (df.status != "ok") | df.time_ms_median.notna(), name="ok_has_time"),
        pa.Check(
            lambda df: (df.status != "ok") | (df.time_ms_p95 >= df.time_ms_median),
            name="p95_ge_median",
        ),
        pa.Check(lambda df: (df.status == "ok") | (df.reason.str.len() > 0), name="why_not_ok"),
    ],
    unique=KEYS,
    strict=True,
)

SAMPLES_COLUMNS = KEYS + ["replicate", "sample", "time_ms"]
SAMPLES_SCHEMA = pa.DataFrameSchema(
    {
        **{k: CELLS_SCHEMA.columns[k] for k in KEYS},
        "replicate": pa.Column(int, pa.Check.ge(0), coerce=True),
        "sample": pa.Column(int, pa.Check.ge(0), coerce=True),
        "time_ms": pa.Column(float, pa.Check.ge(0), coerce=True),
    },
    unique=KEYS + ["replicate", "sample"],
    strict=True,
)

# One row per paired record (ssmbench.paired): a replicate process of a paired cell, keyed
# by its SSM side and the replicate: both medians, their ratio and its paired bootstrap
# interval over that process's rounds (ssmbench.stats), and what the load witnesses saw.
_PAIRED_KINDS = {  # column -> kind, in the table's order after PAIRED_KEYS
    "replicates": "count",
    "device": "text",
    "device_name": "text",
    "status": "text",
    "reason": "text",
    "cache_source": "text",
    "kv_cache": "text",
    "attention_compute_dtype": "text",
    "ssm_compute_dtype": "text",
    "n_rounds": "count",
    "attention_ms": "float",
    "ssm_ms": "float",
    "latency_ratio": "float",
    "latency_lo": "float",
    "latency_hi": "float",
    "attention_spread": "float",
    "ssm_spread": "float",
    "flop_ratio": "float",
    "load_avg_1m": "float",
    "other_cpu_cores": "float",
    "steal_share": "float",
    "probe_before_ms": "float",
    "probe_after_ms": "float",
    "loaded": "text",
    "git_commit": "text",
}
PAIRED_KEYS = KEYS + ["replicate"]
PAIRED_COLUMNS = PAIRED_KEYS + list(_PAIRED_KINDS)
_PAIRED_TEXT = tuple(
    c
    for c in PAIRED_COLUMNS
    if c in ("run", "model", "backend", "phase", "dtype") or _PAIRED_KINDS.get(c) == "text"
)
_PAIRED_COLUMN = {
    "text": lambda: pa.Column(str),
    "count": lambda: pa.Column(int, pa.Check.ge(0), coerce=True),
    "float": lambda: pa.Column(float, nullable=True, coerce=True),
}
PAIRED_SCHEMA = pa.DataFrameSchema(
    {
        **{k: CELLS_SCHEMA.columns[k] for k in KEYS},
        "replicate": pa.Column(int, pa.Check.ge(0), coerce=True),
        **{c: _PAIRED_COLUMN[kind]() for c, kind in _PAIRED_KINDS.items()},
        "status": pa.Column(str, pa.Check.isin(STATUSES)),
    },
    unique=PAIRED_KEYS,
    strict=True,
)


def judged_load(record) -> str:
    """Whether a cell or replicate was measured on a loaded machine, judged from the
    numbers its record keeps (``ssmbench.measure.load.reading``) against the thresholds
    of the code that makes the table, so a threshold changed later applies to old records
    too (the record's own ``loaded`` says what its job judged)."""
    from ssmbench.measure.load import reading

    return reading(
        getattr(record, "load_avg_1m", None),
        getattr(record, "other_cpu_cores", None),
        getattr(record, "steal_share", None),
        getattr(record, "probe_before_ms", None),
        getattr(record, "probe_after_ms", None),
    ).loaded


def paired_table(records) -> pd.DataFrame:
    """One row per paired record (one replicate process): attention's and the SSM's
    medians, attention over the SSM, and the 95% interval of that ratio from a bootstrap
    over the process's rounds (paired: ``ssmbench.stats.ratio_interval``); NaN where the
    pair did not run."""
    from ssmbench.measure.timing import relative_spread
    from ssmbench.stats import ratio_interval

    rows = []
    for r in records:
        row = {c: getattr(r, c, None) for c in PAIRED_COLUMNS}
        row["loaded"] = judged_load(r)
        lo = hi = None
        if r.status == "ok":
            _, lo, hi = ratio_interval(r.attention_samples_ms, r.ssm_samples_ms, paired=True)
            row["attention_spread"] = relative_spread(r.attention_samples_ms)
            row["ssm_spread"] = relative_spread(r.ssm_samples_ms)
            if r.attention_flop and r.ssm_flop:
                row["flop_ratio"] = r.attention_flop / r.ssm_flop
        row.update(latency_lo=lo, latency_hi=hi)
        rows.append(row)
    df = pd.DataFrame(rows, columns=PAIRED_COLUMNS)
    for col in _PAIRED_TEXT:
        df[col] = df[col].fillna("").astype(str)
    for col in ("batch", "seq_len", "d_state", "n_rounds", "replicate"):
        df[col] = df[col].fillna(0).astype(int)
    df["replicates"] = df["replicates"].fillna(1).astype(int)
    return PAIRED_SCHEMA.validate(df.sort_values(PAIRED_KEYS, ignore_index=True))


def read_paired_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a paired table and check it, naming the file on failure; a run that has
    none (older runs) reads as an empty table, and one from before replicates as
    replicate 0 of 1."""
    path = Path(path)
    if not path.is_file():
        return PAIRED_SCHEMA.validate(pd.DataFrame(columns=PAIRED_COLUMNS))
    df = pd.read_csv(path, dtype={c: object for c in _PAIRED_TEXT})
    for col, kind in _PAIRED_KINDS.items():
        if col not in df:  # a column added later
            df[col] = {"text": "", "count": 1, "float": float("nan")}[kind]
    if "replicate" not in df:
        df.insert(len(KEYS), "replicate", 0)
    df = df[PAIRED_COLUMNS]
    for col in _PAIRED_TEXT:
        df[col] = df[col].fillna("").astype(str)
    return _checked(df, PAIRED_SCHEMA, path, "paired table")


# One row per paired cell, its replicates taken together (ssmbench.stats.replicated_ratio):
# the median over processes of each one's ratio, the hierarchical interval (kind
# "hierarchical"; "within-process" with one process), how far the processes disagree
# (max/min and the coefficient of variation of their ratios; each side's log-scale sd of
# its per-process medians), the per-process ratios (";"-joined, replicate order), and the
# replicates named as outliers or measured on a loaded machine.
PAIRS_COLUMNS = KEYS + [
    "device",
    "device_name",
    "status",
    "reason",
    "cache_source",
    "kv_cache",
    "attention_compute_dtype",
    "ssm_compute_dtype",
    "replicates",
    "replicates_ok",
    "n_rounds",
    "attention_ms",
    "ssm_ms",
    "latency_ratio",
    "latency_lo",
    "latency_hi",
    "interval",
    "between_maxmin",
    "between_cv",
    "attention_process_sd",
    "ssm_process_sd",
    "process_ratios",
    "outliers",
    "loaded",
    "flop_ratio",
    "git_commit",
]
_PAIRS_TEXT = (
    "run", "model", "backend", "phase", "dtype", "device", "device_name", "status", "reason",
    "cache_source", "kv_cache", "attention_compute_dtype", "ssm_compute_dtype", "interval",
    "process_ratios", "outliers", "loaded", "git_commit",
)  # fmt: skip
_PAIRS_COUNTS = ("replicates", "replicates_ok", "n_rounds")
PAIRS_SCHEMA = pa.DataFrameSchema(
    {
        **{k: CELLS_SCHEMA.columns[k] for k in KEYS},
        **{
            c: (
                pa.Column(str)
                if c in _PAIRS_TEXT
                else pa.Column(int, pa.Check.ge(0), coerce=True)
                if c in _PAIRS_COUNTS
                else pa.Column(float, nullable=True, coerce=True)
            )
            for c in PAIRS_COLUMNS
            if c not in KEYS
        },
        "status": pa.Column(str, pa.Check.isin(STATUSES)),
        "interval": pa.Column(str, pa.Check.isin(["", "hierarchical", "within-process"])),
    },
    unique=KEYS + ["device_name"],
    strict=True,
)


def by_device_kind(group: list) -> list[list]:
    """A paired cell's replicate records split by the device kind they ran on (their
    ``device_name``: the GPU's model on a node whose GPUs differ), so that no ratio pools
    two kinds; one list where they name one kind (or none).  A record that names none (it
    failed before it had a device) goes with the first kind's."""
    name = {id(r): getattr(r, "device_name", "") or "" for r in group}
    kinds = sorted(set(name.values()) - {""})
    if len(kinds) <= 1:
        return [group]
    split = [[r for r in group if name[id(r)] == kind] for kind in kinds]
    split[0] += [r for r in group if not name[id(r)]]
    return split


def pairs_table(records) -> pd.DataFrame:
    """One row per paired cell and device kind from its replicate records
    (:data:`PAIRS_COLUMNS`; one row per cell unless its replicates ran on two kinds of GPU,
    :func:`by_device_kind`): ok when at least one replicate is ok, its numbers from the
    ok ones; ``reason`` names the replicates that are not ok.  An outlier
    (``ssmbench.stats.outliers``) or a loaded replicate stays in the estimate, a median,
    which one process cannot move far, and is named (``outliers``, ``loaded``), never
    dropped in silence."""
    import numpy as np

    from ssmbench import stats

    groups: dict[tuple, list] = {}
    for r in records:
        groups.setdefault(tuple(getattr(r, k) for k in KEYS), []).append(r)
    split = [(key, part) for key, group in sorted(groups.items()) for part in by_device_kind(group)]
    rows = []
    for key, group in split:
        group = sorted(group, key=lambda r: getattr(r, "replicate", 0))
        ok = [r for r in group if r.status == "ok" and r.attention_samples_ms]
        first = ok[0] if ok else group[0]
        row = {c: getattr(first, c, None) for c in PAIRS_COLUMNS}
        row.update(zip(KEYS, key, strict=True))
        row["replicates"] = max(getattr(r, "replicates", 1) for r in group)
        row["replicates_ok"] = len(ok)
        others = [r for r in group if r not in ok]
        row["reason"] = "; ".join(
            f"r{getattr(r, 'replicate', 0)} {r.status}: {(r.reason or '').partition(chr(10))[0]}"
            for r in others
        )
        judged = [(getattr(r, "replicate", 0), judged_load(r)) for r in group]
        row["loaded"] = "; ".join(f"r{i}: {why}" for i, why in judged if why)
        if ok:
            sides = [(r.attention_samples_ms, r.ssm_samples_ms) for r in ok]
            ratio, lo, hi, kind = stats.replicated_ratio(sides)
            per_process = [float(stats.ratio_of_medians(a, b)) for a, b in sides]
            maxmin, cv = stats.between_spread(per_process)
            attention = [float(np.median(a)) for a, _ in sides]
            ssm = [float(np.median(b)) for _, b in sides]
            row.update(
                status="ok",
                n_rounds=int(sum(r.n_rounds for r in ok)),
                attention_ms=float(np.median(attention)),
                ssm_ms=float(np.median(ssm)),
                latency_ratio=ratio,
                latency_lo=lo,
                latency_hi=hi,
                interval=kind,
                between_maxmin=maxmin,
                between_cv=cv,
                attention_process_sd=stats.process_sd([attention]),
                ssm_process_sd=stats.process_sd([ssm]),
                process_ratios=";".join(f"{x:.6g}" for x in per_process),
                outliers="; ".join(
                    f"r{ok[i].replicate} ({per_process[i]:.3g} against a median of {ratio:.3g})"
                    for i in stats.outliers(per_process)
                ),
            )
            if first.attention_flop and first.ssm_flop:
                row["flop_ratio"] = first.attention_flop / first.ssm_flop
        else:
            row.update(status=first.status, reason=row["reason"] or first.reason, interval="")
            row.update({c: None for c in ("attention_ms", "ssm_ms", "latency_ratio")})
            row["n_rounds"] = 0
        rows.append(row)
    df = pd.DataFrame(rows, columns=PAIRS_COLUMNS)
    for col in _PAIRS_TEXT:
        df[col] = df[col].fillna("").astype(str)
    for col in ("batch", "seq_len", "d_state", *_PAIRS_COUNTS):
        df[col] = df[col].fillna(0).astype(int)
    return PAIRS_SCHEMA.validate(df.sort_values([*KEYS, "device_name"], ignore_index=True))


def read_pairs_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a pairs table and check it, naming the file on failure; a run without one
    (older runs, runs without paired cells) reads as an empty table."""
    path = Path(path)
    if not path.is_file():
        return PAIRS_SCHEMA.validate(pd.DataFrame(columns=PAIRS_COLUMNS))
    df = _read_text_csv(path, _PAIRS_TEXT)
    return _checked(df, PAIRS_SCHEMA, path, "pairs table")


# One row per (profiled cell, bucket) with status ok; a cell that could not be profiled has
# one row with its status (unavailable, failed, oom) and reason, and no bucket or times
# (ssmbench.cell.profile_or_status).
OPS_COLUMNS = KEYS + [
    "device",
    "device_name",
    "status",
    "reason",
    "bucket",
    "time_ms",
    "share",
    "n_kernels",
    "top_kernels",
    "time_basis",
]
OPS_SCHEMA = pa.DataFrameSchema(
    {
        **{k: CELLS_SCHEMA.columns[k] for k in KEYS},
        "device": pa.Column(str, coerce=True),
        "device_name": pa.Column(str, nullable=True, coerce=True),
        "status": pa.Column(str, pa.Check.isin(list(STATUSES)), coerce=True),
        "reason": pa.Column(str, nullable=True, coerce=True),
        "bucket": pa.Column(str, pa.Check.isin(list(BUCKETS)), nullable=True, coerce=True),
        "time_ms": pa.Column(float, pa.Check.ge(0), nullable=True, coerce=True),
        "share": pa.Column(float, pa.Check.in_range(0, 1), nullable=True, coerce=True),
        "n_kernels": pa.Column(float, pa.Check.ge(0), nullable=True, coerce=True),
        "top_kernels": pa.Column(str, nullable=True, coerce=True),
        "time_basis": pa.Column(
            str, pa.Check.isin(["cuda_device", "cpu_self"]), nullable=True, coerce=True
        ),
    },
    checks=[
        # an ok row is a bucket with its time; any other row says why there is none
        pa.Check(
            lambda df: (df.status != "ok") | (df.bucket.notna() & df.time_ms.notna()),
            name="ok_has_bucket",
        ),
        pa.Check(lambda df: (df.status == "ok") | (df.reason.str.len() > 0), name="why_not_ok"),
    ],
    unique=KEYS + ["bucket"],
    strict=True,
)

VERIFY_SCHEMA = pa.DataFrameSchema(
    {
        "run": pa.Column(str, coerce=True),
        "model": pa.Column(str, coerce=True),
        "backend": pa.Column(str, coerce=True),
        "device": pa.Column(str, coerce=True),
        "status": pa.Column(str, coerce=True, checks=pa.Check.isin(list(VERIFY_STATUSES))),
        "reason": pa.Column(str, nullable=True, coerce=True),
        "check": pa.Column(str, nullable=True, coerce=True),
        "dtype": pa.Column(str, nullable=True, coerce=True),
        "max_abs_err": pa.Column(float, nullable=True, coerce=True),
        "rel_rms_err": pa.Column(float, nullable=True, coerce=True),
        "atol": pa.Column(float, nullable=True, coerce=True),
        "rtol": pa.Column(float, nullable=True, coerce=True),
        "ok": pa.Column(bool, nullable=True, coerce=True),
    },
    strict=True,
)


def cells_table(
    records: Iterable[CellRecord],
    sources: Iterable[str] | None = None,
    device: dict | None = None,
) -> pd.DataFrame:
    """One row per cell (KEYS): a cell's record, or a replicated cell's processes
    together (:func:`_replicated_row`), with its floors (``ssmbench.floors.with_floors``;
    the dispatch floor from ``device``, the run's device.json record, where given).
    ``sources``, the records' files in the same order: a row the schema refuses is named
    by its file (a ValueError), not only by its place in the table."""
    records = list(records)
    origin = {id(r): str(s) for r, s in zip(records, sources, strict=True)} if sources else {}
    groups: dict[tuple, list[CellRecord]] = {}
    for r in records:
        groups.setdefault(tuple(getattr(r, k) for k in KEYS), []).append(r)
    rows, named = [], []
    for key, group in groups.items():
        group = sorted(group, key=lambda r: r.replicate)
        replicates = [r.replicate for r in group]
        if len(set(replicates)) < len(replicates):
            raise ValueError(
                f"cell {dict(zip(KEYS, key, strict=True))}: two records of one process "
                f"(replicates {replicates}); each process of a cell has one record"
            )
        if len(group) == 1:
            row = _cell_row(group[0])
            row["replicates_ok"] = 1 if group[0].status == "ok" else 0
        else:
            row = _replicated_row(group)
        rows.append(row)
        named.append(", ".join(origin.get(id(r), "") for r in group if id(r) in origin))
    columns = CELL_COLUMNS + SIZE_COLUMNS + ["family", "device_kind"] + REPLICATE_COLUMNS
    df = pd.DataFrame(rows, columns=columns)
    for col in REPLICATE_TEXT:
        df[col] = df[col].astype(object).fillna("").astype(str)
    df = with_floors(df, device)[columns + FLOOR_COLUMNS]
    if origin:
        _name_refused_rows(df, named)
    df = df.sort_values(KEYS, ignore_index=True)
    return CELLS_SCHEMA.validate(df)


def _name_refused_rows(df: pd.DataFrame, named: list[str]) -> None:
    """Raise a ValueError naming the file, the column and the check of every row of
    ``df`` (in its records' order, ``named[i]`` the files of row i) that the cells schema
    refuses; nothing when it refuses none (the table's own checks then run as usual)."""
    try:
        CELLS_SCHEMA.validate(df, lazy=True)
    except pa.errors.SchemaErrors as errors:
        cases = errors.failure_cases
        lines = []
        for case in cases.itertuples():
            row = case.index
            where = named[int(row)] if pd.notna(row) and int(row) < len(named) else "the table"
            column = case.column if isinstance(case.column, str) else "<row>"
            lines.append(f"{where}: field {column}: {case.check} fails ({case.failure_case!r})")
        message = "records the cells table refuses:\n" + "\n".join(dict.fromkeys(lines))
        raise ValueError(message) from None


def _cell_row(record: CellRecord) -> dict:
    d = record.to_dict()
    row = {c: d[c] for c in CELL_COLUMNS}
    row["loaded"] = judged_load(record)
    row.update({c: d["size"][c] for c in SIZE_COLUMNS})
    row["family"] = d["model"]
    row["device_kind"] = device_kind(
        record.device, record.device_name, (record.gpu or {}).get("name")
    )
    return row


def _replicated_row(group: list[CellRecord]) -> dict:
    """A cell measured in several processes as one row: the record of its median process
    (the lower of the two middle ones for an even count, so the row is one real process:
    its memory, energy and utilization belong to the time it reports), with
    REPLICATE_COLUMNS; ``reason`` also names the processes that are not ok, ``loaded``
    each process its load witnesses flagged, ``device_name`` every device kind where the
    processes ran on more than one (a node whose GPUs differ: ``ssmbench.analysis`` then
    makes no ratio of the cell).  No ok process: the first record's row."""
    import numpy as np

    from ssmbench import stats

    ok = [r for r in group if r.status == "ok" and r.time_ms_median is not None]
    by_time = sorted(ok, key=lambda r: r.time_ms_median)
    chosen = by_time[(len(by_time) - 1) // 2] if ok else group[0]
    row = _cell_row(chosen)
    row["replicates"] = max(r.replicates for r in group)
    row["replicates_ok"] = len(ok)
    kinds = sorted({r.device_name for r in group if r.device_name})
    if len(kinds) > 1:  # processes on two kinds of GPU: the row says so, "; "-joined
        row["device_name"] = "; ".join(kinds)
    others = "; ".join(
        f"r{r.replicate} {r.status}: {(r.reason or '').partition(chr(10))[0]}"
        for r in group
        if r not in ok
    )
    if others and chosen in ok:
        row["reason"] = f"other processes: {others}"
    loaded = [(r.replicate, judged_load(r)) for r in group]
    row["loaded"] = "; ".join(f"r{i}: {why}" for i, why in loaded if why)
    medians = [r.time_ms_median for r in ok]
    row["process_medians_ms"] = ";".join(f"{m:.6g}" for m in medians)
    row["process_maxmin"], row["process_cv"] = stats.between_spread(medians)
    _, lo, hi, kind = stats.replicated_median([r.samples_ms for r in ok])
    finite = bool(np.isfinite(lo) and np.isfinite(hi))
    row.update(time_ms_lo=lo if finite else None, time_ms_hi=hi if finite else None)
    row["time_interval"] = kind
    return row


def samples_table(records: Iterable[CellRecord]) -> pd.DataFrame:
    """One row per timing sample of every record, a replicated cell's processes each by
    its ``replicate``."""
    rows = [
        {**{k: getattr(r, k) for k in KEYS}, "replicate": r.replicate, "sample": i, "time_ms": t}
        for r in records
        for i, t in enumerate(r.samples_ms)
    ]
    df = pd.DataFrame(rows, columns=SAMPLES_COLUMNS)
    return SAMPLES_SCHEMA.validate(df.sort_values(SAMPLES_COLUMNS[:-1], ignore_index=True))


def read_samples(path: str | os.PathLike) -> pd.DataFrame:
    """Read a samples table and check it, naming the file on failure; one from before
    replicates reads as replicate 0 of every cell."""
    df = pd.read_parquet(path)
    if "replicate" not in df:
        df.insert(len(KEYS), "replicate", 0)
    return _checked(df[SAMPLES_COLUMNS], SAMPLES_SCHEMA, path, "samples table")


def verify_table(run: str, verify_records: Iterable[dict]) -> pd.DataFrame:
    rows = []
    for v in verify_records:
        base = {
            "run": run,
            "model": v["model"],
            "backend": v["backend"],
            "device": v["device"],
            "status": v["status"],
            "reason": v["reason"],
        }
        checks = v["checks"] or [{}]
        for c in checks:
            rows.append(
                {
                    **base,
                    "check": c.get("name"),
                    "dtype": c.get("dtype"),
                    **{k: c.get(k) for k in ("max_abs_err", "rel_rms_err", "atol", "rtol", "ok")},
                }
            )
    df = pd.DataFrame(rows, columns=list(VERIFY_SCHEMA.columns))
    return VERIFY_SCHEMA.validate(df)


def read_cells(path: str | os.PathLike) -> pd.DataFrame:
    """Read a cells table (CSV or Parquet) and check it, naming the file on failure."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"cells table {path} does not exist")
    if path.suffix == ".parquet":
        df = pd.read_parquet(path)
    else:
        df = _read_text_csv(
            path, (*TEXT_COLUMNS, "family", "device_kind", *REPLICATE_TEXT, *FLOOR_TEXT)
        )
    return _checked(df, CELLS_SCHEMA, path, "cells table")


def _read_text_csv(path, text: Iterable[str]) -> pd.DataFrame:
    """A CSV whose ``text`` columns read as strings ("" where empty)."""
    text = tuple(text)
    df = pd.read_csv(path, dtype={c: object for c in text})
    for col in text:
        if col in df:
            df[col] = df[col].fillna("").astype(str)
    return df


def _checked(df: pd.DataFrame, schema: pa.DataFrameSchema, path, what: str) -> pd.DataFrame:
    """``df`` validated against ``schema``, or a ValueError naming the file and every
    failure."""
    try:
        return schema.validate(df, lazy=True)
    except (pa.errors.SchemaErrors, pa.errors.SchemaError) as e:
        raise ValueError(f"{path}: not a valid {what}:\n{e}") from None


def ops_table(ops_paths: Iterable[str]) -> pd.DataFrame:
    """The operator profiles of a run's profiled cells, one row per (cell, bucket)."""
    text = {c: object for c in ("top_kernels", "reason", "status", "bucket", "time_basis")}
    frames = [pd.read_csv(p, dtype=text) for p in ops_paths]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return OPS_SCHEMA.validate(pd.DataFrame(columns=OPS_COLUMNS))
    df = pd.concat(frames, ignore_index=True)
    if "status" not in df:  # written before profiles had a status: every row profiled
        df["status"] = "ok"
    if "reason" not in df:
        df["reason"] = ""
    df = df[OPS_COLUMNS]
    df["status"] = df["status"].fillna("ok")
    for col in ("top_kernels", "reason"):
        df[col] = df[col].fillna("")
    df = df.sort_values([*KEYS, "bucket"], ignore_index=True)
    return OPS_SCHEMA.validate(df)


def write_ops(rows: list[dict], path: str | os.PathLike) -> pd.DataFrame:
    """Write a profile job's rows (``ssmbench.cell.profile_or_status``) to ``path`` as CSV,
    atomically, in :data:`OPS_COLUMNS` order, and return the table written."""
    table = pd.DataFrame(rows).reindex(columns=OPS_COLUMNS)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp"
    table.to_csv(tmp, index=False)
    os.replace(tmp, path)
    return table


def read_ops(path: str | os.PathLike) -> pd.DataFrame:
    """Read an ops table and check it, naming the file on failure."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"ops table {path} does not exist")
    try:
        return ops_table([path])
    except (pa.errors.SchemaErrors, pa.errors.SchemaError, KeyError) as e:
        raise ValueError(f"{path}: not a valid ops table:\n{e}") from None


def write_tables(tables: dict, paths: dict) -> None:
    """Write ``{"cells": df, ...}`` to the paths ``{"cells.csv": ..., "cells.parquet": ...}``."""

    for name, path in paths.items():
        stem, ext = name.split(".")
        df = tables[stem]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tmp = f"{path}.tmp"
        if ext == "csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, index=False)
        os.replace(tmp, path)
