"""Rule figure_table: the cells one figure needs, as a cells table of their own."""

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.provenance import from_snakemake, now
from ssmbench.scripting import logged
from ssmbench.tables import aggregate, write_tables

with logged(snakemake):
    started = now()
    tables = aggregate(snakemake.input.cells, [], snakemake.wildcards.run)
    write_tables(tables, {"cells.csv": snakemake.output.table})
    from_snakemake(snakemake, outputs=[snakemake.output.table], started=started)
