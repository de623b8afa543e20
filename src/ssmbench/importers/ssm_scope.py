"""SSM-Scope's published measurements as two ssm-bench runs.

Source: sapmitra/SSM-Scope (MIT licence), the artifact of S. Mitra, R. Karami, H. Xu,
S. Huang, H. Kwon, "Characterizing State Space Model and Hybrid Language Model Performance
with Long Context", ISPASS 2026 (arXiv:2507.12442).  Its README ("Hardware Requirements")
names the two machines: a desktop "RTX 4090 GPU, >= 24 GB VRAM" with CUDA 12.x, and a
"Jetson Nano Orin (8 GB unified)" with CUDA 12.6 (JetPack 6.2), i.e. NVIDIA's Jetson Orin
Nano 8 GB module.  They become two runs:

=====================  ===========================================  =========================
run                    files read (under the clone's root)           device_name
=====================  ===========================================  =========================
``ssm-scope-rtx4090``  ``profile_data/``,                            NVIDIA GeForce RTX 4090
                       ``ispass_ae/notebooks/generation_times.csv``,
                       ``ispass_ae/notebooks/memory_footprints.csv``
``ssm-scope-jetson``   ``profile_data_jetson/``,                     NVIDIA Jetson Orin Nano
                       ``ispass_ae/notebooks/                        (8 GB)
                       memory_footprints_jetson.csv``
=====================  ===========================================  =========================

``device`` is ``cuda`` in both (their ``device`` column and folder names say so).

What each file becomes
----------------------
``generation_times.csv`` (desktop only; their Fig. 1 and 6b).  One row per (model, T): a
prompt of T tokens, batch 1, then ``generate`` of 256 new tokens.  Their harness
(``src/profiling/eval.py``, ``profile_model_generate`` / ``profile_model_mamba_generate``)
runs 5 untimed forwards, then times ONE forward (``prefill_time_seconds``, perf_counter
around the call plus ``cuda.synchronize``) and ONE ``generate`` call; ``decode_time_seconds``
is the generate time minus that prefill time and ``tpot_seconds`` = decode / 256.  Each
row gives two cells:

- ``prefill``: time to first token.  time_ms_median = prefill_time_seconds x 1e3 (s -> ms);
  tokens = T (batch x T).
- ``decode``: time per output token.  time_ms_median = decode_time_seconds x 1e3 / 256
  (= tpot_seconds x 1e3): the mean step over contexts T ... T+255, including generate's
  per-step Python and sampling overhead; tokens = 1 (batch), as in our decode cells, so
  tokens / (time_ms_median / 1e3) is their ``throughput_tokens_per_sec``.

Both are a single measurement, not a median of samples: time_ms_p95 = time_ms_median and
n_samples = 1.  Their model names there (``qwen25-instruct``, ``falcon-h1``, ``mamba2``) are
renamed to the names their memory file uses for the same checkpoints (GENERATION_NAMES:
the Fig. 6b script profiles Qwen2.5-0.5B-Instruct, Falcon-H1-0.5B-Base and Mamba2-780m).

``memory_footprints*.csv`` (Fig. 5a, 5b).  One prefill forward per (model, T, batch) under
``torch.cuda.max_memory_allocated`` (``src/memory/mem_footprint.py``).  Their "MB" are MiB
(bytes / 1024**2, rounded to 0.01), so bytes = MB x 2**20:

- peak_bytes = total_memory_mb (= weights + activations + cache, which is the peak allocated
  of the forward with ``use_cache=True``; without a cache for mamba_ssm models);
- weights_bytes = model_size_mb (parameters x element size);
- activations_bytes = activation_memory_mb (peak without cache - weights);
- cache_bytes = kv_cache_mb (peak with ``use_cache=True`` - peak without).  For the mamba_ssm
  models they write 0 by rule, not by measurement: left empty.  A negative value (the
  Falcon-H1 row at T = 256 has -230.26) is a difference of two noisy peaks: left empty, and
  ``memory_method`` says so.  ``reserved_memory_mb`` (allocator reserve) has no column here.

A memory row whose (model, T) has a timed prefill cell fills that cell's memory columns.
Every other row becomes a prefill cell with status ``unavailable`` and a reason saying that
SSM-Scope published no latency for it: the cells schema lets only timed cells be ``ok``.
All Jetson cells are of this kind (no end-to-end timings were published for the Jetson).
Where a row is short (their ``qwen25-instruct-int4`` row at T = 57344 lacks the last two
fields) the missing values stay empty.

``profile_data*/<model>_cuda_<batch>_<T>/`` (Fig. 7, 8, 9) -> the ops table.  torch.profiler
over 10 prefill forwards (``profile_model`` / ``profile_model_mamba``).  ``<run>.csv`` lists
every operator called directly inside the forward with its summed ``cpu_time (us)`` (host
wall time of the operator, children included), ``cuda_time (us)`` (the device time of the
kernels it and its children launched: FunctionEvent.device_time) and ``count``; the 12
category files (``gemm.csv`` ... ``other.csv``) say which operator belongs to which category.
Their own percentages (``pct_*.csv``, ``*_breakdown.csv``, the paper's bars) divide
``total_time = cpu_time + cuda_time``, a sum of host and device time; this importer does not
use them.  It uses ``cuda_time`` alone, so ``time_basis = "cuda_device"``: per bucket,
time_ms = sum of cuda_time (us) / 1e3 / 10 forwards, share = time_ms / the forward's device
total, n_kernels = operator calls per forward (their counts; operators, not kernels) and
top_kernels = the bucket's three operators with the most device time.  The categorized
operators add up to the ``inference_prof`` device total within 0.2 % in every folder but
the Jetson Hymba one (5 %), where ``torch-compiled region: 0/*`` is in no category file: such
operators go to ``other``.  ``cudadevicesynchronize`` (their harness's sync after each forward)
and ``buffer flush`` (the profiler's own) are left out.

Buckets (CATEGORY_BUCKETS, then OP_BUCKETS, which wins): their categories follow the op
kinds of our own profiler (``ssmbench.measure.profile``): ``GEMM`` -> gemm, ``SSM_Scan`` ->
ssm_scan, ``nomralization`` (sic) -> normalization, ``activation``, ``arithmetic``,
``logit_computation`` (softmax), ``memory`` (casts, copies, cat, indexing; its views take
no device time) and ``embedding`` (a gather) -> elementwise; ``pooling``, ``interpolation``,
``roi``, ``other`` -> other.  Their GEMM also holds ``aten::scaled_dot_product_attention``
(-> attention) and, in some zamba2 folders, ``causalconv1dfn``, which their SSM_Scan holds
elsewhere (-> convolution in both).  What no rule can split: mamba_ssm's fused
``mambainnerfn`` (conv1d, x/dt/out projections and the selective scan in one autograd
function) and ``mambasplitconv1dscancombinedfn`` stay whole in ssm_scan; Hymba's attention
runs inside ``torch-compiled region`` and stays in other.

Models (MODELS): family, backend, dtype and d_state come from how their loader
(``src/models/profile_runner.py``) builds each model.  ``backend = "mamba_ssm"``: the
mamba_ssm package's ``MambaLMHeadModel`` cast to fp16, with its fused CUDA/Triton kernels;
``backend = "hf"``: transformers' ``AutoModelForCausalLM`` (default attention
implementation; the hybrids call mamba_ssm / causal_conv1d kernels where installed).  The
``hf`` models load with ``torch_dtype="auto"`` (the checkpoint's stored dtype, bfloat16 for
these checkpoints; their weights of 2 bytes per parameter in ``model_size_mb`` confirm a
16-bit type), Falcon-H1 with bfloat16, GPT-Neo with ``.to(float16)``; the GPTQ int4 model
computes in fp16.  d_state is the checkpoint's SSM state size for the pure SSMs (16 for
Mamba-1, 128 for Mamba-2) and 0 ("not recorded", our placeholder for no state axis) for
attention and hybrid models.  ``family`` maps their model names to our family colours.

What their data lacks relative to our cells table: repeated samples (p95, spread), FLOP and
byte counts (so intensity, TFLOP/s, utilization), device ceilings, energy (their Fig. 6a
energy logs are not among these files), clocks, thread counts and the size preset columns
(d_model ... chunk: one preset per run does not describe a zoo of checkpoints; they are left
empty, see :func:`cells_schema`).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pandera.pandas as pa

from ssmbench import claims
from ssmbench.catalogue import device_kind
from ssmbench.importers.layout import RUNS, Run  # noqa: F401  (read from here by the tests)
from ssmbench.tables import (
    CELL_COLUMNS,
    CELLS_SCHEMA,
    KEYS,
    OPS_COLUMNS,
    OPS_SCHEMA,
    SIZE_COLUMNS,
    write_tables,
)

MIB = 2**20  # their "MB": bytes / 1024**2
US_PER_MS = 1e3
TIME_BASIS = "cuda_device"
BATCH = 1  # every generation and profile run: one prompt (gen_random_prompt, batch_size 1)


@dataclass(frozen=True)
class Model:
    family: str  # our family, for colours
    backend: str  # "hf" or "mamba_ssm" (module docstring)
    dtype: str
    d_state: int  # 0: not recorded / no SSM state axis
    checkpoint: str  # the Hugging Face id their loader uses


MODELS = {
    "mamba-130m": Model("mamba", "mamba_ssm", "fp16", 16, "state-spaces/mamba-130m"),
    "mamba-790m": Model("mamba", "mamba_ssm", "fp16", 16, "state-spaces/mamba-790m"),
    "mamba-1.4b": Model("mamba", "mamba_ssm", "fp16", 16, "state-spaces/mamba-1.4b"),
    "mamba2-130m": Model("mamba2", "mamba_ssm", "fp16", 128, "state-spaces/mamba2-130m"),
    "mamba2-780m": Model("mamba2", "mamba_ssm", "fp16", 128, "state-spaces/mamba2-780m"),
    "hymba": Model("hybrid", "hf", "bf16", 0, "nvidia/Hymba-1.5B-Instruct"),
    "zamba2": Model("hybrid", "hf", "bf16", 0, "Zyphra/Zamba2-1.2B-Instruct-v2"),
    "falcon-h1-0.5b": Model("hybrid", "hf", "bf16", 0, "tiiuae/Falcon-H1-0.5B-Base"),
    "qwen25-instruct": Model("attention", "hf", "bf16", 0, "Qwen/Qwen2.5-0.5B-Instruct"),
    "qwen25-1.5b-instruct": Model("attention", "hf", "bf16", 0, "Qwen/Qwen2.5-1.5B-Instruct"),
    "qwen25-instruct-int4": Model(
        "attention", "hf", "fp16", 0, "Qwen/Qwen2.5-0.5B-Instruct-GPTQ-Int4"
    ),
    "llama3_2": Model("attention", "hf", "bf16", 0, "meta-llama/Llama-3.2-1B-Instruct"),
    "tinyllama": Model("attention", "hf", "bf16", 0, "TinyLlama/TinyLlama-1.1B-Chat-v1.0"),
    "gpt-neo-125m": Model("attention", "hf", "fp16", 0, "EleutherAI/gpt-neo-125m"),
    "phi3": Model("attention", "hf", "bf16", 0, "microsoft/Phi-3-mini-128k-instruct"),
}
FAMILIES = {name: model.family for name, model in MODELS.items()}
BACKENDS = {
    "mamba_ssm": "mamba_ssm MambaLMHeadModel in fp16 with its fused CUDA/Triton kernels",
    "hf": "transformers AutoModelForCausalLM, default attention implementation",
}
# generation_times.csv model name -> the name memory_footprints.csv gives that checkpoint
GENERATION_NAMES = {
    "qwen25-instruct": "qwen25-instruct",
    "falcon-h1": "falcon-h1-0.5b",
    "mamba2": "mamba2-780m",
}

# Category file of a profile folder -> their category name (spelling theirs).
CATEGORY_FILES = {
    "gemm.csv": "GEMM",
    "ssm_scan.csv": "SSM_Scan",
    "activation.csv": "activation",
    "arithmetic.csv": "arithmetic",
    "logit_computation.csv": "logit_computation",
    "nomralization.csv": "nomralization",
    "memory.csv": "memory",
    "embedding.csv": "embedding",
    "pooling.csv": "pooling",
    "interpolation.csv": "interpolation",
    "roi.csv": "roi",
    "other.csv": "other",
}
CATEGORY_BUCKETS = {
    "GEMM": "gemm",
    "SSM_Scan": "ssm_scan",
    "nomralization": "normalization",
    "activation": "elementwise",
    "arithmetic": "elementwise",
    "logit_computation": "elementwise",
    "memory": "elementwise",
    "embedding": "elementwise",
    "pooling": "other",
    "interpolation": "other",
    "roi": "other",
    "other": "other",
    "uncategorized": "other",  # in <run>.csv but in no category file
}
# Operators whose kind has a bucket of its own here but not there; these win.
OP_BUCKETS = {
    "aten::scaled_dot_product_attention": "attention",
    "aten::_scaled_dot_product_efficient_attention": "attention",
    "aten::_native_multi_head_attention": "attention",
    "causalconv1dfn": "convolution",
    "aten::conv1d": "convolution",
    "conv1d": "convolution",
}
# Rows of <run>.csv that are not operators of the model: the profiler's steps, the range
# around each forward, their harness's sync, the profiler's buffer flush, and the category
# totals appended at the end.
NOT_OPERATORS = {
    "inference_prof",
    "cudadevicesynchronize",
    "buffer flush",
    "GEMM",
    "NonGEMM",
    "SSM_Scan",
    "Inference",
}
TOP_OPERATORS = 3

_PROFILE_DIR = re.compile(r"^(?P<model>.+)_(?P<device>[a-z]+)_(?P<batch>\d+)_(?P<seq_len>\d+)$")
_GENERATION_NAME = re.compile(
    r"^gen_(?P<model>.+)_(?P<device>[a-z]+)_(?P<new_tokens>\d+)_(?P<seq_len>\d+)$"
)


class SSMScopeFormatError(ValueError):
    """A file of the SSM-Scope clone is missing or not in the expected format; the message
    names the file and, where one is at fault, the column (also as ``.path``, ``.column``)."""

    def __init__(self, path: str | Path, message: str, column: str | None = None):
        self.path = Path(path)
        self.column = column
        where = f"{self.path}" + (f", column {column!r}" if column else "")
        super().__init__(f"SSM-Scope import: {where}: {message}")


def cells_schema() -> pa.DataFrameSchema:
    """The schema imported cells tables satisfy: ``tables.CELLS_SCHEMA``, except that the
    size preset columns may be empty (an external run has no preset) and a ``family``
    column names each model's family.  Equal to CELLS_SCHEMA once that has both."""
    schema = CELLS_SCHEMA.update_columns(
        {
            c: {"dtype": pd.Int64Dtype(), "nullable": True}
            for c in SIZE_COLUMNS
            if not CELLS_SCHEMA.columns[c].nullable
        }
    )
    if "family" not in schema.columns:
        schema = schema.add_columns({"family": pa.Column(str, nullable=True, coerce=True)})
    return schema


