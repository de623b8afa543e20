"""One verify job: (model, backend) against the float64 reference in each of the run's
dtypes, as the verify record the cells read before they are timed.

:func:`run_verify` is what the workflow's verify rule (``scripts/verify.py``) and
``python -m ssmbench verify`` call.  It runs :func:`ssmbench.verify.verify_backend` once
per dtype and sums the checks up per phase (prefill, decode, train), so a backend whose
kernels run only some phases (Mamba-1's Triton decode step without its CUDA prefill
kernel) is timed in those.  Whatever happens, the result is a record: a backend that
crashes is ``failed``, one that cannot run here ``unavailable`` (:mod:`ssmbench.process`),
with the reason; nothing is raised out of it.  The cells read the record through
:func:`ssmbench.records.read_verify` and :func:`ssmbench.records.phase_verdict`.
"""

from __future__ import annotations

from ssmbench.gpulease import gpu_record
from ssmbench.process import device_unavailable, is_unavailable
from ssmbench.provenance import now
from ssmbench.registry import GRAPH_BACKENDS, PHASES
from ssmbench.verify import verify_backend


def run_verify(model: str, backend: str, device: str, dtypes: list[str], seed: int = 0) -> dict:
    """Check (model, backend) against the float64 reference on ``device`` in each dtype.

    Returns the verify record: ``phases`` maps each phase (prefill, decode, train) to its
    ``{"status", "reason"}``, status ``passed``, ``failed`` or ``unavailable``: a phase is
    failed when one of its checks (:func:`ssmbench.verify.check_phases`) failed in some
    dtype, unavailable when its kernels could not run in some dtype, passed otherwise.
    The top-level ``status`` sums them up: ``passed`` when every phase passed, ``failed``
    when one failed, else ``unavailable``; ``reason`` says which phases and why.
    ``checks`` lists every comparison with its errors, tolerances and phases.

    A graph backend (``torch-graph``, ``fused-graph``) replays its base backend's decode
    step: the base is verified, the record is the base's (``backend`` is the base, ``note``
    says so), and each graph cell checks its replay equal to the eager step before timing.
    """
    base = GRAPH_BACKENDS.get(backend, backend)
    record = {
        "model": model,
        "backend": base,
        "device": device,
        "dtypes": list(dtypes),
        "seed": seed,
        "started": now(),
        "status": "passed",
        "reason": "",
        "checks": [],
    }
    if base != backend:
        record["note"] = (
            f"{backend} replays {base}'s decode step: this is the verification of {base}; "
            f"each {backend} cell checks its replay equal to the eager step before timing"
        )
    unavailable: dict[str, list[str]] = {phase: [] for phase in PHASES}
    crashed: dict[str, list[str]] = {phase: [] for phase in PHASES}
    reason = device_unavailable(device)
    if reason:
        for phase in PHASES:
            unavailable[phase].append(reason)
    else:
        for dtype in dtypes:
            try:
                result = verify_backend(model, base, device=device, dtype=dtype, seed=seed)
            except Exception as e:  # a crash in a backend is a failed verification
                for phase in PHASES:
                    if is_unavailable(e):
                        unavailable[phase].append(f"{dtype}: {e}")
                    else:
                        crashed[phase].append(f"{dtype}: {type(e).__name__}: {e}")
                continue
            record["checks"] += result["checks"]
            for phase, why in result.get("unavailable", {}).items():
                unavailable[phase].append(f"{dtype}: {why}")
    record["phases"] = {}
    for phase in PHASES:
        failed = [c for c in record["checks"] if not c["ok"] and phase in c.get("phases", PHASES)]
        if failed or crashed[phase]:
            status = "failed"
            why = "; ".join(crashed[phase] + [_describe(c) for c in failed])
        elif unavailable[phase]:
            status, why = "unavailable", "; ".join(dict.fromkeys(unavailable[phase]))
        else:
            status, why = "passed", ""
        record["phases"][phase] = {"status": status, "reason": why}
    record["status"], record["reason"] = _summary(record["phases"])
    record["passed"] = record["status"] == "passed"
    record["gpu"] = gpu_record(device)  # the GPU it ran on (ssmbench.gpulease); None on a CPU
    record["ended"] = now()
    return record


def _describe(check: dict) -> str:
    return (
        f"{check['name']} [{check['dtype']}] max_abs_err={check['max_abs_err']:.3e} "
        f"rel_rms_err={check['rel_rms_err']:.3e} > tolerance atol={check['atol']:.0e} "
        f"rtol={check['rtol']:.0e}"
    )


def _summary(phases: dict) -> tuple[str, str]:
    """The top-level (status, reason) of per-phase verify results."""
    statuses = {v["status"] for v in phases.values()}
    if statuses == {"passed"}:
        return "passed", ""
    status = "failed" if "failed" in statuses else "unavailable"
    reasons: dict[str, list[str]] = {}
    for phase, v in phases.items():
        if v["status"] != "passed":
            reasons.setdefault(f"{v['status']}: {v['reason']}", []).append(phase)
    if len(reasons) == 1 and len(next(iter(reasons.values()))) == len(phases):
        return status, next(iter(reasons)).split(": ", 1)[1]
    return status, "; ".join(f"{', '.join(ps)} {why}" for why, ps in reasons.items())
