"""Measure one whole-model cell: TTFT or TPOT, memory split, energy, in its own process.

A cell is ``(model, backend, phase, batch, T, new_tokens, dtype)`` on a device, with the
model's size preset (full / reduced / ci, config/models.yaml) and a timing budget
(:class:`ssmbench.config.Timing`, the block cells' budget).  :func:`run_lm_cell` returns an
:class:`~ssmbench.lm.record.LMRecord` whatever happens: unavailable backends, a failed gate,
OOM, a timeout or a crash become ``status`` and ``reason`` (the helpers of
:mod:`ssmbench.cell`), never an exception.  In order:

1. availability (:func:`ssmbench.lm.backends.availability`; ``hf-static``: attention
   classes on CUDA, or on a CPU with ``SSMBENCH_LM_STATIC_ON_CPU=1``, :mod:`ssmbench.lm.static`);
2. the correctness gate: ``verify`` (a verify step's :func:`ssmbench.lm.verify.verify_lm`
   result) when given, else :func:`verify_lm` here, at the cell's own preset, device and
   dtype but a short prompt (batch 2, T 11, 6 new tokens; still a second build of the
   model, about a minute per full-size model on a loaded 2-core CPU, so a workflow runs it
   once per model in a verify step and passes the result in); a gate that did not pass
   means ``failed``, and nothing is timed (``gate=False`` skips it and says so); an
   ``hf-static`` cell also needs its static greedy tokens (and step logits) to equal the
   eager loop's on the gate's prompt (:func:`ssmbench.lm.static.static_tokens_check`,
   ``verify["static"]``);
3. the model, built with seeded random weights in the cell's dtype; prompts are random
   token ids from the seed;
4. prefill: TTFT, a forward over T tokens into a fresh cache with ``logits_to_keep=1``
   (what ``generate`` asks for: the first token's logits only, never T x vocab,
   :func:`ssmbench.lm.generate.prefill_forward`), timed by
   :func:`ssmbench.measure.timing.measure` (warm-up, budget, CUDA events);
   decode: one untimed prefill, then rounds of the N - 1 steps of greedy decoding that
   ``generate(N)`` runs after it (:class:`ssmbench.lm.generate.Greedy`), each round from
   its own copy of that prefill's cache and each step timed (the TPOT samples, at contexts
   T .. T+N-2; :class:`ssmbench.measure.timing.SamplingLoop`), until the budget is met; and
   the end-to-end check ``(generate(N) - generate(1)) / (N - 1)`` in ``e2e_rounds`` paired
   rounds (:func:`ssmbench.measure.timing.measure_pair`; a preset's ``lm.e2e_rounds``, 0 to
   skip it, where two prefills per round cost more than they tell), which must fall within
   :data:`E2E_TOLERANCE` (or the two spreads, if larger) of the loop's median: a miss is a
   note and ``e2e_agrees`` false, never a failure (timing noise is data), and rounds that
   disagree by more than their value make it ``None``, inconclusive (:func:`e2e_verdict`);
5. memory, from ONE run's allocator peak (:func:`ssmbench.measure.memory.measure_peak`):
   the run is a prefill (prefill cells) or the whole request, prefill and N - 1 steps
   (decode cells); peak = weights + the run's peak above its start; weights = bytes of the
   parameters and buffers; cache = the cache object's tensors after the prefill
   (:func:`ssmbench.lm.cache.cache_sizes`, checked by kind against
   :func:`~ssmbench.lm.cache.cache_formula`); activations = peak - weights - cache (for a
   decode cell that includes the prefill's transient buffers and the cache's growth
   during the steps: transformers' DynamicCache concatenates a new KV tensor per step);
   the layer report (which implementation each layer ran) is traced in this run;
6. energy with :class:`ssmbench.measure.energy.EnergyMeter` over a window of at least
   ``energy_window_s`` (1 s): the prefill cell's timed loop, padded with untimed calls; a
   decode cell's own loop of steps from one prefill.  Where the meter has no source the
   record carries its reason and no window is run.

transformers binds its kernels when a modeling module is first imported, so an
``hf-eager`` cell needs :func:`ssmbench.lm.backends.prepare` called before that: the
command line (``python -m ssmbench lm-cell``) does it first thing, as must any other caller
of :func:`run_lm_cell` (which records whether it was done, ``isolation``); an hf-eager cell
whose layers ran a kernel package all the same is ``failed``.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from ssmbench.gpulease import gpu_record
from ssmbench.lm import backends
from ssmbench.lm.build import DTYPES, build
from ssmbench.lm.record import LMRecord
from ssmbench.lm.zoo import PRESETS, entry
from ssmbench.matrix import Timing
from ssmbench.process import device_name, device_unavailable, error_status
from ssmbench.provenance import git_state, now

PHASES = ("prefill", "decode")
# the end-to-end TPOT may differ from the loop's by this fraction (or by the larger of
# the two spreads): generate adds its logits processors and stopping checks per token
E2E_TOLERANCE = 0.25
E2E_ROUNDS = 3  # paired rounds of generate(N) and generate(1) (LMCellSpec.e2e_rounds)
ENERGY_WINDOW_S = 1.0  # the "loops >= 1 s", on every device
# the gate's prompt when the cell runs it: short, whatever the cell's T
GATE = {"prompt_len": 11, "n_new": 6, "batch": 2}


@dataclass(frozen=True)
class LMCellSpec:
    """One whole-model cell and the settings it is measured under."""

    model: str  # a config/models.yaml entry
    backend: str  # hf-eager, hf-kernels, hf-static
    phase: str  # prefill or decode
    batch: int
    seq_len: int  # T, the prompt
    new_tokens: int  # N: generate(N); prefill cells: 1
    dtype: str  # fp32, fp16, bf16
    device: str  # cpu or cuda
    preset: str  # full, reduced or ci
    timing: Timing
    seed: int = 0
    run: str = "adhoc"
    energy_window_s: float = ENERGY_WINDOW_S
    # paired rounds of the end-to-end check (0: not checked, and the record says so)
    e2e_rounds: int = E2E_ROUNDS

    def __post_init__(self):
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {list(PHASES)}, got {self.phase!r}")
        if self.backend not in backends.BACKENDS:
            raise ValueError(f"backend must be one of {list(backends.BACKENDS)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {list(DTYPES)}, got {self.dtype!r}")
        if self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {list(PRESETS)}, got {self.preset!r}")
        if self.e2e_rounds < 0:
            raise ValueError(f"e2e_rounds must be 0 or more, got {self.e2e_rounds}")
        if min(self.batch, self.seq_len) < 1:
            raise ValueError(f"batch and seq_len must be positive: {self.batch}, {self.seq_len}")
        if self.phase == "prefill" and self.new_tokens != 1:
            raise ValueError(
                f"a prefill cell makes the first token only: new_tokens=1, got {self.new_tokens}"
            )
        if self.phase == "decode" and self.new_tokens < 2:
            raise ValueError(
                f"a decode cell needs new_tokens >= 2 (generate(N) - generate(1) "
                f"over N - 1 steps), got {self.new_tokens}"
            )

    @classmethod
    def from_dict(cls, data: dict) -> LMCellSpec:
        timing = data["timing"]
        return cls(**{**data, "timing": timing if isinstance(timing, Timing) else Timing(**timing)})


def run_lm_cell(
    spec: LMCellSpec, verify: dict | None = None, threads: int | None = None, gate: bool = True
) -> LMRecord:
    """Measure one cell and return its record (module docstring); ``verify`` is the
    gate's result from a verify step (None: the cell runs the gate itself), ``threads``
    torch's CPU threads (default: all cores).  ``gate=False`` times without any gate (the
    record says so in ``notes``; ``python -m ssmbench lm-cell --no-verify``, as the block
    cells' ``cell --no-verify``).  ``spec.timing.timeout_s`` bounds the cell."""
    record = LMRecord(
        run=spec.run,
        model=spec.model,
        backend=spec.backend,
        phase=spec.phase,
        batch=spec.batch,
        seq_len=spec.seq_len,
        new_tokens=spec.new_tokens,
        dtype=spec.dtype,
        device=spec.device,
        preset=spec.preset,
        seed=spec.seed,
        started=now(),
        git_commit=git_state()["commit"],
    )
    from ssmbench.measure.timing import CellTimeout, deadline_alarm

    timeout_s = spec.timing.timeout_s
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        record.family = entry(spec.model).family
        with deadline_alarm(deadline):
            _measure_into(record, spec, verify, threads, deadline, gate)
    except CellTimeout:
        record.status = "timeout"
        record.reason = (
            f"the cell's budget of timeout_s={timeout_s:g} s ran out after "
            f"{record.n_samples} of min_samples={spec.timing.min_samples} samples"
        )
    except Exception as e:
        record.status, record.reason = error_status(e)
    record.gpu = gpu_record(spec.device)  # the GPU it ran on, whatever its status
    record.ended = now()
    return record


