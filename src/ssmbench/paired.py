"""Paired cells: attention and an SSM timed in alternating calls of one process.

The verdict's ratios (attention's latency over each SSM's, per phase, at the lengths the
answer is read at) are too close to the machine's drift to come from two separate cells:
two runs of the cpu preset a day apart gave cell medians a median factor of 1.33 apart,
and a cell measured minutes after another inherits whatever the machine did meanwhile.
A paired cell builds both models, warms both, then times them in rounds, A B, B A, A B,
... (:func:`ssmbench.measure.timing.measure_pair`), so round i's two samples saw the same
moment of the machine.  Its record keeps both sides' samples; the interval of the ratio
resamples rounds (``ssmbench.stats``, paired).

One job per pair, named by its SSM side's axes (``ssmbench.paths.PAIRED``); attention
runs the same backend, phase, batch, T and dtype (``ssmbench.config.paired_attention``),
and each side must have passed its verification for the phase, as a bench cell must.
The separate cells of both sides are still measured (memory, energy, utilization come
from them); the paired cell measures time only.
"""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import asdict, dataclass, field

import jsonschema

from ssmbench.gpulease import gpu_record
from ssmbench.matrix import Cell, compute_dtype, paired_attention
from ssmbench.paths import REPO
from ssmbench.records import (
    RecordError,
    check_schema,
    integer_fields,
    not_an_integer,
    read_json,
    verify_summary,
    write_json_atomic,
)

PAIRED_SCHEMA_VERSION = 2  # 2: replicate, replicates and the load witnesses


@dataclass
class PairedRecord:
    # identity: the SSM side's axes (attention's are the same, with d_state 0)
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
    host_allocator: str = ""
    load_avg_1m: float | None = None
    # replicate r of the pair's k processes (preset key paired.replicates)
    replicate: int = 0
    replicates: int = 1
    # was the machine ours (ssmbench.measure.load): other processes' cores, steal, a probe
    # before and after; `loaded` says why not, "" when it was
    other_cpu_cores: float | None = None
    steal_share: float | None = None
    probe_before_ms: float | None = None
    probe_after_ms: float | None = None
    loaded: str = ""
    seed: int = 0
    cache_source: str = ""  # decode: "prefill" or "random", for both sides
    kv_cache: str = ""  # attention decode: "in-place" or "concatenated"
    # the precision each side's operator computes in (ssmbench.config.compute_dtype)
    attention_compute_dtype: str = ""
    ssm_compute_dtype: str = ""
    timing: dict = field(default_factory=dict)  # the pair's sampling budget
    # rounds: sample i of both sides comes from round i (A B in even rounds, B A in odd)
    warmup: int = 0
    n_rounds: int = 0
    attention_samples_ms: list[float] = field(default_factory=list)
    ssm_samples_ms: list[float] = field(default_factory=list)
    attention_ms: float | None = None  # medians
    ssm_ms: float | None = None
    latency_ratio: float | None = None  # attention_ms / ssm_ms
    attention_flop: float | None = None  # ssmbench.counts, each side
    ssm_flop: float | None = None
    measure_s: float | None = None
    verify: dict | None = None  # {"attention": summary, "<ssm>": summary}
    git_commit: str = ""
    started: str = ""
    ended: str = ""
    schema_version: int = PAIRED_SCHEMA_VERSION

    @property
    def ssm_cell(self) -> Cell:
        return Cell(
            self.model,
            self.backend,
            self.phase,
            self.batch,
            self.seq_len,
            self.d_state,
            self.dtype,
        )

    def to_dict(self) -> dict:
        return asdict(self)


SCHEMA = REPO / "workflow" / "schemas" / "paired_record.schema.json"


@functools.cache
def _validator():
    schema = json.loads(SCHEMA.read_text())
    return jsonschema.validators.validator_for(schema)(schema)


def validate_paired(data: dict, path: str | os.PathLike = "<paired record>") -> None:
    """Raise ``ValueError`` naming the file and the field when ``data`` is not a paired
    record: a field its schema (workflow/schemas/paired_record.schema.json) refuses
    (unknown, missing, of another type, out of range), or an ok record without as many
    samples on each side."""
    check_schema(_validator(), data, path)
    wrong = not_an_integer(data, integer_fields(PairedRecord))
    if wrong:
        raise RecordError(f"{path}: {wrong}")
    if data["status"] == "ok":
        a, s = data.get("attention_samples_ms") or [], data.get("ssm_samples_ms") or []
        if not a or len(a) != len(s):
            raise ValueError(
                f"{path}: field ssm_samples_ms: an ok paired record needs as many samples "
                f"on each side, got {len(a)} (attention) and {len(s)} (ssm)"
            )


def write_paired(path: str | os.PathLike, record: PairedRecord) -> None:
    data = record.to_dict()
    validate_paired(data, path)
    write_json_atomic(path, data)


def read_paired(path: str | os.PathLike) -> PairedRecord:
    data = read_json(path)
    validate_paired(data, path)
    return PairedRecord(**data)


