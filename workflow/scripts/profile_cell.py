"""Rule profile: torch.profiler over one cell's phase -> its ops.csv rows and Chrome trace.

Capped as a bench job is (the address space on a CPU, the cell's ``timeout_s``): a cell
that cannot be profiled (backend unavailable, verification not passed, the profile raised,
ran out of memory or time) still writes both outputs, a status row and an empty trace, and
the job exits 0.  A run stopped by an output it could not save profiles nothing more
(ssmbench.outcome)."""

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.cell import profile_or_status, spec_from_params
from ssmbench.outcome import refuse_if_stopped, saving
from ssmbench.process import cap_address_space
from ssmbench.provenance import from_snakemake, now
from ssmbench.records import read_verify
from ssmbench.scripting import logged
from ssmbench.tables import write_ops

with logged(snakemake):
    started = now()
    p = snakemake.params
    refuse_if_stopped(p.run, snakemake.output.trace)
    spec = spec_from_params(p)
    verify = read_verify(snakemake.input.verify)
    if p.cpu_mem_limit_gb and p.device == "cpu":
        cap_address_space(p.cpu_mem_limit_gb)  # over it, the profile is oom
        print(f"address space capped at {p.cpu_mem_limit_gb} GiB (RLIMIT_AS)")
    with saving(p.run, snakemake.output.trace):  # the trace is written while profiling
        rows = profile_or_status(
            spec, verify=verify, trace_path=snakemake.output.trace, threads=snakemake.threads
        )
    for row in rows:
        if row["status"] == "ok":
            print(f"  {row['bucket']:14s} {row['time_ms']:9.3f} ms {row['share']:6.1%}")
        else:
            print(f"  {row['status']}: {row['reason']}")
    with saving(p.run, snakemake.output.ops):
        write_ops(rows, snakemake.output.ops)
        from_snakemake(snakemake, seed=p.seed, started=started)
