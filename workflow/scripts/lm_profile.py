"""Rule lm_profile: torch.profiler over one whole-model cell (a separate run, never the
timed one) -> its operator rows in ops.csv's columns and a Chrome trace.

A cell that cannot be profiled (unavailable, its gate not passed, the profile raised or
ran out of memory) still writes both outputs, a status row and an empty trace, and the job
exits 0, as rule profile does for blocks."""

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.lm import backends

backends.prepare(snakemake.params.spec["backend"])  # before anything imports transformers

import gzip  # noqa: E402
import os  # noqa: E402

from ssmbench.lm.cell import LMCellSpec, gate_refusal, profile_lm_cell  # noqa: E402
from ssmbench.lm.table import lm_ops_table  # noqa: E402
from ssmbench.outcome import refuse_if_stopped, saving  # noqa: E402
from ssmbench.process import cap_address_space, error_status  # noqa: E402
from ssmbench.provenance import from_snakemake, now  # noqa: E402
from ssmbench.records import read_json  # noqa: E402
from ssmbench.scripting import logged  # noqa: E402

with logged(snakemake):
    started = now()
    p, out = snakemake.params, snakemake.output
    refuse_if_stopped(p.run, out.trace)
    spec = LMCellSpec.from_dict(p.spec)
    if p.cpu_mem_limit_gb and spec.device == "cpu":
        cap_address_space(p.cpu_mem_limit_gb)
    keys = {k: v for k, v in p.spec.items() if k not in ("timing",)}
    verify = read_json(snakemake.input.verify)
    refused = verify.get("reason") if verify.get("status") == "unavailable" else ""
    refused = refused or gate_refusal(spec, verify)
    rows = []
    if refused:
        status = "unavailable" if verify.get("status") == "unavailable" else "failed"
        rows = [{**keys, "status": status, "reason": refused}]
    else:
        try:
            with saving(p.run, out.trace):  # the trace is written while profiling
                rows = profile_lm_cell(spec, trace_path=out.trace, threads=snakemake.threads)
        except Exception as error:
            status, reason = error_status(error)
            rows = [{**keys, "status": status, "reason": reason}]
    if not os.path.exists(out.trace):  # no profile: an empty trace, as rule profile
        with gzip.open(out.trace, "wt") as f:
            f.write('{"traceEvents": []}')
    table = lm_ops_table(rows)
    print(table.to_string(max_rows=40))
    with saving(p.run, out.ops):
        tmp = f"{out.ops}.tmp"
        table.to_csv(tmp, index=False)
        os.replace(tmp, out.ops)
        from_snakemake(snakemake, seed=spec.seed, started=started)
