localrules:
    aggregate,
    verdict,


# The verdict paragraph is the claims table's caption in the report; a caption path is
# fixed when the rule is read, so it names this config's run.
VERDICT = paths.table(RUN, "verdict.rst")


rule aggregate:
    input:
        cells=run_cells,
        paired=run_paired,
        verify=run_verify_records,
        ops=run_ops,
        device=device_input_finished,
        claims="config/claims.yaml",
        tasks=run_tasks_table,
        sidecars=run_sidecars,
    output:
        cells_csv=paths.table("{run}", "cells.csv"),
        cells_parquet=paths.table("{run}", "cells.parquet"),
        samples_parquet=paths.table("{run}", "samples.parquet"),
        paired_csv=paths.table("{run}", "paired.csv"),
        pairs_csv=paths.table("{run}", "pairs.csv"),
        verify_csv=paths.table("{run}", "verify.csv"),
        ops_csv=paths.table("{run}", "ops.csv"),
        workload_csv=paths.table("{run}", "workload.csv"),
        workload_parquet=paths.table("{run}", "workload.parquet"),
        claims_csv=report(
            paths.table("{run}", "claims.csv"),
            caption=f"../../{VERDICT}",
            category="claims",
        ),
        prov=with_prov([paths.table("{run}", name) for name in paths.TABLES])[1::2],
    log:
        paths.AGGREGATE_LOG,
    priority: 60  # a run finished at its budget has its tables before its figures
    conda:
        "../../envs/analysis.yaml"
    params:
        # partial=True: the planned cells that left no finished record become rows too
        planned=planned_cells,
        planned_paired=planned_paired,
        stopped=PLAN.partial,
        size=SIZE,
        device=PLAN.device,
    script:
        "../scripts/aggregate.py"


rule verdict:
    input:
        cells=paths.table("{run}", "cells.csv"),
        samples=paths.table("{run}", "samples.parquet"),
        pairs=paths.table("{run}", "pairs.csv"),
        claims=paths.table("{run}", "claims.csv"),
    output:
        rst=paths.table("{run}", "verdict.rst"),
        go_no_go=report(
            paths.table("{run}", "go_no_go.csv"),
            caption="../report/go_no_go_table.rst",
            category="go/no-go",
        ),
        speedups=paths.table("{run}", "speedups.csv"),
        prov=[
            paths.prov(paths.table("{run}", name))
            for name in ("verdict.rst", "go_no_go.csv", "speedups.csv")
        ],
    log:
        paths.VERDICT_LOG,
    priority: 55
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/verdict.py"
