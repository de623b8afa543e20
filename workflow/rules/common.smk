# Validation, the resolved plan, wildcard constraints and input functions.
import functools
import math
import os
import sys
from pathlib import Path

from ssmbench import heal, outcome, paths, runlock  # noqa: E402
from ssmbench.config import (  # noqa: E402
    ConfigError,
    from_command_line,
    plan,
    read_config_file,
    shipped_figures,
)
from ssmbench.devices import visible_gpus  # noqa: E402
from ssmbench.importers.layout import RUNS as SSM_SCOPE_RUNS  # noqa: E402
from ssmbench.lm.matrix import LMCell  # noqa: E402
from ssmbench.matrix import Cell  # noqa: E402
from ssmbench.prewarm import PREWARM_BACKENDS, prewarm_groups  # noqa: E402
from ssmbench.provenance import vouched  # noqa: E402
from ssmbench.registry import (  # noqa: E402
    COMPARISON,
    RUN_TABLES,
    figures_of,
    verified_backend,
)
from ssmbench.scripting import group_of  # noqa: E402
from ssmbench.shipped import compared_runs, precollected_runs  # noqa: E402
from ssmbench.tasks.matrix import TaskCell  # noqa: E402

# Every config file read strictly (the --configfile ones too: a key twice is refused),
# the values --config nests typed as YAML types them, then the one gate: plan().
try:
    for path in workflow.configfiles:
        read_config_file(path)
    PLAN = plan(from_command_line(config, workflow.config_settings.config))
    if PLAN.source == "live":
        outcome.check_writable(["results", "logs"])
except (ConfigError, outcome.RunStopped) as error:
    sys.exit(f"ssm-bench: {error}")

# One run at a time in this checkout (ssmbench.runlock): what the lock says, before
# Snakemake's own lock speaks; a run proven stopped (killed) leaves both locks, cleared here.
if workflow.is_main_process:
    runlock.note_if_held()
# bad records (unparseable, schema-invalid, not what their sidecar vouches for) are moved
# aside before Snakemake plans, so their jobs rerun (ssmbench.heal)
heal.heal_plan(PLAN, main_process=workflow.is_main_process)
# The short cells' jobs go to SLURM in groups of `group-components: cells=<n>`
# (profiles/slurm); a resubmitted group (`retries`) keeps the records its failed
# allocation finished and vouched for: set aside here, in the retry's own invocation,
# before Snakemake deletes them, and put back by each cell's job (ssmbench.heal).
CELL_GROUP = "cells"


def cell_group(wildcards):
    """The cells' group when the run sizes it (`--group-components cells=<n>`, as
    profiles/slurm does), else none: a local run ignores groups, but its dry run would
    still show one per cell (ssmbench.scripting.group_of)."""
    return group_of(workflow, CELL_GROUP)


RETRIED_RECORDS = {"bench": paths.CELL, "bench_replicate": paths.CELL_REPLICATE}
RETRIED = heal.retried_jobs(sys.argv)
if RETRIED and PLAN.source == "live":
    os.environ[heal.RETRY_ENV] = "1"  # for the cells' scripts (heal.restore_kept)
    heal.keep_for_retry(
        RETRIED_RECORDS[rule].format(**wildcards)
        for rule, wildcards in RETRIED
        if rule in RETRIED_RECORDS
    )
RUN = PLAN.run
SIZE = vars(PLAN.size) if PLAN.size else {}  # the blocks' size (none in a preset of lm)
# Runs made from another study's published data (--config import_ssm_scope=<clone>), and
# the figures their data can draw.
IMPORTED_RUNS = list(SSM_SCOPE_RUNS) if PLAN.import_ssm_scope else []
IMPORTED_FIGURES = figures_of("imported")
LIVE = PLAN.source == "live"
# Runs side by side (ssmbench.compare): from shipped data, every shipped block run (not a
# run with tasks) beside every imported run, drawn once there are two.
COMPARED = [] if LIVE else compared_runs(PLAN.precollected_dir) + IMPORTED_RUNS
COMPARISONS = [paths.COMPARISON] if len(COMPARED) >= 2 else []
COMPARE_FIGURES = figures_of(COMPARISON)
# The report's landing page (workflow/report/workflow.rst) includes this run's verdict.
if LIVE:
    config["report_verdict"] = paths.table(RUN, "verdict.rst")