def run_lm_cells(specs: list[dict], threads: int | None = None) -> list[dict]:
    """The records (as dicts) of several cells measured one after another in this process;
    each spec is :class:`LMCellSpec`'s fields, plus an optional ``verify`` (a gate result).
    For tests and a quick look at small cells, through
    :func:`ssmbench.lm.backends.run_in_fresh_process`; the workflow runs one cell per job."""
    records = []
    for raw in specs:
        raw = dict(raw)
        verify = raw.pop("verify", None)
        spec = LMCellSpec.from_dict(raw)
        records.append(run_lm_cell(spec, verify=verify, threads=threads).to_dict())
    return records


def _measure_into(record: LMRecord, spec: LMCellSpec, verify, threads, deadline, gate) -> None:
    unavailable = _unavailable(spec)
    if unavailable:
        record.status, record.reason = "unavailable", unavailable
        return
    record.isolation = _isolation(spec.backend)

    from ssmbench.lm.verify import verify_lm

    if verify is None and gate:
        verify = verify_lm(spec.model, spec.preset, spec.device, spec.dtype, spec.seed, **GATE)
        verify = {**verify, "source": "run by the cell"}
    if verify is None:
        record.notes.append("timed without the correctness gate (gate=False, --no-verify)")
    else:
        record.verify = gate_summary(verify)
        refused = gate_refusal(spec, verify)
        if refused:
            record.status, record.reason = "failed", refused
            return
        if spec.backend == "hf-eager" and _ran_kernels(verify.get("layers", [])):
            record.status, record.reason = "failed", _not_eager(verify["layers"])
            return

    import torch

    from ssmbench.measure.allocator import set_host_allocator

    record.host_allocator = set_host_allocator(spec.timing.host_allocator)
    if threads:
        torch.set_num_threads(threads)
    record.threads = torch.get_num_threads()
    record.load_avg_1m = os.getloadavg()[0]
    record.device_name = device_name(spec.device)

    lm = build(spec.model, spec.preset, device=spec.device, dtype=spec.dtype, seed=spec.seed)
    record.n_params = sum(p.numel() for p in lm.parameters())
    vocab = lm.config.vocab_size
    generator = torch.Generator().manual_seed(spec.seed)
    ids = torch.randint(1, vocab, (spec.batch, spec.seq_len), generator=generator)
    ids = ids.to(spec.device)
    decoder = None
    if spec.backend == "hf-static":
        decoder = _static_decoder(record, spec, lm)
        if record.status != "ok":
            return

    meter, energy_reason = _meter(spec.device)
    start = time.perf_counter()
    with torch.inference_mode():
        if spec.phase == "prefill":
            _time_prefill(record, spec, lm, ids, meter, deadline, decoder)
        else:
            _time_decode(record, spec, lm, ids, deadline, decoder)
            if record.status == "ok" and decoder is None:
                _check_end_to_end(record, spec, lm, ids, deadline)
            elif record.status == "ok":
                record.notes.append(
                    "end-to-end check not run for hf-static: generate would build and "
                    "compile its own static cache, not the one timed"
                )
        record.measure_s = time.perf_counter() - start
        if record.status != "ok":
            return
        _memory_split(record, spec, lm, ids, decoder)
        if meter is None:
            record.energy_method, record.energy_reason = "none", energy_reason
        elif spec.phase == "decode":
            _decode_energy(record, spec, lm, ids, deadline, decoder)
    if spec.backend == "hf-eager" and _ran_kernels(record.layers):
        record.status, record.reason = "failed", _not_eager(record.layers)


