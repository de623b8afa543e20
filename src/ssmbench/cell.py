"""Measure one block cell (:func:`run_cell`) or profile it (:func:`profile_or_status`):
the functions the workflow's rules and ``python -m ssmbench`` both call, so a cell behaves
the same inside and outside the workflow.  A paired cell (:mod:`ssmbench.paired`) and the
prewarm job (:mod:`ssmbench.prewarm`) build their work with the same :func:`phase_work`.

Whatever happens, the result is a record: errors become ``status`` and ``reason``
(docs/ARCHITECTURE.md, "Decisions"; :mod:`ssmbench.process`), they are never raised out of
:func:`run_cell`.  Verifying a backend first is :mod:`ssmbench.verify.run`'s job; a cell
reads its verdict (:func:`ssmbench.records.phase_verdict`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ssmbench import counts as counts_mod
from ssmbench.gpulease import gpu_record
from ssmbench.matrix import Cell, Size, Timing, compute_dtype
from ssmbench.process import device_name, device_unavailable, error_status, set_threads
from ssmbench.provenance import git_state, now
from ssmbench.records import CellRecord, ceilings_for, phase_verdict, verify_summary


@dataclass(frozen=True)
class CellSpec:
    """A cell with the run-level settings it is measured under."""

    run: str
    cell: Cell
    device: str
    size: Size
    timing: Timing
    seed: int = 0
    cache_source: str = "prefill"  # a decode cell's cache: "prefill" or "random" values


def identity(spec: CellSpec) -> dict:
    """The fields a record of ``spec`` starts from: the run, the cell's axes, the device,
    the size preset and the seed."""
    return dict(
        run=spec.run,
        **asdict(spec.cell),
        device=spec.device,
        size=asdict(spec.size),
        seed=spec.seed,
    )


def spec_from_params(p) -> CellSpec:
    """The :class:`CellSpec` of a bench or profile job, from its rule's params (run, cell,
    device, size, timing and seed, as plain values)."""
    return CellSpec(
        run=p.run,
        cell=Cell(**p.cell),
        device=p.device,
        size=Size(**p.size),
        timing=Timing(**p.timing),
        seed=p.seed,
        cache_source=getattr(p, "cache_source", "prefill"),
    )


def run_cell(
    spec: CellSpec,
    verify: dict | None = None,
    threads: int | None = None,
    device_records: Sequence[dict] = (),
) -> CellRecord:
    """Measure one cell and return its record.

    ``verify`` is the (model, backend) verify record: a backend that did not pass is never
    timed.  ``threads`` fixes torch's CPU thread count (default: all cores).
    ``device_records`` are the run's calibrations (rule ``calibrate``: ``device.json``, or
    one per GPU): the one of the device the cell runs on (``records.ceilings_for``) gives
    its utilization against the measured ceilings.  ``spec.timing.timeout_s``
    bounds the whole cell (see :mod:`ssmbench.measure.timing`).
    """
    c = spec.cell
    record = CellRecord(
        **identity(spec),
        started=now(),
        git_commit=git_state()["commit"],
        verify=verify_summary(verify) if verify is not None else None,
        compute_dtype=compute_dtype(c.model, c.backend, c.phase, c.dtype),
    )
    timeout_s = spec.timing.timeout_s
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    from ssmbench.measure.timing import CellTimeout, deadline_alarm

    try:
        with deadline_alarm(deadline):
            _measure_into(record, spec, verify, threads, device_records, deadline)
    except CellTimeout:
        _timed_out(record, spec.timing)
    except Exception as e:
        record.status, record.reason = error_status(e)
    record.gpu = gpu_record(spec.device)  # the GPU it ran on, whatever its status
    record.ended = now()
    return record


def _timed_out(record: CellRecord, timing: Timing) -> None:
    record.status = "timeout"
    record.reason = (
        f"the cell's budget of timeout_s={timing.timeout_s:g} s ran out after "
        f"{record.n_samples} of min_samples={timing.min_samples} samples"
    )


class Work:
    """What one cell times: ``fn()`` runs one call of its phase.

    ``cache`` is the state or KV cache the call reads (decode) or returns (prefill), for
    the memory split; ``train`` says whether gradients are on; ``graph_pool_bytes`` is the
    memory a CUDA graph's capture took (graph cells, see
    :class:`ssmbench.models.graphs.GraphReplay`), else None.
    """

    def __init__(self, fn, cache, train: bool, graph_pool_bytes: float | None = None):
        self.fn, self.cache, self.train = fn, cache, train
        self.graph_pool_bytes = graph_pool_bytes


def load_into(record, load) -> None:
    """Copy a :class:`ssmbench.measure.load.LoadReading` into a cell or paired record."""
    record.other_cpu_cores, record.steal_share = load.other_cpu_cores, load.steal_share
    record.probe_before_ms, record.probe_after_ms = load.probe_before_ms, load.probe_after_ms
    record.loaded = load.loaded


def kv_cache_kind(c: Cell) -> str:
    """How a decode cell's attention layers keep their KV cache ("" where the cell has no
    attention layer or does not decode): "in-place" (preallocated, one token written per
    step) or "concatenated" (a new cache each step: the naive loop)."""
    from ssmbench.models.attention import CONCAT_BACKENDS
    from ssmbench.registry import verified_backend

    if c.phase != "decode" or c.model not in ("attention", "hybrid"):
        return ""
    return "concatenated" if verified_backend(c.backend) in CONCAT_BACKENDS else "in-place"


# a decode cell with a random cache takes its caches' shapes from a prefill this short
RANDOM_CACHE_PREFIX = 16


def phase_work(c: Cell, model, x, cache_source: str = "prefill") -> Work:
    """The callable of ``c.phase`` on ``model`` and input ``x (b, t, d_model)``.

    * prefill: ``model(x)``, the forward over T tokens, returning the output and every
      layer's state or KV cache;
    * decode: ``model.step(x_T, cache)``, one more token per sequence given the cache of
      T tokens; the cache is built before timing by a prefill with the ``torch`` backend
      (the forms are verified equal; the naive loop would only make set-up slow), and
      every sample steps from that same cache: an SSM's step returns a new state;
      attention's KV cache is put in a buffer of T + 1 tokens, into which every step
      writes its key and value in place at slot T (the ``naive`` loop keeps the pair and
      concatenates a new one, as the seed studies do; the record's ``kv_cache`` says which);
      with ``cache_source="random"`` the cache is not a prefill's but random values of the
      same shapes and dtypes (a prefill of RANDOM_CACHE_PREFIX tokens gives the shapes): a
      step's time depends on its cache's size, which keeps long contexts in budget;
    * train: forward and backward over T tokens with the scalar loss mean(y^2) in float32,
      gradients for every parameter (set to None before each call, so each call allocates
      them as a training step does).

    The compile backend compiles the sequence operators, not the one-token step: its decode
    cells are ``unavailable`` (the step of the torch cells is the same code).  A graph
    backend (``torch-graph``, ``fused-graph``) times the decode step only, as replays of a
    CUDA graph (:func:`ssmbench.models.graphs.graph_step`).
    """
    import torch

    from ssmbench.models import GRAPH_BACKENDS, graphs
    from ssmbench.models.common import BackendUnavailable
    from ssmbench.registry import BACKEND

    why = BACKEND[c.backend].unavailable(c.phase) if c.backend in BACKEND else ""
    if why:  # a backend that does not run this phase (registry: its phases)
        raise BackendUnavailable(why)

    if c.phase == "prefill":
        with torch.inference_mode():
            _, cache = model(x)
        return Work(lambda: model(x), cache, train=False)
    if c.phase == "decode":
        if cache_source not in ("prefill", "random"):
            raise ValueError(f"unknown cache_source {cache_source!r}; known: prefill, random")
        backend, model.backend = model.backend, "torch"
        prefix = x if cache_source == "prefill" else x[:, :RANDOM_CACHE_PREFIX]
        try:
            with torch.inference_mode():
                _, cache = model(prefix)
        finally:
            model.backend = backend
        if cache_source == "random":  # the shapes of a T-token cache, random values
            generator = torch.Generator().manual_seed(c.seq_len)
            with torch.inference_mode():
                cache = model.random_caches(cache, c.seq_len, generator)
        # attention's KV cache in a buffer of T + 1 tokens that each step writes in place
        # (the naive loop keeps its pair and concatenates); every sample writes slot T
        with torch.inference_mode():
            cache = model.decode_caches(cache, capacity=c.seq_len + 1)
        x_t = x[:, -1].clone()  # (b, d_model): any token will do, this one is real data
        if c.backend in GRAPH_BACKENDS:
            replay = graphs.graph_step(model, x_t, cache)
            return Work(replay, cache, train=False, graph_pool_bytes=replay.pool_bytes)
        return Work(lambda: model.step(x_t, cache), cache, train=False)
    if c.phase == "train":
        params = list(model.parameters())

        def step():
            for p in params:
                p.grad = None
            y, _ = model(x)
            y.float().square().mean().backward()

        return Work(step, None, train=True)
    raise ValueError(f"unknown phase {c.phase!r}; known: prefill, decode, train")


def _model_and_input(spec: CellSpec):
    """The cell's model (weights from the seed) and its input ``x (b, t, d_model)``; a
    decode cell with a random cache needs only its short prefix and one token, so its x
    holds RANDOM_CACHE_PREFIX + 1 tokens, not T (a 131072-token input is GBs)."""
    import torch

    from ssmbench.models import DTYPES, GRAPH_BACKENDS, build_model
    from ssmbench.models.common import RandomDraws

    c = spec.cell
    dtype = DTYPES[c.dtype]
    model = build_model(
        c.model,
        spec.size,
        max(c.d_state, 1),
        GRAPH_BACKENDS.get(c.backend, c.backend),  # a graph replays its base's step
        device=spec.device,
        dtype=dtype,
        seed=spec.seed,
    )
    generator = torch.Generator(device="cpu").manual_seed(spec.seed)
    tokens = c.seq_len
    if c.phase == "decode" and spec.cache_source == "random":
        tokens = min(c.seq_len, RANDOM_CACHE_PREFIX + 1)
    draws = RandomDraws(generator, spec.device, dtype)
    return model, draws.randn(c.batch, tokens, spec.size.d_model)


def profile_cell(
    spec: CellSpec, trace_path: str | None = None, threads: int | None = None, iters: int = 3
) -> list[dict]:
    """The operator profile of one cell (:func:`ssmbench.measure.profile.profile_ops` over
    ``iters`` calls of its phase after one warm-up), one row per bucket with the cell's
    keys; the Chrome trace goes to ``trace_path``.  Profiling slows the calls down, so it
    runs in a job of its own, never inside a timed cell.  Raises what the cell would
    raise (a cell that cannot run has no profile)."""
    import torch

    from ssmbench.measure.allocator import set_host_allocator
    from ssmbench.measure.profile import profile_ops

    c = spec.cell
    set_host_allocator(spec.timing.host_allocator)
    set_threads(threads)
    model, x = _model_and_input(spec)
    work = phase_work(c, model, x, spec.cache_source)
    with torch.inference_mode(not work.train):
        rows = profile_ops(work.fn, spec.device, warmup=1, iters=iters, trace_path=trace_path)
    keys = {"run": spec.run, **asdict(c), "device": spec.device}
    return [{**keys, "device_name": device_name(spec.device), **row} for row in rows]


def profile_or_status(
    spec: CellSpec,
    verify: dict | None = None,
    trace_path: str | None = None,
    threads: int | None = None,
    iters: int = 3,
) -> list[dict]:
    """The rows of a profile job, whatever happens: :func:`profile_cell`'s rows with
    ``status`` ok, or, where the cell cannot be profiled (its device or CUDA graphs are
    unavailable here, its verification did not pass for its phase, the profile raised or
    ran past ``spec.timing.timeout_s``), one row with the cell's keys, its ``status``
    (unavailable, failed, oom or timeout) and
    ``reason``, and an empty Chrome trace at ``trace_path`` (so the job's outputs exist and
    the run's aggregate never fails for a profile that could not run)."""
    from ssmbench.models.graphs import graph_unavailable

    c = spec.cell
    keys = {"run": spec.run, **asdict(c), "device": spec.device}
    status = reason = ""
    unavailable = device_unavailable(spec.device) or graph_unavailable(c.backend, spec.device)
    if unavailable:
        status, reason = "unavailable", unavailable
    elif verify is not None:
        status, reason = _verify_unusable(c, verify) or ("", "")
    if not status:
        from ssmbench.measure.timing import CellTimeout, deadline_alarm

        timeout_s = spec.timing.timeout_s  # the cell's budget bounds its profile too
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            with deadline_alarm(deadline):
                rows = profile_cell(spec, trace_path=trace_path, threads=threads, iters=iters)
            return [{**row, "status": "ok", "reason": ""} for row in rows]
        except CellTimeout:
            status = "timeout"
            reason = f"the profile ran past the cell's budget of timeout_s={timeout_s:g} s"
        except Exception as e:
            status, reason = error_status(e)
    if trace_path is not None:
        from ssmbench.measure.profile import write_empty_trace

        write_empty_trace(trace_path)
    try:
        name = device_name(spec.device) if not unavailable else ""
    except Exception:  # the device is what failed
        name = ""
    return [{**keys, "device_name": name, "status": status, "reason": reason}]


def _verify_unusable(c: Cell, verify: dict) -> tuple[str, str] | None:
    """(status, reason) when the verify record does not let cell ``c`` be timed: it is for
    another backend (a graph cell takes its base backend's record), or its verdict for the
    cell's phase is not ``passed``; None when the cell may be timed."""
    from ssmbench.models import GRAPH_BACKENDS

    accepted = (c.backend, GRAPH_BACKENDS.get(c.backend, c.backend))
    backend = verify.get("backend", c.backend)
    if backend not in accepted or verify.get("model", c.model) != c.model:
        return "failed", (
            f"the verify record is for {verify.get('model')}/{backend}, not for "
            f"{c.model}/{c.backend} (which takes {c.model}/{accepted[-1]}'s)"
        )
    status, reason = phase_verdict(verify, c.phase)
    if status == "passed":
        return None
    return (
        "unavailable" if status == "unavailable" else "failed",
        f"verification {status} for {c.model}/{backend} ({c.phase}): "
        + (reason or "no reason recorded"),
    )


def _measure_into(
    record: CellRecord, spec: CellSpec, verify: dict | None, threads, device_records, deadline
) -> None:
    from ssmbench.models.graphs import graph_unavailable

    c = spec.cell
    unavailable = device_unavailable(spec.device) or graph_unavailable(c.backend, spec.device)
    if unavailable:
        record.status, record.reason = "unavailable", unavailable
        return
    if verify is not None:
        unusable = _verify_unusable(c, verify)
        if unusable is not None:
            record.status, record.reason = unusable
            return

    import torch

    from ssmbench.measure.allocator import set_host_allocator
    from ssmbench.measure.clocks import clocks_locked
    from ssmbench.measure.energy import (
        EnergyMeter,
        clock_drop,
        gpu_clocks,
        min_window_s,
        window_reason,
    )
    from ssmbench.measure.load import LoadWatch
    from ssmbench.measure.memory import measure_peak, tensor_bytes
    from ssmbench.measure.timing import measure

    record.host_allocator = set_host_allocator(spec.timing.host_allocator)
    record.threads = set_threads(threads)
    record.load_avg_1m = os.getloadavg()[0]  # another busy process skews CPU timings
    watch = LoadWatch().start()
    record.device_name = device_name(spec.device)
    model, x = _model_and_input(spec)

    start = time.perf_counter()
    work = phase_work(c, model, x, spec.cache_source)  # prefill and decode: a first call
    fn = work.fn
    meter = EnergyMeter(spec.device)
    cuda = spec.device == "cuda"
    record.clocks_locked = clocks_locked()
    record.kv_cache = kv_cache_kind(c)
    record.cache_source = spec.cache_source if c.phase == "decode" else ""
    clocks = {}  # the GPU clocks of the warm device, before and after the timed loop

    def read_clocks():
        clocks["before"] = gpu_clocks()

    with torch.inference_mode(not work.train):
        result = measure(
            fn,
            spec.timing,
            spec.device,
            deadline=deadline,
            meter=meter,
            after_warmup=read_clocks if cuda else None,
            min_meter_s=min_window_s(spec.device),
        )
    clocks_before = clocks.get("before") or {"sm_clock_mhz": None, "temperature_c": None}
    clocks_after = gpu_clocks() if cuda else None
    record.measure_s = time.perf_counter() - start
    load_into(record, watch.stop())
    record.samples_ms = result.samples_ms
    record.warmup = result.warmup + (1 if c.phase == "prefill" else 0)
    record.n_samples = len(result.samples_ms)
    if result.timed_out and record.n_samples < spec.timing.min_samples:
        _timed_out(record, spec.timing)
        return
    record.time_ms_median = result.median_ms
    record.time_ms_p95 = result.p95_ms
    record.spread = result.spread

    n = counts_mod.counts(c.model, c.phase, spec.size, c.batch, c.seq_len, c.d_state, c.dtype)
    median_s = result.median_ms / 1e3
    record.tokens = n.tokens
    record.flop = n.flop
    record.bytes = n.bytes
    record.intensity = n.intensity
    record.tflops = n.flop / median_s / 1e12
    record.bw_gbps = n.bytes / median_s / 1e9
    # the ceilings of the GPU it ran on (CUDA is up: torch names it), never another's
    device_info = ceilings_for(gpu_record(spec.device), list(device_records))
    if device_info:
        from ssmbench.measure.ceilings import utilization

        # a working set (the bytes the cell must move at least) that fits in the last-level
        # cache may be served from it: bandwidth utilization above 1 is then no error
        record.llc_bytes = device_info.get("llc_bytes")
        if record.llc_bytes:
            record.cache_resident = n.bytes <= record.llc_bytes

        # the ceiling of the precision the operator computes in, not of the cell's dtype
        ceilings = device_info.get("ceilings") or {}
        record.ceiling_tflops = (ceilings.get("tflops") or {}).get(record.compute_dtype)
        record.ceiling_bw_gbps = ceilings.get("bw_gbps")
        achieved = utilization(record.tflops, record.bw_gbps, device_info, record.compute_dtype)
        for key, value in achieved.items():
            setattr(record, key, value)

    energy = meter.result
    if energy is not None:
        record.energy_method, record.energy_reason = energy.method, energy.reason
        record.energy_window_s = energy.duration_s
        too_short = window_reason(energy.duration_s, spec.device)
        if too_short and energy.energy_j is not None:
            record.energy_reason = too_short
        elif energy.energy_j is not None and result.meter_calls:
            # the window holds the timed calls and any untimed ones that padded it
            record.energy_j = energy.energy_j / result.meter_calls  # one call
            record.energy_j_per_token = record.energy_j / n.tokens
    if cuda:
        record.sm_clock_before_mhz = clocks_before["sm_clock_mhz"]
        record.sm_clock_after_mhz = clocks_after["sm_clock_mhz"]
        record.temperature_before_c = clocks_before["temperature_c"]
        record.temperature_after_c = clocks_after["temperature_c"]
        if clocks_before["sm_clock_mhz"] is not None:
            record.clock_drop = clock_drop(clocks_before, clocks_after)

    # Memory, measured on one more call outside the timed loop (see ssmbench.measure.memory)
    #   prefill: peak = weights + the call's peak, of which the returned cache is `cache`
    #   decode:  peak = weights + the cache read + the step's peak (activations)
    #   train:   peak = weights + the step's peak (activations, gradients included)
    record.weights_bytes = float(sum(p.numel() * p.element_size() for p in model.parameters()))
    record.cache_bytes_analytic = n.cache_bytes
    for p in model.parameters():
        p.grad = None
    with torch.inference_mode(not work.train):
        peak = measure_peak(fn, spec.device, warmup=0)
    record.memory_method = peak["method"]
    cache = float(tensor_bytes(work.cache)) if work.cache is not None else 0.0
    record.cache_bytes = cache
    #   graph decode: a replay allocates nothing; the step's activations live in the graph's
    #   private pool, measured at capture (models.graphs.GraphReplay.pool_bytes), counted here
    if c.phase == "prefill":
        record.peak_bytes = record.weights_bytes + peak["peak_bytes"]
        record.activations_bytes = max(peak["peak_bytes"] - cache, 0.0)
    else:
        pool = work.graph_pool_bytes or 0.0
        record.graph_pool_bytes = work.graph_pool_bytes
        record.activations_bytes = float(peak["peak_bytes"]) + pool
        record.peak_bytes = record.weights_bytes + cache + record.activations_bytes

    # Operators, counted on one more call outside the timed loop (ssmbench.measure.opcount)
    count_ops_into(record, work, spec.device)


def count_ops_into(record: CellRecord, work: Work, device: str) -> None:
    """Count the operators of one more call of ``work`` (after timing: counting slows the
    call) into the record's ``n_ops``, ``n_ops_kind`` and ``n_ops_method``; a count that
    fails is None with the reason as its method, and the cell stays measured."""
    import torch

    from ssmbench.measure.opcount import count_ops
    from ssmbench.models import GRAPH_BACKENDS

    with torch.inference_mode(not work.train):
        count = count_ops(
            work.fn,
            device,
            graph=record.backend in GRAPH_BACKENDS,
            compiled=record.backend == "compile",
        )
    record.n_ops, record.n_ops_kind, record.n_ops_method = count.n_ops, count.kind, count.method
