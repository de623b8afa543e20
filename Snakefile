# ssm-bench: config -> verify, calibrate -> bench (one job per cell), profile -> aggregate
# -> figures.
# Layout, paths and the life of one cell: docs/ARCHITECTURE.md (and src/ssmbench/paths.py).
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/verify.smk"
include: "workflow/rules/calibrate.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/import.smk"
include: "workflow/rules/lm.smk"
include: "workflow/rules/tasks.smk"


# One run at a time in this checkout (ssmbench.runlock): taken when a real run starts,
# released when it ends; a second run is refused, naming the first.  While it runs, the
# cells done and the time left (ssmbench.progress).
from ssmbench import progress, runlock  # noqa: E402  (src/ is on sys.path: common.smk)

if workflow.is_main_process:
    runlock.note_if_held()


onstart:
    runlock.take_or_exit(RUN)
    progress.watch(PLAN, workflow.dag.needrun_jobs())


# How the run ended: the cells that failed, and a non-zero exit when all did (ssmbench.outcome).
onsuccess:
    progress.stop()
    runlock.release()
    outcome.at_end(PLAN, succeeded=True)


onerror:
    progress.stop()
    runlock.release()
    outcome.at_end(PLAN, succeeded=False)


rule all:
    default_target: True
    input:
        all_targets(),
        (
            with_prov([VERDICT, paths.table(RUN, "go_no_go.csv")])
            if LIVE and PLAN.kind == "blocks" and not PLAN.tasks
            else []
        ),
