"""The record of one whole-model cell (:class:`LMRecord`), its JSON schema, atomic writes.

As for block cells (:mod:`ssmbench.records`), every cell writes one record whatever happens:
``status`` is ``ok``, ``oom``, ``unavailable``, ``timeout``, ``failed`` or ``not_run``, with
``reason`` when it is not ``ok``; a quantity not measured is ``None``.  The record is
validated against ``workflow/schemas/lm_record.schema.json`` on write and on read, and a
bad one is refused naming the file and the field.  Torch-free.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict, dataclass, field, fields

import jsonschema

from ssmbench.paths import REPO
from ssmbench.records import check_schema, read_json, write_json_atomic

SCHEMA = REPO / "workflow" / "schemas" / "lm_record.schema.json"
SCHEMA_VERSION = 1


@dataclass
class LMRecord:
    # identity: the cell's axes (ssmbench.lm.cell.LMCellSpec) and the model's size preset
    run: str
    model: str
    backend: str
    phase: str  # prefill (TTFT) or decode (TPOT)
    batch: int
    seq_len: int  # T: the prompt's tokens
    new_tokens: int  # N: generate(N)'s tokens; 1 for prefill (the first token)
    dtype: str
    device: str
    preset: str  # full, reduced or ci (config/models.yaml)
    family: str = ""
    status: str = "ok"
    reason: str = ""
    device_name: str = ""
    # the physical GPU (index in PCI bus order, uuid, pci_bus_id, name) the job leased
    # and ran on (ssmbench.gpulease); None on a CPU and in records older than it
    gpu: dict | None = None
    threads: int | None = None
    host_allocator: str = ""
    load_avg_1m: float | None = None
    seed: int = 0
    n_params: int | None = None
    # hf-eager: "kernel packages blocked" when the process blocked them (lm.backends.prepare)
    isolation: str = ""
    # which implementation each decoder layer ran (lm.backends.layer_report), and a summary
    layers: list[dict] = field(default_factory=list)
    layer_impls: str = ""
    # timing: every sample kept (ms); prefill: one TTFT per sample; decode: one per step
    samples_ms: list[float] = field(default_factory=list)
    warmup: int = 0
    n_samples: int = 0
    spread: float | None = None  # interquartile range / median of the samples
    measure_s: float | None = None
    ttft_ms_median: float | None = None
    ttft_ms_p95: float | None = None
    tpot_ms_median: float | None = None
    tpot_ms_p95: float | None = None
    tokens_per_s: float | None = None  # prefill: batch * T / TTFT; decode: batch / TPOT
    # decode: (generate(N) - generate(1)) / (N - 1), per paired round, against the loop
    e2e_samples_ms: list[float] = field(default_factory=list)
    e2e_tpot_ms: float | None = None
    e2e_rel_diff: float | None = None  # (e2e - TPOT median) / TPOT median
    e2e_tolerance: float | None = None
    e2e_agrees: bool | None = None  # a flag, never a failure: timing noise is data
    # memory, bytes, from one run's allocator peak: peak = weights + cache + activations
    peak_bytes: float | None = None
    weights_bytes: float | None = None  # parameters and buffers, each storage once
    cache_bytes: float | None = None  # the cache object's tensors after the prefill
    cache_kv_bytes: float | None = None
    cache_conv_bytes: float | None = None
    cache_ssm_bytes: float | None = None
    cache_formula_bytes: float | None = None  # lm.verify.cache_formula at T, batch, dtype
    cache_formula_ok: bool | None = None  # every kind's elements equal the formula's
    activations_bytes: float | None = None
    memory_method: str = ""
    # energy of one call (a prefill, or one decode step of the batch) over a window >= 1 s
    energy_j: float | None = None
    energy_j_per_token: float | None = None
    energy_method: str = ""
    energy_reason: str = ""
    energy_window_s: float | None = None
    energy_calls: int | None = None
    # the correctness gate (lm.verify.verify_lm) this cell passed or failed
    verify: dict | None = None
    notes: list[str] = field(default_factory=list)  # flags that do not fail the cell
    git_commit: str = ""
    started: str = ""
    ended: str = ""
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> LMRecord:
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"lm record has unknown fields {sorted(unknown)}")
        return cls(**data)


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA.read_text())
    return jsonschema.validators.validator_for(schema)(schema)


def validate_lm_record(data: dict, path: str | os.PathLike = "<lm record>") -> None:
    """Raise ``ValueError`` naming the file and the field when ``data`` breaks the schema."""
    check_schema(_validator(), data, path)


def write_lm_record(path: str | os.PathLike, record: LMRecord) -> None:
    """Validate, then write atomically (a killed job leaves no half record)."""
    data = record.to_dict()
    validate_lm_record(data, path)
    write_json_atomic(path, data)


def read_lm_record(path: str | os.PathLike) -> LMRecord:
    """An lm record, checked against its schema; any fault names the file and the field."""
    data = read_json(path)
    validate_lm_record(data, path)
    return LMRecord.from_dict(data)
