"""Rule profile: torch.profiler over one cell's phase -> its ops.csv rows and Chrome trace.

A cell that cannot be profiled (backend unavailable, verification not passed, the profile
raised) still writes both outputs, a status row and an empty trace, and the job exits 0.
"""

import json

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.cell import profile_or_status, spec_from_params
from ssmbench.provenance import from_snakemake, now
from ssmbench.scripting import logged
from ssmbench.tables import write_ops

with logged(snakemake):
    started = now()
    p = snakemake.params
    spec = spec_from_params(p)
    with open(snakemake.input.verify) as f:
        verify = json.load(f)
    rows = profile_or_status(
        spec, verify=verify, trace_path=snakemake.output.trace, threads=snakemake.threads
    )
    for row in rows:
        if row["status"] == "ok":
            print(f"  {row['bucket']:14s} {row['time_ms']:9.3f} ms {row['share']:6.1%}")
        else:
            print(f"  {row['status']}: {row['reason']}")
    write_ops(rows, snakemake.output.ops)
    from_snakemake(snakemake, seed=p.seed, started=started)
