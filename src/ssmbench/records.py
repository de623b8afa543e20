"""The result record of a cell (one dataclass), its JSON schema, and atomic writes; the
records a cell reads (verify, device, prewarm), checked, and what it keeps of a verify
record and reads from it (:func:`verify_summary`, :func:`phase_verdict`).

Every cell writes one record whatever happens (docs/ARCHITECTURE.md, "The contract"): ``status`` is
``ok``, ``oom``, ``unavailable``, ``timeout``, ``failed`` or ``not_run`` (a cell a budgeted
run never reached; reason e.g. ``budget``), and ``reason`` says why when it is not ``ok``.
Quantities that a run does not measure yet are ``None`` (empty in tables).
"""

from __future__ import annotations

import functools
import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import jsonschema

from ssmbench.paths import REPO
from ssmbench.registry import VERIFY_STATUSES

SCHEMA = REPO / "workflow" / "schemas" / "record.schema.json"
SCHEMA_VERSION = 3  # 3: replicate, replicates (headline cells in several processes)


@dataclass
class CellRecord:
    # identity: the cell's axes and the run's size preset
    run: str
    model: str
    backend: str
    phase: str
    batch: int
    seq_len: int
    d_state: int
    dtype: str
    device: str
    size: dict
    status: str = "ok"
    reason: str = ""
    device_name: str = ""
    # the physical GPU (index in PCI bus order, uuid, pci_bus_id, name) the job leased
    # and ran on (ssmbench.gpulease); None on a CPU and in records older than it
    gpu: dict | None = None
    threads: int | None = None
    host_allocator: str = ""  # the process's malloc policy (ssmbench.measure.allocator)
    load_avg_1m: float | None = None  # the host's 1-minute load average before measuring
    # was the machine ours while the cell was measured (ssmbench.measure.load): other
    # processes' cores, the hypervisor's steal, a probe before and after; `loaded` says
    # why not ("" when it was)
    other_cpu_cores: float | None = None
    steal_share: float | None = None
    probe_before_ms: float | None = None
    probe_after_ms: float | None = None
    loaded: str = ""
    seed: int = 0
    # a headline cell measured in `replicates` processes: this record is process
    # `replicate` (0..replicates-1); the cells table keeps the median one (ssmbench.tables)
    replicate: int = 0
    replicates: int = 1
    # timing: every sample kept, in milliseconds
    samples_ms: list[float] = field(default_factory=list)
    warmup: int = 0
    time_ms_median: float | None = None
    time_ms_p95: float | None = None
    n_samples: int = 0
    spread: float | None = None  # interquartile range / median of the samples
    measure_s: float | None = None  # wall time of every warm-up call and sample
    # analytic work (ssmbench.counts) and what the samples make of it
    tokens: int | None = None
    flop: float | None = None
    bytes: float | None = None
    intensity: float | None = None
    tflops: float | None = None
    bw_gbps: float | None = None
    # the precision the sequence operator computes in (ssmbench.config.compute_dtype),
    # whose ceilings the utilization divides by: e.g. "fp32" for a bf16 cell that widens
    compute_dtype: str = ""
    # utilization: fractions of the ceilings measured by `calibrate` (device.json) for the
    # compute dtype, and of the datasheet peaks beside them where the device has an entry
    ceiling_tflops: float | None = None
    ceiling_bw_gbps: float | None = None
    compute_util: float | None = None
    bw_util: float | None = None
    compute_util_datasheet: float | None = None
    bw_util_datasheet: float | None = None
    # the device's last-level cache (device.json) and whether the cell's minimum bytes fit
    # in it: a cache-resident cell's bandwidth may exceed the memory's
    llc_bytes: float | None = None
    cache_resident: bool | None = None
    # memory, bytes: peak = weights + cache + activations (see ssmbench.cell)
    peak_bytes: float | None = None
    weights_bytes: float | None = None
    cache_bytes: float | None = None
    cache_bytes_analytic: float | None = None  # ssmbench.counts, at the model's dtype
    activations_bytes: float | None = None
    graph_pool_bytes: float | None = None  # a CUDA graph's private memory pool (graph cells)
    memory_method: str = ""
    # operators one call runs, counted on one more call outside the timed loop
    # (ssmbench.measure.opcount): n_ops_kind "aten_ops" (CPU), "cuda_kernels" (eager GPU
    # launches) or "graph_kernels" (the kernels of a CUDA-graph replay); the dispatch
    # floor multiplies n_ops by device.json's dispatch cost.  None and "" where not
    # counted, and in records older than the count
    n_ops: int | None = None
    n_ops_kind: str = ""
    n_ops_method: str = ""
    # energy of one call (joules), and how it was measured or why not
    energy_j: float | None = None
    energy_j_per_token: float | None = None
    energy_method: str = ""
    energy_reason: str = ""
    energy_window_s: float | None = None  # the meter's window (timed calls, then padding)
    # GPU clocks around the timed loop (NVML); a drop flags throttling
    sm_clock_before_mhz: float | None = None
    sm_clock_after_mhz: float | None = None
    temperature_before_c: float | None = None
    temperature_after_c: float | None = None
    clock_drop: bool | None = None
    clocks_locked: bool = False  # the run locked the GPU clocks (ssmbench.measure.clocks)
    # attention decode: "in-place" (preallocated KV cache) or "concatenated" (naive loop)
    kv_cache: str = ""
    # decode: how the cache was made, "prefill" (a forward over T tokens) or "random"
    cache_source: str = ""
    # where it came from
    verify: dict | None = None
    git_commit: str = ""
    started: str = ""
    ended: str = ""
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> CellRecord:
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"record has unknown fields {sorted(unknown)}")
        return cls(**data)