def _static_decoder(record: LMRecord, spec: LMCellSpec, lm):
    """The cell's :class:`~ssmbench.lm.static.StaticDecoder` (cache of T + N tokens), after
    its gate: static greedy tokens and logits == the eager loop's on the gate's prompt, in
    their own decoder (a StaticCache is sized at construction); a miss fails the cell."""
    from ssmbench.lm.static import StaticDecoder, static_tokens_check

    check = static_tokens_check(lm, spec.device, spec.seed, **GATE)
    record.verify = {**(record.verify or {}), "static": check}
    if not check["ok"]:
        record.status = "failed"
        record.reason = (
            f"hf-static gate failed for {spec.model}: tokens equal {check['tokens_ok']}, "
            f"logits relative RMS error {check['logits']['rel_rms_err']:.3g} (bound "
            f"{check['logits']['tolerance']['bound']:.3g}) against the eager loop: not timed"
        )
        return None
    decoder = StaticDecoder(lm, spec.seq_len + spec.new_tokens, spec.device)
    record.notes.append(f"static_mode: {decoder.mode}")
    record.notes.append(
        f"cache: a StaticCache preallocated for max_cache_len = T + N = "
        f"{decoder.max_cache_len} tokens; cache_bytes and the formula are at that length"
    )
    return decoder


