localrules:
    import_ssm_scope,


rule import_ssm_scope:
    input:
        clone=PLAN.import_ssm_scope or [],
    output:
        tables=[
            paths.imported_table(run, name)
            for run in IMPORTED_RUNS
            for name in ("cells.csv", "ops.csv")
        ],
    log:
        "logs/imported/ssm_scope.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../../scripts/import_ssm_scope.py"
