rule verify:
    output:
        record=paths.VERIFY,
        prov=paths.prov(paths.VERIFY),
    params:
        device=PLAN.device,
        dtypes=run_dtypes,
        seed=PLAN.seed,
    threads: BENCH_THREADS
    resources:
        **BENCH_RESOURCES,
    log:
        "logs/{run}/verify/{model}/{backend}.log",
    conda:
        "../../envs/bench.yaml"
    script:
        "../../scripts/verify.py"
