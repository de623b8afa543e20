"""Rule lm_verify: the correctness gate of one whole model (ssmbench.lm.verify), once
for all of its cells of one backend and dtype.

An hf-kernels gate also compares its forward logits with a fresh hf-eager process's
(ssmbench.lm.verify.against_eager).  A backend that cannot run here writes a record
saying why (its cells are unavailable too); a gate that raises is a failed gate, with the
error as its reason: the job exits 0 either way, and the cells that read a gate that did
not pass are not timed."""

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.lm import backends

backends.prepare(snakemake.params.gate["backend"])  # before anything imports transformers

from ssmbench.gpulease import gpu_record  # noqa: E402
from ssmbench.lm.cell import GATE  # noqa: E402
from ssmbench.outcome import refuse_if_stopped, saving  # noqa: E402
from ssmbench.process import cap_address_space, error_status  # noqa: E402
from ssmbench.provenance import from_snakemake, now  # noqa: E402
from ssmbench.records import write_json_atomic  # noqa: E402
from ssmbench.scripting import logged  # noqa: E402

with logged(snakemake):
    started = now()
    p, out = snakemake.params, snakemake.output.record
    gate = p.gate
    refuse_if_stopped(p.run, out)
    if p.cpu_mem_limit_gb and gate["device"] == "cpu":
        cap_address_space(p.cpu_mem_limit_gb)
    keys = {k: gate[k] for k in ("model", "backend", "device", "dtype", "preset", "seed")}
    available, why = backends.availability(gate["model"], gate["backend"], gate["device"])
    if not available:
        result = {**keys, "status": "unavailable", "reason": why, "passed": False, "checks": []}
    else:
        from ssmbench.lm.verify import verify_lm

        try:
            result = verify_lm(
                gate["model"], gate["preset"], gate["device"], gate["dtype"], gate["seed"], **GATE
            )
            if gate["backend"] == "hf-kernels":  # its kernels against the PyTorch paths
                from ssmbench.lm.verify import against_eager

                keys_of = {k: gate[k] for k in ("model", "preset", "device", "dtype", "seed")}
                row = against_eager(**keys_of)
                result["checks"].append(row)
                result["passed"] = result["passed"] and row["ok"]
            result["status"] = "passed" if result["passed"] else "failed"
            result["reason"] = ", ".join(c["name"] for c in result["checks"] if not c["ok"])
        except Exception as error:  # a gate that cannot run has not passed
            status, reason = error_status(error)
            result = {**keys, "status": "failed", "reason": f"{status}: {reason}"}
            result.update(passed=False, checks=[])
        result.update(source="rule lm_verify", gate=GATE)
    result["gpu"] = gpu_record(gate["device"])  # the GPU it ran on; None on a CPU
    print(
        f"{gate['model']}/{gate['backend']}/{gate['dtype']}: {result['status']} {result['reason']}"
    )
    for check in result["checks"]:
        print(f"  {check['name']}: {'ok' if check['ok'] else 'FAILED'}")
    with saving(p.run, out):
        write_json_atomic(out, result)
        from_snakemake(snakemake, seed=gate["seed"], started=started)