CELLS_OUT_COLUMNS = CELL_COLUMNS + SIZE_COLUMNS + ["family", "device_kind"]


# ---------------------------------------------------------------------------------------
# Reading their CSV files, with errors that name the file and the column.


def _read_csv(path: Path, columns: dict[str, str]) -> pd.DataFrame:
    """``path`` as a DataFrame whose ``columns`` are checked and converted by kind:
    ``text`` (non-empty), ``number`` (a float on every row), ``number?`` (a float or empty),
    ``int`` (a whole number on every row).  Other columns stay strings."""
    if not path.is_file():
        raise SSMScopeFormatError(path, "file not found (is the root a clone of SSM-Scope?)")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise SSMScopeFormatError(path, f"not a readable CSV file ({e})") from None
    df = df.fillna("")  # short rows: missing trailing fields
    for col, kind in columns.items():
        if col not in df.columns:
            raise SSMScopeFormatError(path, f"column missing; the file has {list(df.columns)}", col)
        raw = df[col].astype(str).str.strip()
        blank = raw == ""
        if kind == "text":
            if blank.any():
                raise SSMScopeFormatError(path, f"empty on line {_line(blank)}", col)
            df[col] = raw
            continue
        values = pd.to_numeric(raw.where(~blank), errors="coerce")
        bad = values.isna() & ~blank
        if bad.any():
            value = raw[bad].iloc[0]
            raise SSMScopeFormatError(path, f"not a number: {value!r} on line {_line(bad)}", col)
        if kind != "number?" and blank.any():
            raise SSMScopeFormatError(path, f"empty on line {_line(blank)}", col)
        if kind == "int":
            if (values != values.round()).any():
                raise SSMScopeFormatError(
                    path, f"not a whole number on line {_line(values != values.round())}", col
                )
            values = values.astype(int)
        df[col] = values
    return df


