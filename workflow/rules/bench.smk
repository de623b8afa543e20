rule bench:
    input:
        verify=verify_input,
    output:
        record=paths.CELL,
        prov=paths.prov(paths.CELL),
    params:
        run=RUN,
        cell=cell_params,
        device=PLAN.device,
        size=vars(PLAN.size),
        timing=vars(PLAN.timing),
        seed=PLAN.seed,
    threads: BENCH_THREADS
    resources:
        **BENCH_RESOURCES,
    log:
        "logs/{run}/bench/{model}/{backend}/{phase}/b{batch}-t{seq_len}-n{d_state}-{dtype}.log",
    conda:
        "../../envs/bench.yaml"
    script:
        "../../scripts/bench.py"