def _ran_kernels(layers: list[dict]) -> bool:
    return any(layer["kernels"] for layer in layers)


def _not_eager(layers: list[dict]) -> str:
    return (
        f"hf-eager ran kernel packages ({backends.layer_summary(layers)}): call "
        "ssmbench.lm.backends.prepare before transformers is imported in the cell process"
    )


def _unavailable(spec: LMCellSpec) -> str:
    """Why the cell cannot run here, or ""."""
    available, why = backends.availability(spec.model, spec.backend, spec.device)
    if not available:
        return why
    return device_unavailable(spec.device)


def _isolation(backend: str) -> str:
    """What holds in this process: the kernel packages blocked (by
    :func:`ssmbench.lm.backends.prepare`, which the caller runs before transformers is
    imported) or not.  Never blocks them itself: that would change every later import of
    the calling process (a test session's, say), not only this cell's."""
    blocked = backends.blocked()
    if blocked:
        return f"kernel packages blocked: {', '.join(blocked)}"
    if backend == "hf-eager":
        return "not blocked: prepare was not called first (the layer report says what ran)"
    return "kernel packages importable"


def gate_summary(verify: dict) -> dict:
    """What a record keeps of the gate's result: its verdict, where it ran, the tolerance
    its logits check ran under (rule, bound and basis), the checks that failed (whole),
    the names of those that passed."""
    keys = ("model", "preset", "backend", "device", "dtype", "seed", "passed", "source")
    keys += ("logits_tolerance",)
    checks = verify.get("checks", [])
    return {
        **{k: verify[k] for k in keys if k in verify},
        "failed": [c for c in checks if not c.get("ok")],
        "checked": [c["name"] for c in checks if c.get("ok")],
    }


def gate_refusal(spec: LMCellSpec, verify: dict) -> str:
    """Why the gate's result does not let ``spec`` be timed ("" when it does): it did not
    pass, or it is another model's, dtype's or device's."""
    for key, want in (("model", spec.model), ("dtype", spec.dtype), ("device", spec.device)):
        if str(verify.get(key, want)) != want:
            return (
                f"the gate's result is for {key}={verify.get(key)!r}, not for this cell's "
                f"{want!r}: not timed"
            )
    if verify.get("passed"):
        return ""
    failed = [c.get("name", "?") for c in verify.get("checks", []) if not c.get("ok")]
    return (
        f"correctness gate failed for {spec.model} ({spec.preset}, {spec.dtype}, "
        f"{spec.device}): {', '.join(failed) or 'no passing verdict'}: not timed"
    )


def _time_prefill(
    record: LMRecord, spec: LMCellSpec, lm, ids, meter, deadline, decoder=None
) -> None:
    from ssmbench.lm.generate import prefill_forward
    from ssmbench.measure.timing import measure

    window_s = max(spec.energy_window_s, 0.0) if meter is not None else 0.0
    result = measure(
        (lambda: decoder.prefill(ids)) if decoder else (lambda: prefill_forward(lm, ids)),
        spec.timing,
        spec.device,
        deadline=deadline,
        meter=meter,
        min_meter_s=window_s,
    )
    _keep_samples(record, spec, result.samples_ms, result.warmup, result.timed_out)
    if record.status != "ok":
        return
    record.ttft_ms_median = statistics.median(record.samples_ms)
    record.ttft_ms_p95 = _p95(record.samples_ms)
    record.tokens_per_s = spec.batch * spec.seq_len / (record.ttft_ms_median / 1e3)
    if meter is not None and meter.result is not None:
        _keep_energy(record, spec, meter.result, result.meter_calls, spec.batch * spec.seq_len)