def _line(mask: pd.Series) -> int:
    """The file line of the first row where ``mask`` holds (line 1 is the header)."""
    return int(np.flatnonzero(mask.to_numpy())[0]) + 2


def _model(name: str, path: Path, column: str | None) -> Model:
    if name not in MODELS:
        raise SSMScopeFormatError(
            path,
            f"unknown model {name!r}: add it to ssmbench.importers.ssm_scope.MODELS "
            f"(known: {sorted(MODELS)})",
            column,
        )
    return MODELS[name]


def _no_duplicates(df: pd.DataFrame, key: list[str], path: Path) -> None:
    dup = df.duplicated(key, keep=False)
    if dup.any():
        row = df[dup].iloc[0]
        raise SSMScopeFormatError(
            path,
            f"more than one row for {dict(row[key])} (lines "
            f"{', '.join(str(i + 2) for i in np.flatnonzero(dup.to_numpy())[:4])})",
        )


# ---------------------------------------------------------------------------------------
# Cells: generation times (timed prefill and decode) and memory footprints.


def _cell(run: str, spec: Run, name: str, phase: str, seq_len: int, batch: int) -> dict:
    model = MODELS[name]
    return {
        **{c: np.nan for c in CELLS_OUT_COLUMNS},
        "run": run,
        "model": name,
        "family": model.family,
        "backend": model.backend,
        "phase": phase,
        "batch": batch,
        "seq_len": seq_len,
        "d_state": model.d_state,
        "dtype": model.dtype,
        "device": "cuda",
        "device_name": spec.device_name,
        "device_kind": device_kind("cuda", spec.device_name),
        "status": "ok",
        "reason": "",
        "n_samples": 1,
        "tokens": float(batch * seq_len if phase == "prefill" else batch),
        **{c: "" for c in ("memory_method", "energy_method", "energy_reason", "git_commit")},
        **{c: pd.NA for c in SIZE_COLUMNS},
    }


