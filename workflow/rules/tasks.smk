# The quality axis (preset key `tasks`, ssmbench.tasks): one training job per (task,
# family, seed), its table, and the two task figures' tables.  The run's block cells are
# the families' speed (rule aggregate's cells.csv); its claims read tasks.csv.


wildcard_constraints:
    task=r"[a-z_]+",
    family=r"[a-z0-9][a-z0-9-]*",
    seed=r"\d+",


# Input functions and params of the rules below, from the plan (common.smk).

# A training job is one thread (the preset's tasks.threads): two jobs share 2 cores, and
# one seed's numbers do not depend on how many run beside it.
TASK_THREADS = PLAN.tasks.threads if PLAN.tasks else 1
TASK_RESOURCES = dict(mem_mb=min(PLAN.mem_mb, 4000), runtime=60, gpu=1 if CUDA else 0)


def planned_task_cell(wildcards):
    cell = TaskCell(wildcards.task, wildcards.family, int(wildcards.seed))
    if not PLAN.tasks or cell not in PLAN.task_cell_set:
        raise ValueError(f"{cell.name} is not a task job of preset {PLAN.preset!r}")
    return cell


def task_job_params(wildcards):
    """What workflow/scripts/task_train.py needs: the cell, its task's resolved settings and cut,
    the IMDb folder and the device."""
    cell = planned_task_cell(wildcards)
    return {
        **vars(cell),
        "spec": PLAN.tasks.spec(cell.task),
        "cut": PLAN.tasks.cut(cell.task),
        "imdb_dir": PLAN.tasks.imdb_dir,
        "device": PLAN.device,
    }


def run_task_records(wildcards):
    run = live_run(wildcards.run)
    cells = PLAN.tasks.cells if PLAN.tasks else ()
    return finished([paths.task_record(run, c) for c in cells])


def run_task_sidecars(wildcards):
    return [paths.prov(p) for p in run_task_records(wildcards)]


def planned_task_cells(wildcards):
    """Every task job of the plan, for ``partial=True`` (as planned_cells)."""
    return [vars(c) for c in PLAN.tasks.cells] if PLAN.partial and PLAN.tasks else []


def planned_task_specs(wildcards):
    """Each task's settings, for the not_run rows of ``partial=True``."""
    return dict(PLAN.tasks.specs) if PLAN.partial and PLAN.tasks else {}


def run_tasks_table(wildcards):
    """The run's tasks.csv, which its claims read; none for a run without tasks."""
    return (
        [paths.table(live_run(wildcards.run), paths.TASKS_TABLE)] if PLAN.tasks else []
    )


localrules:
    task_table,
    task_figure_tables,


rule task_train:
    output:
        record=paths.TASK,
        prov=paths.prov(paths.TASK),
    log:
        paths.TASK_LOG,
    priority: PRIORITY["bench"][1]
    conda:
        "../../envs/bench.yaml"
    threads: TASK_THREADS
    resources:
        **TASK_RESOURCES,
    params:
        run=RUN,
        job=task_job_params,
        cpu_mem_limit_gb=PLAN.cpu_mem_limit_gb,
    script:
        "../scripts/task_train.py"


rule task_table:
    input:
        records=run_task_records,
        sidecars=run_task_sidecars,
    output:
        table=paths.table("{run}", paths.TASKS_TABLE),
        prov=paths.prov(paths.table("{run}", paths.TASKS_TABLE)),
    log:
        paths.TASK_TABLE_LOG,
    priority: 60
    conda:
        "../../envs/analysis.yaml"
    params:
        # partial=True: the planned jobs that left no finished record become not_run rows
        planned=planned_task_cells,
        specs=planned_task_specs,
        stopped=PLAN.partial,
    script:
        "../scripts/task_table.py"


rule task_figure_tables:
    input:
        tasks=paths.table("{run}", paths.TASKS_TABLE),
        cells=paths.table("{run}", "cells.csv"),
        claims="config/claims.yaml",
    output:
        accuracy=paths.table("{run}", "task_accuracy.csv"),
        speed=paths.table("{run}", "quality_vs_speed.csv"),
        prov=[
            paths.prov(paths.table("{run}", name)) for name in paths.TASK_FIGURE_TABLES
        ],
    log:
        paths.TASK_FIGURE_TABLES_LOG,
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/task_figure_tables.py"
