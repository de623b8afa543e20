"""Rule bench: measure one cell and write its record, whatever its status.

A run stopped by an output it could not save (a full disk) measures nothing more: the job
refuses to start, and a record it cannot save stops the run (ssmbench.outcome)."""

import sys

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.cell import run_cell, spec_from_params
from ssmbench.outcome import refuse_if_stopped, saving
from ssmbench.process import cap_address_space
from ssmbench.provenance import from_snakemake, now
from ssmbench.records import read_device, read_verify, write_record
from ssmbench.scripting import logged

with logged(snakemake):
    started = now()
    p = snakemake.params
    refuse_if_stopped(p.run, snakemake.output.record)
    spec = spec_from_params(p)
    verify = read_verify(snakemake.input.verify)
    # the run's calibrations; the cell divides by its own device's (ssmbench.cell)
    device_records = [read_device(path) for path in snakemake.input.device]
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
    record = run_cell(spec, verify=verify, threads=snakemake.threads, device_records=device_records)
    record.replicate, record.replicates = p.replicate, p.replicates  # which process of a cell
    print(
        f"{snakemake.output.record}: {record.status} {record.reason} "
        f"median={record.time_ms_median} ms n={record.n_samples}"
    )
    with saving(p.run, snakemake.output.record):
        write_record(snakemake.output.record, record)
        from_snakemake(snakemake, seed=p.seed, started=started)