CUDA = PLAN.device == "cuda"
# A CPU measurement owns every core, so nothing runs beside it; a GPU job (calibrate,
# verify, prewarm, bench, paired, profile, whole-model and task jobs) holds one `gpu`, and
# the run has as many as there are visible GPUs (`--resources gpu=N` sets another number):
# that many GPU jobs at once, and each leases a card of its own for its life
# (ssmbench.gpulease, taken by the job's script), so no timing, clock or energy reading is
# shared with another job.
BENCH_THREADS = (workflow.cores or os.cpu_count() or 1) if not CUDA else 1
BENCH_RESOURCES = dict(
    mem_mb=PLAN.mem_mb,
    runtime=5 + math.ceil(2 * PLAN.timing.max_time_s / 60),
    gpu=1 if CUDA else 0,
)
if CUDA and "gpu" not in workflow.global_resources:
    workflow.global_resources["gpu"] = visible_gpus()

# Triton compiles and autotunes a kernel once per process unless told to keep both on
# disk: one cache for all of the run's jobs, with autotuning results kept, so a `prewarm`
# job pays them before the cells and no cell pays them inside its timings or timeout.
# (torch.compile's Inductor caches are on disk by default, in /tmp/torchinductor_<user>.)
os.environ.setdefault(
    "TRITON_CACHE_DIR", str(Path(paths.cache(RUN, "triton")).resolve())
)
os.environ.setdefault("TRITON_CACHE_AUTOTUNING", "1")

# The order a run measures in (Snakemake's `priority`): calibration, the verification and
# prewarming the headline cells need, the headline cells, then the rest; a run stopped
# at its budget has measured what its answer rests on first.
PRIORITY = {
    "calibrate": 100,
    "verify": (90, 50),  # (headline, other)
    "prewarm": (85, 45),
    "bench": (80, 10),
    # the verdict's ratios: replicate 0 of every pair after the headline cells; with
    # replicates, rounds r = 0..k-1 of (replicate r of every pair, then a seeded share of
    # the other cells), so one pair's replicates are spread over the run (paired_priority)
    "paired": 75,
    "profile": (0, 0),
}


wildcard_constraints:
    run=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    model=r"[a-z0-9]+",
    backend=r"[a-z][a-z-]*",
    phase=r"[a-z]+",
    batch=r"\d+",
    seq_len=r"\d+",
    d_state=r"\d+",
    replicate=r"\d+",
    dtype=r"fp64|fp32|fp16|bf16",
    figure=r"[a-z_]+",
    gpu=r"[A-Za-z0-9][A-Za-z0-9:.-]*",


def live_run(run):
    """The plan's run, or a clear error when a target names another run."""
    if not LIVE:
        raise ValueError(f"run {run!r}: source=precollected measures nothing")
    if run != RUN:
        raise ValueError(
            f"run {run!r} is not this config's run {RUN!r} (set run={run})"
        )
    return run


def planned_cell(wildcards):
    return _planned_cell(
        wildcards.model,
        wildcards.backend,
        wildcards.phase,
        wildcards.batch,
        wildcards.seq_len,
        wildcards.d_state,
        wildcards.dtype,
    )


@functools.cache  # several input functions and params of one job ask for its cell
def _planned_cell(model, backend, phase, batch, seq_len, d_state, dtype):
    cell = Cell(model, backend, phase, int(batch), int(seq_len), int(d_state), dtype)
    if cell not in PLAN.cell_set:  # a set: this runs once or more per job
        raise ValueError(f"{cell} is not in preset {PLAN.preset!r}")
    return cell


def cell_params(wildcards):
    return vars(planned_cell(wildcards))


def cell_replicate(wildcards):
    """Which process of a headline cell measured in several this job is (rule
    bench_replicate; 0 for rule bench)."""
    cell = planned_cell(wildcards)
    replicate = int(getattr(wildcards, "replicate", 0))
    if (cell, replicate) not in PLAN.bench_job_set:
        raise ValueError(
            f"{cell} has {PLAN.cell_replicates_of(cell)} replicates in preset "
            f"{PLAN.preset!r}, not a replicate {replicate} (they count from 0)"
        )
    return replicate


def cell_replicates(wildcards):
    return PLAN.cell_replicates_of(planned_cell(wildcards))


def cache_source(wildcards):
    return PLAN.cache_source(planned_cell(wildcards))


def profiled_cell_params(wildcards):
    cell = planned_cell(wildcards)
    if cell not in PLAN.profiled:
        raise ValueError(f"{cell} is not in a sweep with profile: true")
    return vars(cell)


