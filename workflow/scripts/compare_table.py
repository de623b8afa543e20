"""Rule compare_table: the compared runs' tables (each checked against its sidecar) joined
into one comparison table (ssmbench.compare), which the cross-device figures draw."""

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.compare import compare_table, read_run
from ssmbench.provenance import check_all, from_snakemake, now
from ssmbench.scripting import logged

with logged(snakemake):
    started = now()
    check_all(snakemake.input.tables)  # what their aggregate, verdict or import wrote
    runs = [read_run(name, folder) for name, folder in snakemake.params.runs.items()]
    table = compare_table(runs)
    table.to_csv(snakemake.output.table, index=False)
    print(f"{len(runs)} runs, {int(table.meets.sum())} of {len(table)} rows meet another run")
    from_snakemake(snakemake, outputs=[snakemake.output.table], started=started)
