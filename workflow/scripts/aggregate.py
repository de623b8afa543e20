"""Rule aggregate: a run's records -> cells.csv/.parquet, samples.parquet, paired.csv,
verify.csv, ops.csv, claims.csv, workload.csv/.parquet; a cell measured below one of its
floors (ssmbench.floors) is named in the log.

With ``partial=True`` (finishing a stopped run, ssmbench.finish) the planned cells that
left no finished record are rows too: not_run, or failed when their job started.

Every record read must match its sidecar first (ssmbench.provenance.check_all): one
changed since its job wrote it, or without a sidecar, stops the job, named with the sha256
its sidecar records and the one found."""

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.aggregate import aggregate
from ssmbench.finish import unfinished_paired, unfinished_records
from ssmbench.floors import flagged_lines
from ssmbench.matrix import Cell
from ssmbench.provenance import check_all, from_snakemake, now
from ssmbench.scripting import logged
from ssmbench.tables import write_tables

with logged(snakemake):
    started = now()
    run, p = snakemake.wildcards.run, snakemake.params
    i = snakemake.input
    check_all([*i.cells, *i.paired, *i.verify, *i.ops, *i.device, *i.tasks])  # or ProvenanceError
    planned = [(Cell(**c["cell"]), c["replicate"]) for c in p.planned]
    extra = unfinished_records(run, planned, snakemake.input.cells, p.size, p.device, p.stopped)
    planned_paired = [(Cell(**c["cell"]), c["replicate"]) for c in p.planned_paired]
    paired_extra = unfinished_paired(
        run, planned_paired, snakemake.input.paired, p.size, p.device, p.stopped
    )
    tables = aggregate(
        snakemake.input.cells,
        snakemake.input.verify,
        run,
        snakemake.input.ops,
        extra,
        paired_paths=snakemake.input.paired,
        paired_extra=paired_extra,
        tasks_path=i.tasks[0] if i.tasks else None,
        device_path=i.device[0] if i.device else None,
    )
    outputs = {name: path for name, path in snakemake.output.items() if name != "prov"}
    write_tables(tables, {path.rsplit("/", 1)[1]: path for path in outputs.values()})
    cells = tables["cells"]
    print(cells.groupby(["model", "backend", "status"]).size().to_string())
    for line in flagged_lines(cells):  # never plotted in silence: the figure marks them too
        print(f"ssm-bench: below a floor: {line}")
    from_snakemake(snakemake, outputs=list(outputs.values()), started=started)
