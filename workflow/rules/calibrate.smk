# The measured ceilings: one record for the run (device.json) on a CPU, and where the plan
# cannot name the GPUs the jobs run on (SLURM chose them).
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


# On a node whose GPUs the jobs lease: one record per GPU (Plan.calibrated_gpus), each job
# leasing that GPU (lease_gpu: its Gpu.key), so a node of two kinds of GPU has each one's
# ceilings and every cell is divided by its own device's (ssmbench.records.ceilings_for).
rule calibrate_gpu:
    output:
        device=paths.DEVICE_GPU,
        prov=paths.prov(paths.DEVICE_GPU),
    log:
        paths.CALIBRATE_GPU_LOG,
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
        lease_gpu="{gpu}",
    script:
        "../scripts/calibrate.py"
