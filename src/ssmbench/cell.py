"""Measure one cell, or verify one (model, backend): the functions the workflow's rules and
``python -m ssmbench`` both call, so a cell behaves the same inside and outside the workflow.

Whatever happens, the result is a record: errors become ``status`` and ``reason``
(DESIGN.md, "Status is data"), they are never raised out of :func:`run_cell`.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import asdict, dataclass

from ssmbench import counts as counts_mod
from ssmbench.config import Cell, Size, Timing
from ssmbench.provenance import cpu_model, git_state, now
from ssmbench.records import CellRecord


@dataclass(frozen=True)
class CellSpec:
    """A cell with the run-level settings it is measured under."""

    run: str
    cell: Cell
    device: str
    size: Size
    timing: Timing
    seed: int = 0


def device_unavailable(device: str) -> str:
    """Why ``device`` cannot be used here, or ``""`` when it can."""
    if device == "cpu":
        return ""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        return "device cuda requested but torch.cuda.is_available() is False on this machine"
    return ""


def device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    return cpu_model() or platform.machine()


def is_oom(error: BaseException) -> bool:
    """CUDA out-of-memory, or the CPU allocator refusing an allocation."""
    if isinstance(error, MemoryError):
        return True
    import torch

    if isinstance(error, torch.cuda.OutOfMemoryError):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and (
        "can't allocate memory" in text or "out of memory" in text.lower()
    )


def _unavailable(error: BaseException) -> bool:
    """A backend that cannot run here (e.g. torch.compile without a working compiler)."""
    from ssmbench.models.common import BackendUnavailable

    return isinstance(error, BackendUnavailable)


def run_verify(model: str, backend: str, device: str, dtypes: list[str], seed: int = 0) -> dict:
    """Check (model, backend) against the float64 reference on ``device`` in each dtype.

    Returns the verify record: ``status`` is ``passed``, ``failed`` or ``unavailable``;
    ``checks`` lists every comparison with its errors and tolerances.
    """
    from ssmbench.verify import verify_backend

    record = {
        "model": model,
        "backend": backend,
        "device": device,
        "dtypes": list(dtypes),
        "seed": seed,
        "started": now(),
        "status": "passed",
        "reason": "",
        "checks": [],
    }
    reason = device_unavailable(device)
    if reason:
        record.update(status="unavailable", reason=reason)
    else:
        for dtype in dtypes:
            try:
                result = verify_backend(model, backend, device=device, dtype=dtype, seed=seed)
            except Exception as e:  # a crash in a backend is a failed verification
                if _unavailable(e):
                    record.update(status="unavailable", reason=str(e))
                else:
                    record.update(status="failed", reason=f"{dtype}: {type(e).__name__}: {e}")
                break
            record["checks"] += result["checks"]
        failed = [c for c in record["checks"] if not c["ok"]]
        if failed:
            record.update(status="failed", reason="; ".join(_describe(c) for c in failed))
    record["passed"] = record["status"] == "passed"
    record["ended"] = now()
    return record


def _describe(check: dict) -> str:
    return (
        f"{check['name']} [{check['dtype']}] max_abs_err={check['max_abs_err']:.3e} "
        f"rel_rms_err={check['rel_rms_err']:.3e} > tolerance atol={check['atol']:.0e} "
        f"rtol={check['rtol']:.0e}"
    )


def verify_summary(verify: dict) -> dict:
    """The part of a verify record a cell record keeps."""
    return {k: verify[k] for k in ("status", "reason", "device", "dtypes", "seed")}


def run_cell(spec: CellSpec, verify: dict | None = None, threads: int | None = None) -> CellRecord:
    """Measure one cell and return its record.

    ``verify`` is the (model, backend) verify record: a backend that did not pass is never
    timed.  ``threads`` fixes torch's CPU thread count (default: all cores).
    """
    c = spec.cell
    record = CellRecord(
        run=spec.run,
        model=c.model,
        backend=c.backend,
        phase=c.phase,
        batch=c.batch,
        seq_len=c.seq_len,
        d_state=c.d_state,
        dtype=c.dtype,
        device=spec.device,
        size=asdict(spec.size),
        seed=spec.seed,
        started=now(),
        git_commit=git_state()["commit"],
        verify=verify_summary(verify) if verify is not None else None,
    )
    try:
        _measure_into(record, spec, verify, threads)
    except Exception as e:
        if _unavailable(e):
            record.status, record.reason = "unavailable", str(e)
        else:
            record.status = "oom" if is_oom(e) else "failed"
            record.reason = f"{type(e).__name__}: {e}".strip()
    record.ended = now()
    return record


def _measure_into(record: CellRecord, spec: CellSpec, verify: dict | None, threads) -> None:
    c = spec.cell
    if verify is not None and verify["status"] != "passed":
        record.status = "unavailable" if verify["status"] == "unavailable" else "failed"
        record.reason = f"verification {verify['status']} for {c.model}/{c.backend}: " + (
            verify["reason"] or "no reason recorded"
        )
        return
    unavailable = device_unavailable(spec.device)
    if unavailable:
        record.status, record.reason = "unavailable", unavailable
        return

    import torch

    from ssmbench.measure.timing import measure
    from ssmbench.models import DTYPES, build_model

    threads = threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    record.threads = threads
    record.load_avg_1m = os.getloadavg()[0]  # another busy process skews CPU timings
    record.device_name = device_name(spec.device)
    dtype = DTYPES[c.dtype]
    model = build_model(
        c.model,
        spec.size,
        max(c.d_state, 1),
        c.backend,
        device=spec.device,
        dtype=dtype,
        seed=spec.seed,
    )
    generator = torch.Generator(device="cpu").manual_seed(spec.seed)
    x = torch.randn(c.batch, c.seq_len, spec.size.d_model, generator=generator)
    x = x.to(device=spec.device, dtype=dtype)

    start = time.perf_counter()
    with torch.inference_mode():
        _, cache = model(x)  # the first warm-up call, whose cache is sized below
        result = measure(lambda: model(x), spec.timing, spec.device)
    measure_s = time.perf_counter() - start

    n = counts_mod.counts(c.model, c.phase, spec.size, c.batch, c.seq_len, c.d_state, c.dtype)
    median_s = result.median_ms / 1e3
    record.samples_ms = result.samples_ms
    record.warmup = result.warmup + 1
    record.n_samples = len(result.samples_ms)
    record.time_ms_median = result.median_ms
    record.time_ms_p95 = result.p95_ms
    record.measure_s = measure_s
    record.tokens = n.tokens
    record.flop = n.flop
    record.bytes = n.bytes
    record.intensity = n.intensity
    record.tflops = n.flop / median_s / 1e12
    record.bw_gbps = n.bytes / median_s / 1e9
    # Measured, not analytic: the parameters and the cache this forward pass returned.
    record.weights_bytes = float(sum(p.numel() * p.element_size() for p in model.parameters()))
    record.cache_bytes = float(_tensor_bytes(cache))


def _tensor_bytes(obj) -> int:
    """Bytes held by the tensors in a nest of tuples, lists and dicts."""
    if hasattr(obj, "element_size"):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(o) for o in obj)
    return 0
