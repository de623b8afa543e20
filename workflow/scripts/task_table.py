"""Rule task_table: a run's task records -> tables/tasks.csv (ssmbench.tasks.table).

Every record read must match its sidecar first (ssmbench.provenance.check_all).  With
``partial=True`` the planned jobs that left no finished record are not_run rows."""

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.provenance import check_all, from_snakemake, now
from ssmbench.scripting import logged
from ssmbench.tasks.matrix import TaskCell
from ssmbench.tasks.record import read_task_record
from ssmbench.tasks.table import not_run_records, tasks_table

with logged(snakemake):
    started = now()
    run, p = snakemake.wildcards.run, snakemake.params
    check_all(list(snakemake.input.records))  # or ProvenanceError
    records = [read_task_record(path) for path in snakemake.input.records]
    if p.planned:
        done = {(r["task"], r["family"], r["seed"]) for r in records}
        why = f"the run stopped ({p.stopped}) before this job finished"
        planned = [TaskCell(**c) for c in p.planned]
        records += not_run_records(planned, done, run, p.specs, why)
    table = tasks_table(records)
    table.to_csv(snakemake.output.table, index=False)
    print(table[table.headline].groupby(["task", "family", "status"]).size().to_string())
    from_snakemake(snakemake, outputs=[snakemake.output.table], started=started)