def _greedy(lm, ids, decoder=None):
    """A greedy decode from a prefill of ``ids``: hf-static's decoder, refilled, or a
    :class:`~ssmbench.lm.generate.Greedy` through a new DynamicCache; either has
    ``step()``, ``cache``, ``token``."""
    from ssmbench.lm.generate import Greedy

    if decoder is None:
        return Greedy(lm, ids)
    decoder.prefill(ids)
    return decoder


def _time_decode(record: LMRecord, spec: LMCellSpec, lm, ids, deadline, decoder=None) -> None:
    """Rounds of N - 1 timed steps until the budget is met, each from the cache of one
    untimed prefill: a fresh copy of it per round (:meth:`~ssmbench.lm.generate.Greedy.fork`),
    or for hf-static a refill of its static cache (a CUDA graph replays on the same
    addresses).  Each step is a sample (CUDA events on a GPU, the monotonic clock on a
    CPU); the warm-up, whole rounds too, checks no deadline (the cell's alarm ends it)."""
    from ssmbench.measure.timing import SamplingLoop

    steps = spec.new_tokens - 1
    prefilled = None if decoder else _greedy(lm, ids)

    def round_of_steps():
        greedy = prefilled.fork() if prefilled else _greedy(lm, ids, decoder)
        return [greedy.step] * steps

    loop = SamplingLoop(spec.timing, spec.device)
    loop.warm_up(round_of_steps)
    timed_out = loop.sample(round_of_steps, deadline)
    samples = loop.samples_ms
    _keep_samples(record, spec, samples, loop.warm, timed_out)
    if record.status != "ok":
        return
    record.tpot_ms_median = statistics.median(samples)
    record.tpot_ms_p95 = _p95(samples)
    record.tokens_per_s = spec.batch / (record.tpot_ms_median / 1e3)


def _keep_samples(record, spec, samples_ms, warmup, timed_out) -> None:
    from ssmbench.measure.timing import relative_spread

    record.samples_ms = list(samples_ms)
    record.n_samples = len(samples_ms)
    record.warmup = warmup
    record.spread = relative_spread(record.samples_ms)
    if not samples_ms or (timed_out and record.n_samples < spec.timing.min_samples):
        record.status = "timeout"
        record.reason = (
            f"the cell's budget of timeout_s={spec.timing.timeout_s} s ran out after "
            f"{record.n_samples} of min_samples={spec.timing.min_samples} samples"
        )


def _p95(samples: list[float]) -> float:
    from ssmbench.measure.timing import percentile

    return percentile(samples, 95)


def _generate(lm, ids, n: int):
    from ssmbench.lm.generate import generate_greedy

    return lambda: generate_greedy(lm, ids, n)


def _check_end_to_end(record: LMRecord, spec: LMCellSpec, lm, ids, deadline) -> None:
    """(generate(N) - generate(1)) / (N - 1) per paired round, against the loop's TPOT."""
    from ssmbench.measure.timing import measure_pair

    n = spec.new_tokens
    if spec.e2e_rounds == 0:
        record.notes.append(
            "end-to-end TPOT not checked: e2e_rounds=0 (each round is two generate calls, "
            "two prefills of T tokens)"
        )
        return
    rounds = Timing(
        # on a GPU a warm-up pair first (generate's first call sets up what the loop's
        # steps did not: its logits processors, cuBLAS handles of new shapes); a CPU has
        # nothing the loop above has not run already
        warmup=1 if spec.device == "cuda" else 0,
        min_samples=spec.e2e_rounds,
        max_samples=spec.e2e_rounds,
        min_time_s=0.0,
        max_time_s=float("inf"),
    )
    long, short = measure_pair(
        (_generate(lm, ids, n), _generate(lm, ids, 1)), rounds, spec.device, deadline=deadline
    )
    per_token = [(a - b) / (n - 1) for a, b in zip(long.samples_ms, short.samples_ms, strict=True)]
    record.e2e_samples_ms = per_token
    verdict = e2e_verdict(per_token, record.tpot_ms_median, record.spread)
    record.e2e_tpot_ms, record.e2e_rel_diff, record.e2e_tolerance, record.e2e_agrees = verdict[:4]
    if verdict[4]:
        record.notes.append(verdict[4])