def paired_cell(wildcards):
    """The SSM side of a paired cell of the plan (preset key ``paired``)."""
    cell = Cell(
        wildcards.model,
        wildcards.backend,
        wildcards.phase,
        int(wildcards.batch),
        int(wildcards.seq_len),
        int(wildcards.d_state),
        wildcards.dtype,
    )
    if cell not in PLAN.paired_set:
        raise ValueError(f"{cell} is not a paired cell of preset {PLAN.preset!r}")
    replicate = int(wildcards.replicate)
    if (cell, replicate) not in PLAN.paired_job_set:
        raise ValueError(
            f"{cell} has {PLAN.replicates(cell)} replicates in preset {PLAN.preset!r}, "
            f"not a replicate {replicate} (they count from 0)"
        )
    return cell


def paired_cell_params(wildcards):
    return vars(paired_cell(wildcards))


def paired_cache_source(wildcards):
    return PLAN.cache_source(paired_cell(wildcards))


def paired_input(wildcards):
    """Both sides' verify records (a graph backend reuses its base's)."""
    run = live_run(wildcards.run)
    cell = paired_cell(wildcards)
    backend = verified_backend(cell.backend)
    return {
        "attention": ancient(paths.verify_record(run, "attention", backend)),
        "ssm": ancient(paths.verify_record(run, cell.model, backend)),
    }


# A cell's verify, device and prewarm inputs are ancient(): one made again (healed, or
# deleted) runs before any cell that lacks its record, but does not make Snakemake
# remeasure the cells whose records are sound.


def device_input(wildcards):
    """The run's calibrations (one per GPU on a node whose GPUs the jobs lease,
    ``Plan.device_records``): a cell joins its record to the GPU it ran on."""
    live_run(wildcards.run)
    return [ancient(path) for path in PLAN.device_records()]


def verify_input(wildcards):
    """The verify record a cell or profile waits for: a graph backend reuses its base's."""
    live_run(wildcards.run)
    backend = verified_backend(wildcards.backend)
    return ancient(paths.verify_record(wildcards.run, wildcards.model, backend))


def bench_input(wildcards):
    """verify, device and, for a backend with per-process JIT costs on a GPU, the prewarm
    record of its (model, backend, dtype)."""
    inputs = {"verify": verify_input(wildcards), "device": device_input(wildcards)}
    backend = verified_backend(wildcards.backend)
    if (wildcards.model, backend, wildcards.dtype) in PREWARM:
        inputs["prewarm"] = ancient(
            paths.prewarm(wildcards.run, wildcards.model, backend, wildcards.dtype)
        )
    return inputs


# (model, backend, dtype) -> the cells a prewarm job runs once each (cuda presets only)
PREWARM = prewarm_groups(PLAN.cells) if CUDA else {}


def prewarm_cells(wildcards):
    key = (wildcards.model, wildcards.backend, wildcards.dtype)
    if key not in PREWARM:
        raise ValueError(
            f"no prewarm job for {key}: preset {PLAN.preset!r} runs none "
            f"(backends {list(PREWARM_BACKENDS)} on a cuda preset)"
        )
    return [vars(c) for c in PREWARM[key]]


def headline_pair(wildcards):
    return (wildcards.model, wildcards.backend) in PLAN.headline_pairs


def verify_priority(wildcards):
    return PRIORITY["verify"][0 if headline_pair(wildcards) else 1]


def prewarm_priority(wildcards):
    return PRIORITY["prewarm"][0 if headline_pair(wildcards) else 1]


# With replicates, the other cells and the later replicates share the priorities between
# the first replicates (75) and the rest (10): round r's replicates, then its cells.
ROUND_STEP = max(
    1, (PRIORITY["paired"] - PRIORITY["bench"][1]) // (2 * PLAN.measure_rounds)
)


def bench_priority(wildcards):
    cell = planned_cell(wildcards)
    replicate = cell_replicate(wildcards)
    if replicate:  # a headline cell's later processes: with the paired replicates r
        return PRIORITY["paired"] - 2 * replicate * ROUND_STEP
    if cell in PLAN.headline:
        return PRIORITY["bench"][0]
    if PLAN.measure_rounds == 1:
        return PRIORITY["bench"][1]
    return PRIORITY["paired"] - (2 * PLAN.bench_round[cell] + 1) * ROUND_STEP


def paired_priority(wildcards):
    return PRIORITY["paired"] - 2 * int(wildcards.replicate) * ROUND_STEP


def run_dtypes(wildcards):
    return PLAN.verify_dtypes(wildcards.model, wildcards.backend)