def run_paired(
    spec,
    verify: dict[str, dict] | None = None,
    threads: int | None = None,
    replicate: int = 0,
    replicates: int = 1,
):
    """Measure the paired cell whose SSM side is ``spec.cell`` (a
    :class:`ssmbench.cell.CellSpec` whose timing is the pair's) and return its
    :class:`PairedRecord`, replicate ``replicate`` of ``replicates`` processes.
    ``verify`` maps each side's model to its verify record.
    Whatever happens the result is a record: unavailable, oom, timeout and failed are
    statuses with a reason naming the side, as in :func:`ssmbench.cell.run_cell`."""
    from ssmbench.cell import identity
    from ssmbench.measure.timing import CellTimeout, deadline_alarm
    from ssmbench.process import error_status
    from ssmbench.provenance import git_state, now

    c = spec.cell
    record = PairedRecord(
        **identity(spec),
        timing=asdict(spec.timing),
        replicate=replicate,
        replicates=replicates,
        cache_source=spec.cache_source if c.phase == "decode" else "",
        attention_compute_dtype=compute_dtype("attention", c.backend, c.phase, c.dtype),
        ssm_compute_dtype=compute_dtype(c.model, c.backend, c.phase, c.dtype),
        started=now(),
        git_commit=git_state()["commit"],
        verify={m: verify_summary(v) for m, v in verify.items()} if verify else None,
    )
    timeout_s = spec.timing.timeout_s
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        with deadline_alarm(deadline):
            _measure_into(record, spec, verify, threads, deadline)
    except CellTimeout:
        record.status = "timeout"
        record.reason = (
            f"the pair's budget of timeout_s={spec.timing.timeout_s:g} s ran out after "
            f"{record.n_rounds} of min_samples={spec.timing.min_samples} rounds"
        )
    except Exception as e:
        record.status, record.reason = error_status(e)
    record.gpu = gpu_record(spec.device)  # the GPU it ran on, whatever its status
    record.ended = now()
    return record


def _sides(cell: Cell) -> tuple[Cell, Cell]:
    """(attention, SSM): the order of the rounds' first call and of the record's fields."""
    return paired_attention(cell), cell


def _measure_into(record: PairedRecord, spec, verify, threads, deadline) -> None:
    from dataclasses import replace

    from ssmbench import counts as counts_mod
    from ssmbench.cell import (
        _model_and_input,
        _verify_unusable,
        kv_cache_kind,
        load_into,
        phase_work,
    )
    from ssmbench.models.graphs import graph_unavailable
    from ssmbench.process import device_name, device_unavailable, set_threads

    c = spec.cell
    unavailable = device_unavailable(spec.device) or graph_unavailable(c.backend, spec.device)
    if unavailable:
        record.status, record.reason = "unavailable", unavailable
        return
    sides = _sides(c)
    for side in sides:
        if verify is not None:
            if side.model not in verify:
                record.status = "failed"
                record.reason = f"no verify record for {side.model}/{side.backend}"
                return
            unusable = _verify_unusable(side, verify[side.model])
            if unusable is not None:
                record.status, record.reason = unusable[0], f"{side.model}: {unusable[1]}"
                return

    import torch

    from ssmbench.measure.allocator import set_host_allocator
    from ssmbench.measure.load import LoadWatch
    from ssmbench.measure.timing import measure_pair

    record.host_allocator = set_host_allocator(spec.timing.host_allocator)
    record.threads = set_threads(threads)
    record.load_avg_1m = os.getloadavg()[0]
    watch = LoadWatch().start()
    record.device_name = device_name(spec.device)
    record.kv_cache = kv_cache_kind(sides[0])
    start = time.perf_counter()
    works = []
    for side in sides:
        side_spec = replace(spec, cell=side)
        model, x = _model_and_input(side_spec)
        works.append(phase_work(side, model, x, spec.cache_source))
    train = works[0].train
    with torch.inference_mode(not train):
        attention, ssm = measure_pair(
            (works[0].fn, works[1].fn), spec.timing, spec.device, deadline=deadline
        )
    record.measure_s = time.perf_counter() - start
    load_into(record, watch.stop())
    record.warmup = attention.warmup
    record.n_rounds = len(attention.samples_ms)
    record.attention_samples_ms = attention.samples_ms
    record.ssm_samples_ms = ssm.samples_ms
    if record.n_rounds < spec.timing.min_samples and attention.timed_out:
        record.status = "timeout"
        record.reason = (
            f"the pair's budget of timeout_s={spec.timing.timeout_s:g} s ran out after "
            f"{record.n_rounds} of min_samples={spec.timing.min_samples} rounds"
        )
        return
    record.attention_ms = attention.median_ms
    record.ssm_ms = ssm.median_ms
    record.latency_ratio = attention.median_ms / ssm.median_ms
    for side, name in zip(sides, ("attention_flop", "ssm_flop"), strict=True):
        n = counts_mod.counts(
            side.model, c.phase, spec.size, c.batch, c.seq_len, side.d_state, c.dtype
        )
        setattr(record, name, n.flop)
