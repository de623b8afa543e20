rule bench:
    input:
        unpack(bench_input),
    output:
        record=paths.CELL,
        prov=paths.prov(paths.CELL),
    log:
        paths.BENCH_LOG,
    priority: bench_priority
    # short cells travel to SLURM in groups (profiles/slurm, `group-components`); a
    # local run ignores groups
    group:
        cell_group
    conda:
        "../../envs/bench.yaml"
    threads: BENCH_THREADS
    resources:
        **BENCH_RESOURCES,
    params:
        run=RUN,
        cell=cell_params,
        cache_source=cache_source,
        device=PLAN.device,
        size=SIZE,
        timing=vars(PLAN.timing),
        seed=PLAN.seed,
        cpu_mem_limit_gb=PLAN.cpu_mem_limit_gb,
        replicate=cell_replicate,
        replicates=cell_replicates,
    script:
        "../scripts/bench.py"


# The later processes of a headline cell measured in several (a headline selector's
# `replicates`): the same job, its record beside the first's
use rule bench as bench_replicate with:
    output:
        record=paths.CELL_REPLICATE,
        prov=paths.prov(paths.CELL_REPLICATE),
    log:
        paths.BENCH_LOG_REPLICATE,


rule profile:
    input:
        verify=verify_input,
    output:
        ops=paths.OPS,
        trace=paths.TRACE,
        prov=[paths.prov(paths.OPS), paths.prov(paths.TRACE)],
    log:
        paths.PROFILE_LOG,
    priority: PRIORITY["profile"][1]
    conda:
        "../../envs/bench.yaml"
    threads: BENCH_THREADS
    resources:
        **BENCH_RESOURCES,
    params:
        run=RUN,
        cell=profiled_cell_params,
        cache_source=cache_source,
        device=PLAN.device,
        size=SIZE,
        timing=vars(PLAN.timing),
        seed=PLAN.seed,
        cpu_mem_limit_gb=PLAN.cpu_mem_limit_gb,
    script:
        "../scripts/profile_cell.py"


rule prewarm:
    input:
        verify=verify_input,
    output:
        record=paths.PREWARM,
        prov=paths.prov(paths.PREWARM),
    log:
        paths.PREWARM_LOG,
    priority: prewarm_priority
    conda:
        "../../envs/bench.yaml"
    threads: BENCH_THREADS
    resources:
        **BENCH_RESOURCES,
    params:
        run=RUN,
        cells=prewarm_cells,
        device=PLAN.device,
        size=SIZE,
        timing=vars(PLAN.timing),
        seed=PLAN.seed,
        budget_s=PLAN.timing.timeout_s or 300,
    script:
        "../scripts/prewarm.py"


rule paired:
    input:
        unpack(paired_input),
    output:
        record=paths.PAIRED,
        prov=paths.prov(paths.PAIRED),
    log:
        paths.PAIRED_LOG,
    priority: paired_priority
    conda:
        "../../envs/bench.yaml"
    threads: BENCH_THREADS
    resources:
        **BENCH_RESOURCES,
    params:
        run=RUN,
        cell=paired_cell_params,
        cache_source=paired_cache_source,
        device=PLAN.device,
        size=SIZE,
        timing=lambda w: vars(PLAN.paired_timing),
        replicate=lambda w: int(w.replicate),
        replicates=lambda w: PLAN.replicates(paired_cell(w)),
        seed=PLAN.seed,
        cpu_mem_limit_gb=PLAN.cpu_mem_limit_gb,
    script:
        "../scripts/paired.py"