def _generation_cells(path: Path, run: str, spec: Run) -> list[dict]:
    df = _read_csv(
        path,
        {
            "model_name": "text",
            "input_seq_length": "int",
            "output_tokens": "int",
            "prefill_time_seconds": "number",
            "decode_time_seconds": "number",
            "tpot_seconds": "number",
            "device": "text",
        },
    )
    rows = []
    for i, r in df.iterrows():
        match = _GENERATION_NAME.match(r.model_name)
        if not match:
            raise SSMScopeFormatError(
                path,
                f"{r.model_name!r} on line {i + 2} is not gen_<model>_<device>_<tokens>_<T>",
                "model_name",
            )
        short = match["model"]
        if short not in GENERATION_NAMES:
            raise SSMScopeFormatError(
                path,
                f"unknown model {short!r} on line {i + 2}: add it to GENERATION_NAMES "
                f"(known: {sorted(GENERATION_NAMES)})",
                "model_name",
            )
        for col, value in (("input_seq_length", "seq_len"), ("output_tokens", "new_tokens")):
            if int(match[value]) != r[col]:
                raise SSMScopeFormatError(
                    path, f"line {i + 2}: {r[col]} disagrees with {r.model_name!r}", col
                )
        if r.output_tokens < 1:
            raise SSMScopeFormatError(path, f"line {i + 2}: no tokens generated", "output_tokens")
        decode_s = r.decode_time_seconds / r.output_tokens
        if not np.isclose(decode_s, r.tpot_seconds, rtol=1e-3):
            raise SSMScopeFormatError(
                path,
                f"line {i + 2}: {r.tpot_seconds} != decode_time_seconds / output_tokens",
                "tpot_seconds",
            )
        name = GENERATION_NAMES[short]
        for phase, seconds in (("prefill", r.prefill_time_seconds), ("decode", decode_s)):
            if seconds < 0:
                raise SSMScopeFormatError(
                    path, f"negative time on line {i + 2}", f"{phase}_time_seconds"
                )
            cell = _cell(run, spec, name, phase, int(r.input_seq_length), BATCH)
            cell["device"] = r.device
            cell["time_ms_median"] = cell["time_ms_p95"] = seconds * US_PER_MS  # s -> ms
            rows.append(cell)
    return rows


