"""Rule bench: measure one cell and write its record, whatever its status."""

import json
import sys

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.cell import CellSpec, run_cell
from ssmbench.config import Cell, Size, Timing
from ssmbench.provenance import from_snakemake, now
from ssmbench.records import write_record
from ssmbench.scripting import logged

with logged(snakemake):
    started = now()
    p = snakemake.params
    spec = CellSpec(
        run=p.run,
        cell=Cell(**p.cell),
        device=p.device,
        size=Size(**p.size),
        timing=Timing(**p.timing),
        seed=p.seed,
    )
    with open(snakemake.input.verify) as f:
        verify = json.load(f)
    if verify["status"] != "passed":
        message = (
            f"{spec.cell.model}/{spec.cell.backend} is not timed: verification "
            f"{verify['status']}: {verify['reason']}"
        )
        print(message)
        print(f"warning: {message}", file=sys.__stderr__)
    record = run_cell(spec, verify=verify, threads=snakemake.threads)
    print(
        f"{snakemake.output.record}: {record.status} {record.reason} "
        f"median={record.time_ms_median} ms n={record.n_samples}"
    )
    write_record(snakemake.output.record, record)
    from_snakemake(snakemake, seed=p.seed, started=started)
