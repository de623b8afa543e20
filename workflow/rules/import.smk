localrules:
    import_ssm_scope,


rule import_ssm_scope:
    input:
        clone=PLAN.import_ssm_scope or [],
        claims="config/claims.yaml",
    output:
        tables=[
            paths.imported_table(run, name)
            for run in IMPORTED_RUNS
            for name in ("cells.csv", "ops.csv", "claims.csv")
        ],
    log:
        paths.IMPORT_LOG,
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/import_ssm_scope.py"
