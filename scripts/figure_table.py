"""Rule figure_table: the cells (or operator profiles) one figure needs, as a table of its
own."""

import shutil

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.provenance import from_snakemake, now
from ssmbench.scripting import logged
from ssmbench.tables import aggregate, ops_table, write_tables

with logged(snakemake):
    started = now()
    out = snakemake.output.table
    if snakemake.params.table == "claims":  # already a table: copied, so the figure reads one
        (claims_csv,) = snakemake.input.cells
        shutil.copyfile(claims_csv, out)
    elif snakemake.params.table == "ops":
        write_tables({"ops": ops_table(snakemake.input.cells)}, {"ops.csv": out})
    else:
        tables = aggregate(snakemake.input.cells, [], snakemake.wildcards.run)
        write_tables(tables, {"cells.csv": out})
    from_snakemake(snakemake, outputs=[out], started=started)
