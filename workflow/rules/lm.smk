# Whole language models (preset key `lm`, ssmbench.lm): one gate per (model, backend,
# dtype), then one job per cell, as for the blocks; their tables are lm.csv, lm_ops.csv
# and the claims judged on them.


wildcard_constraints:
    lm_model=r"[a-z0-9][a-z0-9._-]*",
    new_tokens=r"\d+",


# both aggregates write tables/claims.csv: the run's kind decides which one does
if PLAN.kind == "lm":

    ruleorder: lm_aggregate > aggregate

else:

    ruleorder: aggregate > lm_aggregate


rule lm_verify:
    output:
        record=LM_VERIFY,
        prov=paths.prov(LM_VERIFY),
    log:
        "logs/{run}/lm-verify/{lm_model}/{backend}-{dtype}.log",
    priority: PRIORITY["verify"][0]
    conda:
        "../../envs/bench.yaml"
    threads: BENCH_THREADS
    resources:
        **BENCH_RESOURCES,
    params:
        run=RUN,
        gate=lm_gate_params,
        cpu_mem_limit_gb=PLAN.cpu_mem_limit_gb,
    script:
        "../scripts/lm_verify.py"


rule lm_bench:
    input:
        verify=lm_verify_input,
    output:
        record=LM_CELL,
        prov=paths.prov(LM_CELL),
    log:
        LM_LOG,
    priority: PRIORITY["bench"][0]
    conda:
        "../../envs/bench.yaml"
    threads: BENCH_THREADS
    resources:
        **BENCH_RESOURCES,
    params:
        run=RUN,
        spec=lm_spec_params,
        cpu_mem_limit_gb=PLAN.cpu_mem_limit_gb,
    script:
        "../scripts/lm_cell.py"


rule lm_profile:
    input:
        verify=lm_verify_input,
    output:
        ops=LM_OPS,
        trace=LM_TRACE,
        prov=[paths.prov(LM_OPS), paths.prov(LM_TRACE)],
    log:
        LM_LOG.replace(".log", ".profile.log"),
    priority: PRIORITY["profile"][1]
    conda:
        "../../envs/bench.yaml"
    threads: BENCH_THREADS
    resources:
        **BENCH_RESOURCES,
    params:
        run=RUN,
        spec=lm_profiled_params,
        cpu_mem_limit_gb=PLAN.cpu_mem_limit_gb,
    script:
        "../scripts/lm_profile.py"


rule lm_aggregate:
    input:
        cells=run_lm_cells,
        ops=run_lm_ops,
        verify=run_lm_verify,
        claims="config/claims.yaml",
        sidecars=run_lm_sidecars,
    output:
        lm_csv=paths.table("{run}", "lm.csv"),
        lm_parquet=paths.table("{run}", "lm.parquet"),
        ops_csv=paths.table("{run}", "lm_ops.csv"),
        claims_csv=paths.table("{run}", "claims.csv"),
        prov=[paths.prov(paths.table("{run}", name)) for name in paths.LM_TABLES],
    log:
        "logs/{run}/lm_aggregate.log",
    priority: 60
    conda:
        "../../envs/analysis.yaml"
    params:
        planned=planned_lm_cells,
        device=PLAN.device,
        size=PLAN.lm.size,
    script:
        "../scripts/lm_aggregate.py"