def finished(files):
    """``files``, or with ``partial=True`` (finishing a stopped run) only those that exist
    and whose provenance sidecar vouches for their bytes: a half-written or unfinished
    output never counts, and nothing missing is scheduled."""
    return [f for f in files if vouched(f)] if PLAN.partial else files


def run_cells(wildcards):
    """Every bench job's record: each cell's, and a replicated headline cell's other
    processes'."""
    run = live_run(wildcards.run)
    return finished([paths.cell_record(run, c, r) for c, r in PLAN.bench_jobs])


def run_paired(wildcards):
    run = live_run(wildcards.run)
    return finished([paths.paired_record(run, c, r) for c, r in PLAN.paired_jobs])


def run_ops(wildcards):
    run = live_run(wildcards.run)
    return finished([paths.ops(run, c) for c in sorted(PLAN.profiled)])


def run_verify_records(wildcards):
    run = live_run(wildcards.run)
    return finished([paths.verify_record(run, m, b) for m, b in PLAN.pairs])


def device_input_finished(wildcards):
    live_run(wildcards.run)
    return finished(PLAN.device_records())


def run_sidecars(wildcards):
    """The sidecars of every output the tables rest on: the records aggregate reads, the
    traces, and the verify, device and prewarm records the cells read.  Only outputs a
    dependent job requires make Snakemake rerun the job that lacks them, so without these
    a record left without its sidecar (a killed job, or one that ssmbench.heal holds the
    place of) would never be made again."""
    run = live_run(wildcards.run)
    traces = finished([paths.trace(run, c) for c in sorted(PLAN.profiled)])
    prewarms = finished([paths.prewarm(run, *key) for key in PREWARM])
    outputs = run_cells(wildcards) + run_paired(wildcards) + run_ops(wildcards)
    outputs += run_verify_records(wildcards) + device_input_finished(wildcards)
    return [paths.prov(p) for p in outputs + traces + prewarms]


def planned_cells(wildcards):
    """Every bench job of the plan (cell and replicate), for ``partial=True``: those
    without a finished record become not_run (or failed) rows."""
    if not PLAN.partial:
        return []
    return [{"cell": vars(c), "replicate": r} for c, r in PLAN.bench_jobs]


def planned_paired(wildcards):
    """Every paired job of the plan (SSM side and replicate), for ``partial=True``, as
    above."""
    if not PLAN.partial:
        return []
    return [{"cell": vars(c), "replicate": r} for c, r in PLAN.paired_jobs]


def shipped_files(wildcards):
    """Every file of a precollected run, which rule verify_provenance checks."""
    run_dir = Path(PLAN.precollected_dir, wildcards.run)
    return sorted(str(p) for p in run_dir.rglob("*") if p.is_file())


def run_figures(run):
    """The figures of ``run``: the live run's (PLAN.figures), an imported run's (the
    config's, of the cells table), or a shipped run's by the tables it has
    (ssmbench.config.shipped_figures)."""
    if (LIVE and run == RUN) or run in IMPORTED_RUNS:
        return PLAN.figures
    return shipped_figures(Path(PLAN.precollected_dir, run), PLAN.figures)


def figure_spec(wildcards):
    figures = run_figures(wildcards.run)
    if wildcards.figure not in figures:
        raise ValueError(
            f"run {wildcards.run}: unknown figure {wildcards.figure!r}; known: "
            f"{sorted(figures)}"
        )
    return figures[wildcards.figure]


def figure_cells(wildcards):
    """What a figure draws from: the records of its cells (or, for a figure of the ops
    table, the operator profiles), so that asking for one figure measures only its cells;
    or one of the run's tables, made by an aggregate or the verdict (a whole-model run's
    lm.csv and lm_ops.csv too)."""
    run = live_run(wildcards.run)
    spec = figure_spec(wildcards)
    if spec.table in (*RUN_TABLES, "lm", "lm_ops"):
        return [paths.table(run, f"{spec.table}.csv")]
    path = paths.cell_record if spec.table == "cells" else paths.ops
    return finished([path(run, c) for c in PLAN.figure_cells(wildcards.figure)])


def figure_device(wildcards):
    """The run's device.json for a figure of its cells: the cells' floors read its
    dispatch cost and its ceilings' spread (ssmbench.floors); none for another table."""
    run = live_run(wildcards.run)
    if figure_spec(wildcards).table != "cells" or PLAN.kind == "lm":
        return []
    return [ancient(p) for p in finished([paths.device(run)])]


def figure_table(wildcards):
    """The table a live run's figure draws (rule figure_table makes it)."""
    live_run(wildcards.run)
    return paths.figure_table(wildcards.run, wildcards.figure)