def e2e_verdict(per_token_ms: list[float], loop_ms: float, loop_spread: float | None):
    """(e2e TPOT ms, relative difference from the loop's, tolerance, agrees, note) of the
    rounds' ``(generate(N) - generate(1)) / (N - 1)`` against the loop's median ``loop_ms``.

    Agrees within :data:`E2E_TOLERANCE` or the larger of the two spreads.  Inconclusive
    (agrees None) when the rounds disagree by more than their value (IQR over median above
    1) or one is not positive: the difference of two generate times is then their noise,
    as when the prefill takes far longer than N - 1 steps (Mamba-1's eager scan on a CPU)."""
    from ssmbench.measure.timing import relative_spread

    if not per_token_ms:
        return None, None, None, None, "end-to-end check: no paired round before the deadline"
    e2e_ms = statistics.median(per_token_ms)
    rel_diff = (e2e_ms - loop_ms) / loop_ms
    spread = relative_spread(per_token_ms)
    tolerance = max([E2E_TOLERANCE, *(s for s in (spread, loop_spread) if s is not None)])
    if min(per_token_ms) <= 0 or (spread is not None and spread > 1):
        return (
            e2e_ms,
            rel_diff,
            tolerance,
            None,
            (
                f"end-to-end check inconclusive: per-token rounds {_ms(per_token_ms)} spread over "
                "their value (generate(1)'s noise dominates the difference)"
            ),
        )
    if abs(rel_diff) <= tolerance:
        return e2e_ms, rel_diff, tolerance, True, ""
    return (
        e2e_ms,
        rel_diff,
        tolerance,
        False,
        (
            f"end-to-end TPOT {e2e_ms:.3f} ms differs from the loop's {loop_ms:.3f} ms by "
            f"{rel_diff:+.0%} (tolerance {tolerance:.0%}): flagged, not failed"
        ),
    )


def _ms(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.3g}" for v in values) + "] ms"


def _memory_split(record: LMRecord, spec: LMCellSpec, lm, ids, decoder=None) -> None:
    """Weights, cache and activations from one run's allocator peak (module docstring)."""
    from ssmbench.lm.cache import CACHE_KINDS, cache_formula, cache_sizes
    from ssmbench.measure.memory import measure_peak, tensor_bytes

    record.weights_bytes = float(tensor_bytes([*lm.parameters(), *lm.buffers()]))
    after_prefill: dict = {}

    def one_run():
        greedy = _greedy(lm, ids, decoder)
        after_prefill.update(cache_sizes(greedy.cache))  # sizes only: allocates nothing
        for _ in range(spec.new_tokens - 1):
            greedy.step()
        return greedy.token

    with backends.trace_kernels(lm) as calls:
        peak = measure_peak(one_run, spec.device, warmup=0)
    record.layers = backends.layer_report(lm, calls)
    record.layer_impls = backends.layer_summary(record.layers)
    record.memory_method = peak["method"]
    record.cache_kv_bytes = float(after_prefill["kv"]["bytes"])
    record.cache_conv_bytes = float(after_prefill["conv"]["bytes"])
    record.cache_ssm_bytes = float(after_prefill["ssm"]["bytes"])
    record.cache_bytes = sum(float(after_prefill[k]["bytes"]) for k in CACHE_KINDS)
    # a static cache holds max_cache_len (T + N) tokens from the start
    cached = decoder.max_cache_len if decoder else spec.seq_len
    formula = cache_formula(lm.config, cached, spec.batch)
    element_bytes = next(lm.parameters()).element_size()
    record.cache_formula_bytes = float(sum(formula.values()) * element_bytes)
    record.cache_formula_ok = all(after_prefill[k]["elements"] == formula[k] for k in CACHE_KINDS)
    if not record.cache_formula_ok:
        measured = {k: after_prefill[k]["elements"] for k in CACHE_KINDS}
        record.notes.append(f"cache elements {measured} differ from the formula's {formula}")
    record.peak_bytes = record.weights_bytes + float(peak["peak_bytes"])
    record.activations_bytes = record.peak_bytes - record.weights_bytes - record.cache_bytes


