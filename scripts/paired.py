"""Rule paired: time attention and an SSM in alternating calls of one process (one paired
cell, ssmbench.paired) and write its record, whatever its status."""

import json

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.cell import cap_address_space, spec_from_params
from ssmbench.paired import run_paired, write_paired
from ssmbench.provenance import from_snakemake, now
from ssmbench.scripting import logged

with logged(snakemake):
    started = now()
    p = snakemake.params
    spec = spec_from_params(p)
    verify = {}
    for path in (snakemake.input.attention, snakemake.input.ssm):
        with open(path) as f:
            record = json.load(f)
        verify[record["model"]] = record
    if p.cpu_mem_limit_gb and p.device == "cpu":
        cap_address_space(p.cpu_mem_limit_gb)  # over it, the pair is oom
    record = run_paired(spec, verify=verify, threads=snakemake.threads)
    print(
        f"{snakemake.output.record}: {record.status} {record.reason} rounds={record.n_rounds} "
        f"attention={record.attention_ms} ms {record.model}={record.ssm_ms} ms "
        f"ratio={record.latency_ratio}"
    )
    write_paired(snakemake.output.record, record)
    from_snakemake(snakemake, seed=p.seed, started=started)