def precollected_figure_table(wildcards):
    """The table a shipped run's figure draws: one of its own, under precollected_dir."""
    name = f"{figure_spec(wildcards).table}.csv"
    return paths.precollected_table(wildcards.run, name, PLAN.precollected_dir)


def imported_figure_table(wildcards):
    """The table an imported run's figure draws (rule import_ssm_scope writes it)."""
    if wildcards.run not in IMPORTED_RUNS:
        raise ValueError(
            f"run {wildcards.run!r} is not imported; import_ssm_scope=<clone> imports "
            f"{' and '.join(SSM_SCOPE_RUNS)}"
        )
    name = f"{figure_spec(wildcards).table}.csv"
    return paths.imported_table(wildcards.run, name)


def compared(wildcards):
    """The runs of comparison ``wildcards.run``: name -> its tables folder."""
    if wildcards.run not in COMPARISONS:
        raise ValueError(
            f"no comparison {wildcards.run!r}: with source=precollected the workflow "
            f"compares {paths.COMPARISON!r}, once there are two runs (it has {COMPARED})"
        )
    runs = {}
    for run in COMPARED:
        if run in IMPORTED_RUNS:
            runs[run] = str(Path(paths.imported_table(run, "cells.csv")).parent)
        else:
            runs[run] = str(Path(PLAN.precollected_dir, run, "tables"))
    return runs


def compare_inputs(wildcards):
    """What a comparison reads: each run's cells table, and a shipped run's go/no-go table
    where it has one, with its provenance stamp (checked before it is drawn)."""
    files, verified = [], []
    for run, folder in compared(wildcards).items():
        files.append(str(Path(folder, "cells.csv")))
        if run in IMPORTED_RUNS:
            continue
        verified.append(paths.verified(run))
        if Path(folder, "go_no_go.csv").is_file():
            files.append(str(Path(folder, "go_no_go.csv")))
    return dict(tables=files, verified=verified)


def figure_kind(wildcards):
    return figure_spec(wildcards).table


def figure_notebook_kind(wildcards):
    """The kind of table the figure's notebook takes (its parameter ``<kind>_path``)."""
    return figure_spec(wildcards).notebook_kind


def figure_filters(wildcards):
    spec = figure_spec(wildcards)
    return {
        "phase": spec.phase,
        "models": list(spec.models) if spec.models else None,
        "backends": list(spec.backends) if spec.backends else None,
    }


def figure_outputs(origin):
    """The figure rule's outputs for a run of ``origin`` (paths.FIGURES_BY_ORIGIN): the
    PDF, the PNG (in the report), the executed notebook and their sidecars."""
    # Snakemake resolves the caption against the rule's file, workflow/rules/figures.smk
    path = lambda ext: paths.figure("{run}", "{figure}", ext, origin)
    return dict(
        pdf=path("pdf"),
        png=report(
            path("png"),
            caption="../report/figure.rst",
            category="figures",
            subcategory="{run}",
            labels={"figure": "{figure}"},
        ),
        ipynb=path("ipynb"),
        prov=[paths.prov(path(ext)) for ext in paths.FIGURE_EXTS],
    )


def with_prov(files):
    return [f for path in files for f in (path, paths.prov(path))]


def figures_of(run, figures, origin):
    """Every file of ``figures`` of ``run``, drawn from ``origin``'s tables (paths.figure)."""
    return [
        paths.figure(run, fig, ext, origin)
        for fig in figures
        for ext in paths.FIGURE_EXTS
    ]


def all_targets():
    """The live run's tables and figures, or with source=precollected every shipped run's
    figures (each in figures/precollected/<run>/), and any imported run's."""
    targets = []
    if LIVE:
        tables = paths.LM_TABLES if PLAN.kind == "lm" else paths.TABLES
        if PLAN.tasks:
            tables += (paths.TASKS_TABLE, *paths.TASK_FIGURE_TABLES)
        targets += [paths.table(RUN, name) for name in tables]
        targets += figures_of(RUN, PLAN.figures, "live")
    else:  # plan() refuses a precollected_dir without a run
        for run in precollected_runs(PLAN.precollected_dir):
            targets += figures_of(run, run_figures(run), "precollected")
    for run in IMPORTED_RUNS:
        targets += figures_of(run, IMPORTED_FIGURES, "imported")
    for comparison in COMPARISONS:
        targets += figures_of(comparison, COMPARE_FIGURES, "compare")
    return with_prov(targets)