_MEMORY_PARTS = {  # our column <- their column (MiB)
    "peak_bytes": "total_memory_mb",
    "weights_bytes": "model_size_mb",
    "activations_bytes": "activation_memory_mb",
    "cache_bytes": "kv_cache_mb",
}


def _memory_cells(path: Path, run: str, spec: Run, timed: list[dict]) -> list[dict]:
    """Fill the memory columns of the ``timed`` prefill cells from the memory file; return
    the cells of memory rows without a timed twin (status ``unavailable``)."""
    df = _read_csv(
        path,
        {
            "model_name": "text",
            "model_config": "text",
            "seq_len": "int",
            "batch_size": "int",
            **{col: "number?" for col in _MEMORY_PARTS.values()},
        },
    )
    _no_duplicates(df, ["model_name", "seq_len", "batch_size"], path)
    by_key = {(c["model"], c["seq_len"], c["batch"]): c for c in timed if c["phase"] == "prefill"}
    untimed = []
    for i, r in df.iterrows():
        model = _model(r.model_name, path, "model_name")
        if r.model_config != model.checkpoint:
            raise SSMScopeFormatError(
                path,
                f"line {i + 2}: {r.model_name!r} is {model.checkpoint!r} in MODELS, "
                f"not {r.model_config!r}",
                "model_config",
            )
        if r.seq_len < 1 or r.batch_size < 1:
            raise SSMScopeFormatError(path, f"line {i + 2}: seq_len and batch_size must be >= 1")
        key = (r.model_name, int(r.seq_len), int(r.batch_size))
        cell = by_key.get(key)
        if cell is None:
            cell = _cell(run, spec, r.model_name, "prefill", key[1], key[2])
            cell.update(
                status="unavailable",
                n_samples=0,
                reason=f"SSM-Scope published no latency for this cell, only its memory "
                f"footprint ({path.name})",
            )
            untimed.append(cell)
        notes = ["ssm-scope: peak allocated over one prefill forward"]
        if model.backend == "mamba_ssm":
            notes.append("no cache measured (kv_cache_mb is 0 by rule)")
        else:
            notes.append("cache = peak with use_cache - peak without")
        for ours, theirs in _MEMORY_PARTS.items():
            mib = r[theirs]
            if ours == "cache_bytes" and model.backend == "mamba_ssm":
                continue
            if pd.notna(mib) and mib < 0:
                notes.append(f"{theirs} {mib:g} < 0 left empty")
                continue
            cell[ours] = mib * MIB  # MiB -> bytes
        cell["memory_method"] = "; ".join(notes)
    return untimed


