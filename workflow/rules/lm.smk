# Whole language models (preset key `lm`, ssmbench.lm): one gate per (model, backend,
# dtype), then one job per cell, as for the blocks; their tables are lm.csv, lm_ops.csv
# and the claims judged on them.


wildcard_constraints:
    lm_model=r"[a-z0-9][a-z0-9._-]*",
    new_tokens=r"\d+",


# Input functions and params of the rules below, from the plan (common.smk).


def _lm(pattern):
    """A path of ssmbench.paths with the model as {lm_model}: zoo names have dots."""
    return pattern.replace("{model}", "{lm_model}")


LM_VERIFY = _lm(paths.LM_VERIFY)
LM_CELL = _lm(paths.LM_CELL)
LM_LOG = _lm(paths.LM_LOG)
LM_OPS = _lm(paths.LM_OPS)
LM_TRACE = _lm(paths.LM_TRACE)


def planned_lm_cell(wildcards):
    cell = LMCell(
        wildcards.lm_model,
        wildcards.backend,
        wildcards.phase,
        int(wildcards.batch),
        int(wildcards.seq_len),
        int(wildcards.new_tokens),
        wildcards.dtype,
    )
    if cell not in PLAN.lm_cell_set:
        raise ValueError(f"{cell.name} is not an lm cell of preset {PLAN.preset!r}")
    return cell


def lm_gate_params(wildcards):
    """What the gate of (model, backend, dtype) runs at: the run's device, size and seed."""
    live_run(wildcards.run)
    key = (wildcards.lm_model, wildcards.backend, wildcards.dtype)
    if key not in PLAN.lm.verified:
        raise ValueError(f"{'/'.join(key)} has no cell in preset {PLAN.preset!r}")
    return dict(
        model=key[0],
        backend=key[1],
        dtype=key[2],
        device=PLAN.device,
        preset=PLAN.lm.size,
        seed=PLAN.seed,
    )


def lm_verify_input(wildcards):
    """The gate of the cell's (model, backend, dtype); ancient(), as a block cell's."""
    run = live_run(wildcards.run)
    return ancient(
        paths.lm_verify(run, wildcards.lm_model, wildcards.backend, wildcards.dtype)
    )


def _lm_spec(cell):
    return dict(
        vars(cell),
        device=PLAN.device,
        preset=PLAN.lm.size,
        timing=vars(PLAN.timing),
        seed=PLAN.seed,
        run=RUN,
        e2e_rounds=PLAN.lm.e2e_rounds_of(cell),
    )


def lm_spec_params(wildcards):
    return _lm_spec(planned_lm_cell(wildcards))


def lm_profiled_params(wildcards):
    cell = planned_lm_cell(wildcards)
    if cell not in PLAN.lm.profiled:
        raise ValueError(f"{cell.name} is not in an lm sweep with profile: true")
    return _lm_spec(cell)


def run_lm_cells(wildcards):
    run = live_run(wildcards.run)
    return finished([paths.lm_cell_record(run, c) for c in PLAN.lm.cells])


def run_lm_ops(wildcards):
    run = live_run(wildcards.run)
    return finished([paths.lm_ops(run, c) for c in sorted(PLAN.lm.profiled)])


def run_lm_verify(wildcards):
    run = live_run(wildcards.run)
    return finished([paths.lm_verify(run, *key) for key in PLAN.lm.verified])


def run_lm_sidecars(wildcards):
    """The sidecars of the records lm_aggregate reads, and of the traces (run_sidecars)."""
    run = live_run(wildcards.run)
    traces = finished([paths.lm_trace(run, c) for c in sorted(PLAN.lm.profiled)])
    outputs = run_lm_cells(wildcards) + run_lm_ops(wildcards) + run_lm_verify(wildcards)
    return [paths.prov(p) for p in outputs + traces]


def planned_lm_cells(wildcards):
    """Every lm cell of the plan, for ``partial=True`` (as planned_cells)."""
    return [vars(c) for c in PLAN.lm.cells] if PLAN.partial else []


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
        _lm(paths.LM_VERIFY_LOG),
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
        _lm(paths.LM_PROFILE_LOG),
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
        paths.LM_AGGREGATE_LOG,
    priority: 60
    conda:
        "../../envs/analysis.yaml"
    params:
        planned=planned_lm_cells,
        device=PLAN.device,
        size=PLAN.lm.size,
    script:
        "../scripts/lm_aggregate.py"