def _meter(device: str):
    """(an EnergyMeter, "") where the device has an energy source, else (None, why)."""
    from ssmbench.measure.energy import EnergyMeter

    probe = EnergyMeter(device).start().stop()
    if probe.energy_j is None:
        return None, probe.reason or f"no energy source on {device}"
    return EnergyMeter(device), ""


def _keep_energy(record, spec, result, calls: int, tokens_per_call: int) -> None:
    record.energy_method, record.energy_reason = result.method, result.reason
    record.energy_window_s, record.energy_calls = result.duration_s, calls
    if result.energy_j is None or not calls:
        return
    if result.duration_s < spec.energy_window_s:
        record.energy_reason = (
            f"energy window of {result.duration_s:.3f} s is shorter than "
            f"{spec.energy_window_s:g} s: not recorded"
        )
        return
    record.energy_j = result.energy_j / calls
    record.energy_j_per_token = record.energy_j / tokens_per_call


def _decode_energy(record: LMRecord, spec: LMCellSpec, lm, ids, deadline, decoder=None) -> None:
    """Steps from one prefill inside the meter's window until it is energy_window_s long
    and holds at least N - 1 steps (a decode past N tokens: contexts up to T + steps; for
    hf-static at most the cache's T + N, a shorter window is then not recorded)."""
    from ssmbench.measure.energy import EnergyMeter
    from ssmbench.measure.timing import past, synchronize

    greedy = _greedy(lm, ids, decoder)
    synchronize(spec.device)
    meter = EnergyMeter(spec.device).start()
    begin, steps = time.perf_counter(), 0
    while steps < spec.new_tokens - 1 or time.perf_counter() - begin < spec.energy_window_s:
        if past(deadline) or (decoder is not None and decoder.full()):
            break  # a static cache ends the window at its T + N tokens
        greedy.step()
        steps += 1
    synchronize(spec.device)
    _keep_energy(record, spec, meter.stop(), steps, spec.batch)


def profile_lm_cell(
    spec: LMCellSpec, trace_path: str | None = None, iters: int = 3, threads: int | None = None
) -> list[dict]:
    """The operator breakdown of one cell, a separate profiled run (never inside a timed
    cell): :func:`ssmbench.measure.profile.profile_ops` over ``iters`` calls after one
    warm-up, device time only on a GPU (CPU self time on a CPU), in the project's buckets.
    A prefill call is :func:`~ssmbench.lm.generate.prefill_forward`; a decode call one
    greedy step (the cache grows by a token per call; hf-static's static cache has room for
    T + the warm-up and calls).
    Raises what the cell would (a cell that cannot run has none)."""
    import torch

    from ssmbench.lm.generate import prefill_forward
    from ssmbench.measure.profile import profile_ops

    why = _unavailable(spec)
    if why:
        raise RuntimeError(f"{spec.model}/{spec.backend}: unavailable: {why}")
    if threads:
        torch.set_num_threads(threads)
    lm = build(spec.model, spec.preset, device=spec.device, dtype=spec.dtype, seed=spec.seed)
    generator = torch.Generator().manual_seed(spec.seed)
    ids = torch.randint(1, lm.config.vocab_size, (spec.batch, spec.seq_len), generator=generator)
    ids = ids.to(spec.device)
    with torch.inference_mode():
        if spec.phase == "prefill":
            fn: Callable = lambda: prefill_forward(lm, ids)  # noqa: E731
        else:
            decoder = None
            if spec.backend == "hf-static":
                from ssmbench.lm.static import StaticDecoder

                decoder = StaticDecoder(lm, spec.seq_len + iters + 2, spec.device)
            fn = _greedy(lm, ids, decoder).step
        rows = profile_ops(fn, spec.device, warmup=1, iters=iters, trace_path=trace_path)
    settings = ("timing", "energy_window_s", "e2e_rounds")  # how it is measured, not what
    keys = {k: v for k, v in asdict(spec).items() if k not in settings}
    return [{**keys, "device_name": device_name(spec.device), **row} for row in rows]