def _cells(root: Path, run: str, spec: Run) -> tuple[pd.DataFrame, list[Path]]:
    sources = []
    timed = []
    if spec.generation is not None:
        sources.append(root / spec.generation)
        timed = _generation_cells(root / spec.generation, run, spec)
        _no_duplicates(
            pd.DataFrame(timed), ["model", "phase", "batch", "seq_len"], root / spec.generation
        )
    sources.append(root / spec.memory)
    untimed = _memory_cells(root / spec.memory, run, spec, timed)
    df = pd.DataFrame(timed + untimed, columns=CELLS_OUT_COLUMNS)
    for col in SIZE_COLUMNS:
        df[col] = df[col].astype(pd.Int64Dtype())
    df = df.sort_values(KEYS, ignore_index=True)
    return _validate(cells_schema(), df, root, run, "cells"), sources


# ---------------------------------------------------------------------------------------
# Ops: the operator profiles of profile_data*/.


def _profile_ops(folder: Path, run: str, spec: Run) -> tuple[list[dict], list[Path]]:
    match = _PROFILE_DIR.match(folder.name)
    name = match["model"]
    model = _model(name, folder, None)
    seq_len, batch = int(match["seq_len"]), int(match["batch"])
    if seq_len < 1 or batch < 1:
        raise SSMScopeFormatError(folder, "batch and sequence length in the name must be >= 1")

    main_path = folder / f"{folder.name}.csv"
    main = _read_csv(main_path, {"name": "text", "cuda_time (us)": "number", "count": "number?"})
    forwards = main[main.name == "inference_prof"]
    if forwards.empty or pd.isna(forwards["count"].iloc[0]) or forwards["count"].iloc[0] < 1:
        raise SSMScopeFormatError(
            main_path, "no 'inference_prof' row with a count (the profiled forwards)", "count"
        )
    n_forwards = float(forwards["count"].iloc[0])
    ops = main[~main.name.isin(NOT_OPERATORS) & ~main.name.str.startswith("profilerstep")]
    if ops["count"].isna().any():
        first = ops.index[ops["count"].isna()][0]  # main has a RangeIndex: row = line - 2
        raise SSMScopeFormatError(main_path, f"empty on line {first + 2}", "count")

    category: dict[str, str] = {}
    where: dict[str, Path] = {}
    sources = [main_path]
    for file, cat in CATEGORY_FILES.items():
        path = folder / file
        sources.append(path)
        listed = _read_csv(path, {"name": "text"}).name
        for op in listed[~listed.isin({cat, file[:-4], "Inference", "GEMM", "SSM_Scan"})]:
            if op in category and category[op] != cat:
                raise SSMScopeFormatError(
                    path, f"operator {op!r} is also in {where[op].name}", "name"
                )
            category[op], where[op] = cat, path

    ops = ops.assign(
        bucket=[
            OP_BUCKETS.get(op) or CATEGORY_BUCKETS[category.get(op, "uncategorized")]
            for op in ops.name
        ],
        time_ms=ops["cuda_time (us)"] / US_PER_MS / n_forwards,  # us over all forwards -> ms each
    )
    total_ms = ops.time_ms.sum()
    rows = []
    for bucket, group in ops.groupby("bucket", sort=True):
        top = group[group.time_ms > 0].sort_values("time_ms", ascending=False)
        rows.append(
            {
                "run": run,
                "model": name,
                "backend": model.backend,
                "phase": "prefill",
                "batch": batch,
                "seq_len": seq_len,
                "d_state": model.d_state,
                "dtype": model.dtype,
                "device": match["device"],
                "device_name": spec.device_name,
                "status": "ok",
                "reason": "",
                "bucket": bucket,
                "time_ms": group.time_ms.sum(),
                "share": group.time_ms.sum() / total_ms if total_ms > 0 else 0.0,
                "n_kernels": group["count"].sum() / n_forwards,
                "top_kernels": ";".join(top.name.head(TOP_OPERATORS)),
                "time_basis": TIME_BASIS,
            }
        )
    return rows, sources


