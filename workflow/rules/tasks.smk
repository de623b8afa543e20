# The quality axis (preset key `tasks`, ssmbench.tasks): one training job per (task,
# family, seed), its table, and the two task figures' tables.  The run's block cells are
# the families' speed (rule aggregate's cells.csv); its claims read tasks.csv.


wildcard_constraints:
    task=r"[a-z_]+",
    family=r"[a-z0-9][a-z0-9-]*",
    seed=r"\d+",


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
        "logs/{run}/task_table.log",
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
        "logs/{run}/task_figure_tables.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/task_figure_tables.py"
