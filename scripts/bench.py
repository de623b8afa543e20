"""Rule bench: measure one cell and write its record, whatever its status."""

import json
import sys

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.cell import cap_address_space, run_cell, spec_from_params
from ssmbench.provenance import from_snakemake, now
from ssmbench.records import write_record
from ssmbench.scripting import logged

with logged(snakemake):
    started = now()
    p = snakemake.params
    spec = spec_from_params(p)
    with open(snakemake.input.verify) as f:
        verify = json.load(f)
    with open(snakemake.input.device) as f:
        device_info = json.load(f)
    if p.cpu_mem_limit_gb and p.device == "cpu":
        cap_address_space(p.cpu_mem_limit_gb)  # over it, the cell is oom
        print(f"address space capped at {p.cpu_mem_limit_gb} GiB (RLIMIT_AS)")
    if verify["status"] != "passed":
        message = (
            f"{spec.cell.model}/{spec.cell.backend} is not timed: verification "
            f"{verify['status']}: {verify['reason']}"
        )
        print(message)
        print(f"warning: {message}", file=sys.__stderr__)
    record = run_cell(spec, verify=verify, threads=snakemake.threads, device_info=device_info)
    print(
        f"{snakemake.output.record}: {record.status} {record.reason} "
        f"median={record.time_ms_median} ms n={record.n_samples}"
    )
    write_record(snakemake.output.record, record)
    from_snakemake(snakemake, seed=p.seed, started=started)