def _ops(root: Path, run: str, spec: Run) -> tuple[pd.DataFrame, list[Path]]:
    base = root / spec.profiles
    if not base.is_dir():
        raise SSMScopeFormatError(
            base, "profile folder not found (is the root a clone of SSM-Scope?)"
        )
    folders = sorted(p for p in base.iterdir() if p.is_dir() and _PROFILE_DIR.match(p.name))
    if not folders:
        raise SSMScopeFormatError(base, "no <model>_<device>_<batch>_<T> profile folders")
    rows, sources = [], []
    for folder in folders:
        found, read = _profile_ops(folder, run, spec)
        rows += found
        sources += read
    df = pd.DataFrame(rows, columns=OPS_COLUMNS).sort_values([*KEYS, "bucket"], ignore_index=True)
    return _validate(OPS_SCHEMA, df, root, run, "ops"), sources


def _validate(schema, df: pd.DataFrame, root: Path, run: str, table: str) -> pd.DataFrame:
    try:
        return schema.validate(df, lazy=True)
    except (pa.errors.SchemaErrors, pa.errors.SchemaError) as e:
        raise SSMScopeFormatError(
            root, f"the imported {table} table of {run} is not valid:\n{e}"
        ) from None


# ---------------------------------------------------------------------------------------
# Public API.


