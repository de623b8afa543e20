rule verify:
    output:
        record=paths.VERIFY,
        prov=paths.prov(paths.VERIFY),
    log:
        paths.VERIFY_LOG,
    priority: verify_priority
    conda:
        "../../envs/bench.yaml"
    threads: BENCH_THREADS
    resources:
        **BENCH_RESOURCES,
    params:
        device=PLAN.device,
        dtypes=run_dtypes,
        seed=PLAN.seed,
    script:
        "../scripts/verify.py"
