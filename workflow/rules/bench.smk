rule bench:
    input:
        verify=verify_input,
    output:
        record=paths.CELL,
        prov=paths.prov(paths.CELL),
    log:
        "logs/{run}/bench/{model}/{backend}/{phase}/b{batch}-t{seq_len}-n{d_state}-{dtype}.log",
    conda:
        "../../envs/bench.yaml"
    threads: BENCH_THREADS
    resources:
        **BENCH_RESOURCES,
    params:
        run=RUN,
        cell=cell_params,
        device=PLAN.device,
        size=vars(PLAN.size),
        timing=vars(PLAN.timing),
        seed=PLAN.seed,
    script:
        "../../scripts/bench.py"