def _import(root: str | Path) -> dict[str, tuple[dict[str, pd.DataFrame], list[Path]]]:
    root = Path(root)
    if not root.is_dir():
        raise SSMScopeFormatError(root, "not a directory (expected a clone of SSM-Scope)")
    out = {}
    for run, spec in RUNS.items():
        cells, cell_sources = _cells(root, run, spec)
        ops, op_sources = _ops(root, run, spec)
        out[run] = ({"cells": cells, "ops": ops}, cell_sources + op_sources)
    return out


def import_ssm_scope(root: str | Path) -> dict[str, dict[str, pd.DataFrame]]:
    """Read a clone of SSM-Scope at ``root``: ``{run: {"cells": df, "ops": df}}`` for the
    runs of :data:`RUNS`.  Cells satisfy :func:`cells_schema`, ops ``tables.OPS_SCHEMA``.
    Raises :class:`SSMScopeFormatError`, naming the file and column, on a missing or
    malformed file."""
    return {run: found for run, (found, _) in _import(root).items()}


def write_runs(root: str | Path, out_dir: str | Path, provenance: bool = True) -> dict:
    """Import ``root`` and write ``<out_dir>/<run>/tables/cells.csv``, ``ops.csv`` and
    ``claims.csv`` (the layout of ``results/precollected/<run>/tables/``; the claims are
    config/claims.yaml judged on their cells, so that their headline numbers are tested
    on their own data), each with a ``.prov.json`` sidecar listing the source files and
    their sha256 unless ``provenance`` is False.  Returns ``{run: {"cells": path, ...}}``."""
    written = {}
    for run, (found, sources) in _import(root).items():
        tables_dir = Path(out_dir) / run / "tables"
        found = {**found, "claims": claims.evaluate(found["cells"], run)}
        paths = {f"{name}.csv": str(tables_dir / f"{name}.csv") for name in found}
        write_tables(found, paths)
        if provenance:
            from ssmbench.provenance import write_sidecars

            write_sidecars(
                list(paths.values()),
                rule="import_ssm_scope",
                inputs=[str(p) for p in _existing([*sources, claims.CLAIMS])],
                params={"root": str(root), "run": run},
                extra={"source": "https://github.com/sapmitra/SSM-Scope"},
            )
        written[run] = {name: paths[f"{name}.csv"] for name in found}
    return written


def _existing(paths: Iterable[Path]) -> list[Path]:
    return sorted({p for p in paths if p.is_file()})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="a clone of sapmitra/SSM-Scope")
    parser.add_argument("out_dir", help="writes <out_dir>/<run>/tables/{cells,ops,claims}.csv")
    args = parser.parse_args(argv)
    for run, paths in write_runs(args.root, args.out_dir).items():
        print(run, *paths.values())


if __name__ == "__main__":
    main()
