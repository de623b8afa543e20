"""Rule bench: measure one cell and write its record, whatever its status.

In a resubmitted group of cells (profiles/slurm), a record the failed allocation finished
and vouched for is put back instead (ssmbench.heal.restore_kept): measured once, not twice.

A run stopped by an output it could not save (a full disk) measures nothing more: the job
refuses to start, and a record it cannot save stops the run (ssmbench.outcome)."""

import sys

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.cell import run_cell, spec_from_params
from ssmbench.heal import restore_kept
from ssmbench.outcome import refuse_if_stopped, saving
from ssmbench.process import cap_address_space
from ssmbench.provenance import from_snakemake, now
from ssmbench.records import read_device, read_verify, write_record
from ssmbench.scripting import logged


def measure(p, started):
    """Measure the cell and write its record and sidecar."""
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


with logged(snakemake):
    started = now()
    p = snakemake.params
    refuse_if_stopped(p.run, snakemake.output.record)
    if restore_kept(snakemake.output.record):
        print(f"{snakemake.output.record}: kept from the group's failed allocation")
    else:
        measure(p, started)
