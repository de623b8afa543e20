"""Rule aggregate: a run's records -> cells.csv/.parquet, samples.parquet, verify.csv."""

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.provenance import from_snakemake, now
from ssmbench.scripting import logged
from ssmbench.tables import aggregate, write_tables

with logged(snakemake):
    started = now()
    tables = aggregate(
        snakemake.input.cells, snakemake.input.verify, snakemake.wildcards.run, snakemake.input.ops
    )
    outputs = {name: path for name, path in snakemake.output.items() if name != "prov"}
    write_tables(tables, {path.rsplit("/", 1)[1]: path for path in outputs.values()})
    cells = tables["cells"]
    print(cells.groupby(["model", "backend", "status"]).size().to_string())
    from_snakemake(snakemake, outputs=list(outputs.values()), started=started)
