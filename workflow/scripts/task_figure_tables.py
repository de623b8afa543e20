"""Rule task_figure_tables: tables/task_accuracy.csv (the headline accuracy per seed, the
case study's value from config/claims.yaml, chance) and tables/quality_vs_speed.csv (the
same beside each family's prefill and decode time from the run's cells.csv)."""

import _src  # noqa: F401  (puts ../src on sys.path)
import pandas as pd

from ssmbench import claims
from ssmbench.provenance import check_all, from_snakemake, now
from ssmbench.scripting import logged
from ssmbench.tasks.matrix import load_tasks
from ssmbench.tasks.table import accuracy_table, quality_vs_speed_table

with logged(snakemake):
    started = now()
    i, out = snakemake.input, snakemake.output
    check_all([i.tasks, i.cells])
    tasks = pd.read_csv(i.tasks, keep_default_na=False, na_values=[""])
    chance = {name: t["chance"] for name, t in load_tasks().items()}
    accuracy = accuracy_table(tasks, claims.load(i.claims), chance)
    accuracy.to_csv(out.accuracy, index=False)
    cells = pd.read_csv(i.cells)
    quality_vs_speed_table(accuracy, cells).to_csv(out.speed, index=False)
    from_snakemake(snakemake, outputs=[out.accuracy, out.speed], started=started)
