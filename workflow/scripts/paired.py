"""Rule paired: time attention and an SSM in alternating calls of one process (one paired
cell, ssmbench.paired) and write its record, whatever its status; a run stopped by an
output it could not save measures nothing more (ssmbench.outcome)."""

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.cell import spec_from_params
from ssmbench.outcome import refuse_if_stopped, saving
from ssmbench.paired import run_paired, write_paired
from ssmbench.process import cap_address_space
from ssmbench.provenance import from_snakemake, now
from ssmbench.records import read_verify
from ssmbench.scripting import logged

with logged(snakemake):
    started = now()
    p = snakemake.params
    refuse_if_stopped(p.run, snakemake.output.record)
    spec = spec_from_params(p)
    verify = {}
    for path in (snakemake.input.attention, snakemake.input.ssm):
        record = read_verify(path)
        verify[record["model"]] = record
    if p.cpu_mem_limit_gb and p.device == "cpu":
        cap_address_space(p.cpu_mem_limit_gb)  # over it, the pair is oom
    record = run_paired(
        spec,
        verify=verify,
        threads=snakemake.threads,
        replicate=p.replicate,
        replicates=p.replicates,
    )
    print(
        f"{snakemake.output.record}: {record.status} {record.reason} "
        f"replicate {record.replicate + 1} of {record.replicates} rounds={record.n_rounds} "
        f"attention={record.attention_ms} ms {record.model}={record.ssm_ms} ms "
        f"ratio={record.latency_ratio}" + (f" LOADED: {record.loaded}" if record.loaded else "")
    )
    with saving(p.run, snakemake.output.record):
        write_paired(snakemake.output.record, record)
        from_snakemake(snakemake, seed=p.seed, started=started)