class RecordError(ValueError):
    """A record or table that cannot be read: the message names the file and, where one
    is at fault, the key."""


def read_json(path: str | os.PathLike) -> dict:
    """The JSON object in ``path``; text that is not one raises :class:`RecordError`
    naming the file and where it breaks (a truncated record: "Expecting ',' ... line 40")."""
    return parse_json(Path(path).read_bytes(), path)


def parse_json(text: bytes | str, path: str | os.PathLike) -> dict:
    """:func:`read_json` of text already read from ``path``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise RecordError(
            f"{path}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    except UnicodeDecodeError as e:
        raise RecordError(f"{path}: not valid JSON: byte {e.start} is not UTF-8") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: not a JSON object but a {type(data).__name__}")
    bad = non_finite(data)
    if bad:
        where, value = bad[0]
        raise RecordError(
            f"{path}: field {where}: {value} is not a finite number (a record holds "
            "finite numbers, or null where a number is missing)"
        )
    return data


def non_finite(node, where: str = "") -> list[tuple[str, float]]:
    """(field, value) of every NaN or infinite number under ``node``: JSON has no such
    numbers, but Python's json reads ``NaN`` and ``Infinity`` (an edited record, or one
    written by a writer less strict than ours, which refuses them: ``write_json_atomic``),
    and every schema bound lets NaN through (each comparison with it is false)."""
    if isinstance(node, float) and not math.isfinite(node):
        return [(where or "<top level>", node)]
    if isinstance(node, dict):
        return [
            bad
            for k, v in node.items()
            for bad in non_finite(v, f"{where}.{k}" if where else str(k))
        ]
    if isinstance(node, list):
        return [bad for i, v in enumerate(node) for bad in non_finite(v, f"{where}[{i}]")]
    return []


def require_keys(data: dict, keys, path: str | os.PathLike, what: str) -> None:
    """Raise :class:`RecordError` naming the file and the first of ``keys`` that ``data``
    (a ``what``: "verify record", ...) lacks."""
    for key in keys:
        if key not in data:
            raise RecordError(f"{path}: key {key!r}: missing (a {what} has {list(keys)})")


@functools.cache
def schema() -> dict:
    with open(SCHEMA) as f:
        return json.load(f)


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    """The record schema's validator, built once per process (a run's aggregate and
    figure tables read every record of the run)."""
    return jsonschema.validators.validator_for(schema())(schema())


@functools.cache
def _fast_validator():
    """The schema compiled by fastjsonschema (a yes or no in a fraction of a millisecond,
    where jsonschema's walk of the 30 ``$ref`` takes milliseconds a record: a run's aggregate
    and its planning read every record), or None where the package is missing.  Compiled as
    draft 7, whose keywords the schema keeps to (tests/test_healing.py compares the two);
    jsonschema stays the judge and says where a record is wrong."""
    try:
        import fastjsonschema
    except ImportError:
        return None
    draft7 = {**schema(), "$schema": "http://json-schema.org/draft-07/schema#"}
    return fastjsonschema.compile(draft7, use_default=False)


def valid_record_fast(data: dict) -> bool:
    """Whether ``data`` meets the schema by the compiled check (False when it fails, or
    where fastjsonschema is missing: then ask :func:`validate_record`)."""
    check = _fast_validator()
    if check is None:
        return False
    try:
        check(data)
    except Exception:  # fastjsonschema.JsonSchemaException, and anything odd in data
        return False
    return True


def check_schema(validator, data: dict, path: str | os.PathLike) -> None:
    """Raise :class:`RecordError` naming the file and the field where ``data`` breaks the
    schema of ``validator`` (jsonschema's best match of its errors)."""
    try:
        error = jsonschema.exceptions.best_match(validator.iter_errors(data))
        if error is not None:
            raise error
    except jsonschema.ValidationError as e:
        where = ".".join(map(str, e.absolute_path)) or "<top level>"
        raise RecordError(f"{path}: field {where}: {e.message}") from None


def validate_record(data: dict, path: str | os.PathLike = "<record>") -> None:
    """Raise ``ValueError`` naming the file and the field when ``data`` breaks the schema
    or the rules across its fields (:func:`inconsistency`)."""
    check_schema(_validator(), data, path)
    why = inconsistency(data)
    if why:
        raise RecordError(f"{path}: {why}")


# the largest integer a record field may hold: every one fits a table's int64 column, and
# none is near it (a batch, a length, a count of samples)
MAX_INT = 2**53


def integer_fields(record_class) -> tuple[str, ...]:
    """The fields of a record dataclass typed ``int`` (or ``int | None``)."""
    return tuple(f.name for f in fields(record_class) if f.type in ("int", "int | None"))


# the block size every record carries (ssmbench.config.Size): integers but the pattern
SIZE_INTEGERS = ("d_model", "n_layers", "n_heads", "head_dim", "expand", "d_conv", "chunk")


def not_an_integer(data: dict, names) -> str | None:
    """The first of the fields ``names`` (and of the ``size`` it carries) whose value is a
    number but no integer: a float (JSON Schema counts ``9.2e18`` and ``2.0`` as
    integers; a table cannot), or one past :data:`MAX_INT`."""
    size = data.get("size") if isinstance(data.get("size"), dict) else {}
    pairs = [(name, data.get(name)) for name in names]
    pairs += [(f"size.{name}", size.get(name)) for name in SIZE_INTEGERS]
    for name, value in pairs:
        if isinstance(value, float):
            return f"field {name}: {value!r} is not an integer (a float in the JSON)"
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            return f"field {name}: {value} is beyond {MAX_INT}"
    return None


def inconsistency(data: dict) -> str | None:
    """What a schema-valid cell record says that cannot be, where JSON Schema cannot say
    it: an integer field holding a float (:func:`not_an_integer`), or an ok cell whose P95
    is below its median (the cells table refuses both, so they are refused, and named,
    where the record is read).  None when it is consistent."""
    wrong = not_an_integer(data, integer_fields(CellRecord))
    if wrong:
        return wrong
    median, p95 = data.get("time_ms_median"), data.get("time_ms_p95")
    if data.get("status") == "ok" and _number(median) and _number(p95) and p95 < median:
        return f"field time_ms_p95: {p95} is below the median, {median}"
    return None


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def write_json_atomic(path: str | os.PathLike, data: dict) -> None:
    """Write ``data`` as JSON to a temporary file beside ``path``, then rename it into place:
    a killed job leaves either no file or a whole one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, allow_nan=False, default=_jsonable)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _jsonable(x):
    if hasattr(x, "item"):  # numpy scalars
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def write_record(path: str | os.PathLike, record: CellRecord) -> None:
    data = record.to_dict()
    validate_record(data, path)
    write_json_atomic(path, data)


def read_record(path: str | os.PathLike) -> CellRecord:
    """A cell record, checked against the schema; any fault names the file and the field."""
    data = read_json(path)
    if not valid_record_fast(data) or inconsistency(data):
        validate_record(data, path)
    return CellRecord.from_dict(data)


# The verify record (ssmbench.verify.run.run_verify): what the cells, prewarm and tables read
VERIFY_KEYS = ("model", "backend", "device", "status", "reason", "checks")


def validate_verify(data: dict, path: str | os.PathLike = "<verify record>") -> None:
    """Raise :class:`RecordError` naming the file and the key where ``data`` is not a
    verify record: a key missing, a status unknown, ``checks`` not a list, a phase without
    its status and reason."""
    require_keys(data, VERIFY_KEYS, path, "verify record")
    if data["status"] not in VERIFY_STATUSES:
        raise RecordError(
            f"{path}: key 'status': {data['status']!r} is not one of {VERIFY_STATUSES}"
        )
    if not isinstance(data["checks"], list):
        raise RecordError(f"{path}: key 'checks': not a list")
    phases = data.get("phases", {})
    if not isinstance(phases, dict):
        raise RecordError(f"{path}: key 'phases': not an object")
    for phase, verdict in phases.items():
        if not isinstance(verdict, dict) or verdict.get("status") not in VERIFY_STATUSES:
            raise RecordError(
                f"{path}: key 'phases.{phase}': needs a status in {VERIFY_STATUSES} and a reason"
            )


def read_verify(path: str | os.PathLike) -> dict:
    """A verify record, checked (:func:`validate_verify`)."""
    data = read_json(path)
    validate_verify(data, path)
    return data


def verify_summary(verify: dict) -> dict:
    """The part of a verify record a cell record keeps (``backend`` and ``phases`` where
    the record has them: a graph cell keeps its base backend's)."""
    keys = ("status", "reason", "device", "dtypes", "seed", "backend", "phases")
    return {k: verify[k] for k in keys if k in verify}


def phase_verdict(verify: dict, phase: str) -> tuple[str, str]:
    """(status, reason) of ``phase`` in a verify record; a record without ``phases`` (an
    older one) has one verdict for every phase."""
    phases = verify.get("phases") or {}
    if phase in phases:
        return phases[phase]["status"], phases[phase]["reason"]
    return verify["status"], verify["reason"]


# What the cells read of the run's device.json (rule calibrate) and of a prewarm record
DEVICE_KEYS = ("status", "reason", "device")
PREWARM_KEYS = ("status", "reason", "shapes")
# a whole model's gate (rule lm_verify): passed, failed or unavailable, and why
LM_VERIFY_KEYS = ("model", "backend", "dtype", "device", "status", "reason", "passed", "checks")


def read_device(path: str | os.PathLike) -> dict:
    data = read_json(path)
    require_keys(data, DEVICE_KEYS, path, "device record")
    return data


def same_gpu(a: dict | None, b: dict | None) -> bool:
    """Whether two records' ``gpu`` fields (``ssmbench.devices.Gpu.to_dict``) name one
    physical GPU: the same UUID, or, where either lacks one, the same PCI bus id."""
    if not a or not b:
        return False
    if a.get("uuid") and b.get("uuid"):
        return a["uuid"] == b["uuid"]
    return bool(a.get("pci_bus_id")) and a.get("pci_bus_id") == b.get("pci_bus_id")


def _device_name(device_record: dict) -> str:
    gpu = device_record.get("gpu") or {}
    return gpu.get("name") or device_record.get("device_name") or ""


def ceilings_for(gpu: dict | None, device_records: list[dict]) -> dict | None:
    """The calibration record whose ceilings a cell on ``gpu`` (its record's ``gpu``
    field; None on a CPU) is divided by, from the run's ``device_records``: the record of
    that physical GPU (:func:`same_gpu`); where the run has none (one ``device.json``
    measured on whichever GPU SLURM gave), one of a GPU of the same model (name), never
    another model's; on a CPU, the record that names no GPU.  None where none fits: the
    cell then has no utilization rather than another device's."""
    if gpu is None:
        return next((r for r in device_records if not r.get("gpu")), None)
    own = [r for r in device_records if same_gpu(gpu, r.get("gpu"))]
    kind = [r for r in device_records if gpu.get("name") and _device_name(r) == gpu["name"]]
    return (own or kind or [None])[0]


def read_prewarm(path: str | os.PathLike) -> dict:
    data = read_json(path)
    require_keys(data, PREWARM_KEYS, path, "prewarm record")
    return data
