"""Rule figure_table: the cells (or operator profiles) one figure needs, as a table of its
own (the cells with their floors, the dispatch floor from the run's device.json); a
figure of one of the run's own tables (claims, go/no-go, speed-ups, a whole-model run's
lm_ops) gets a copy, and of its lm table the cells' view of it
(ssmbench.lm.table.cells_view), which the block figures' notebooks draw."""

import shutil

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.lm.table import cells_view, read_lm_table
from ssmbench.provenance import check, from_snakemake, now
from ssmbench.records import read_device, read_record
from ssmbench.registry import RUN_TABLES
from ssmbench.scripting import logged
from ssmbench.tables import cells_table, ops_table, write_tables

with logged(snakemake):
    started = now()
    out, table = snakemake.output.table, snakemake.params.table
    if table in (*RUN_TABLES, "lm", "lm_ops"):  # one of the run's tables
        (source,) = snakemake.input.cells
        check(source)  # what its aggregate wrote (its sidecar's hash)
        if table == "lm":
            cells_view(read_lm_table(source)).to_csv(out, index=False)
        else:  # already a table: copied, the figure reads one
            shutil.copyfile(source, out)
    elif table == "ops":
        write_tables({"ops": ops_table(snakemake.input.cells)}, {"ops.csv": out})
    else:
        device = read_device(snakemake.input.device[0]) if snakemake.input.device else None
        cells = cells_table((read_record(p) for p in snakemake.input.cells), device=device)
        write_tables({"cells": cells}, {"cells.csv": out})
    from_snakemake(snakemake, outputs=[out], started=started)
