rule calibrate:
    output:
        device=paths.DEVICE,
        prov=paths.prov(paths.DEVICE),
    log:
        paths.CALIBRATE_LOG,
    priority: PRIORITY["calibrate"]
    conda:
        "../../envs/bench.yaml"
    threads: BENCH_THREADS
    resources:
        **BENCH_RESOURCES,
    params:
        device=PLAN.device,
        dtypes=sorted({c.dtype for c in PLAN.cells}),
        quick=PLAN.calibrate_quick,
    script:
        "../scripts/calibrate.py"
