"""Rule figure_table: the rows of the run's cells (or operator profiles) one figure
draws, as a table of its own; a figure of one of the run's own tables (claims, go/no-go,
speed-ups, a whole-model run's lm_ops) gets a copy, and of its lm table the cells' view of
it (ssmbench.lm.table.cells_view), which the block figures' notebooks draw."""

import shutil

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.config import RUN_TABLES
from ssmbench.lm.table import cells_view, read_lm_table
from ssmbench.provenance import check, from_snakemake, now
from ssmbench.scripting import logged
from ssmbench.tables import read_cells, read_ops, write_tables


def selected(df, phase=None, models=None, backends=None):
    """The rows of the figure's selection (config key ``figures``; None: all)."""
    keep = df.phase.eq(phase) if phase else df.phase.notna()
    if models:
        keep &= df.model.isin(models)
    if backends:
        keep &= df.backend.isin(backends)
    return df[keep].reset_index(drop=True)


with logged(snakemake):
    started = now()
    out, table = snakemake.output.table, snakemake.params.table
    (source,) = snakemake.input.cells
    check(source)  # the run's table is what its aggregate wrote (its sidecar's hash)
    if table in (*RUN_TABLES, "lm_ops"):  # already a table: copied, the figure reads one
        shutil.copyfile(source, out)
    elif table == "lm":
        cells_view(read_lm_table(source)).to_csv(out, index=False)
    elif table == "ops":
        ops = selected(read_ops(source), **snakemake.params.filters)
        write_tables({"ops": ops}, {"ops.csv": out})
    else:
        cells = selected(read_cells(source), **snakemake.params.filters)
        write_tables({"cells": cells}, {"cells.csv": out})
    from_snakemake(snakemake, outputs=[out], started=started)
