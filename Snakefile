# ssm-bench: config -> verify, calibrate -> bench (one job per cell), profile -> aggregate
# -> figures.
# Layout, paths and the life of one cell: docs/ARCHITECTURE.md (and src/ssmbench/paths.py).
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

# The package is used from src/ (jobs do the same through workflow/scripts/_src.py).  The config
# file is read strictly before Snakemake reads it: a key twice in one mapping, or a file
# that is not a mapping, is refused naming the file and the line.
sys.path.insert(0, str(Path(workflow.basedir) / "src"))
from ssmbench.config import CONFIG_FILE, ConfigError, read_config_file  # noqa: E402

try:
    read_config_file(CONFIG_FILE)
except (ConfigError, FileNotFoundError) as error:
    sys.exit(f"ssm-bench: {error}")


configfile: CONFIG_FILE


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/verify.smk"
include: "workflow/rules/calibrate.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/lm.smk"
include: "workflow/rules/tasks.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/import.smk"


# One run at a time in this checkout (ssmbench.runlock): taken when a real run starts,
# released when it ends; a second run is refused, naming the first.  While it runs, the
# cells done and the time left (ssmbench.progress).
from ssmbench import progress  # noqa: E402  (src/ is on sys.path)


onstart:
    runlock.take_or_exit(RUN)
    progress.watch(PLAN, workflow.dag.needrun_jobs())
    outcome.keep_tables(PLAN)


# How the run ended: the cells that failed, and a non-zero exit when all did; a table a
# failed job could not make again is the previous run's (ssmbench.outcome).
onsuccess:
    progress.stop()
    runlock.release()
    outcome.drop_kept_tables(PLAN)
    outcome.at_end(PLAN, succeeded=True)


onerror:
    progress.stop()
    runlock.release()
    outcome.restore_tables(PLAN)
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
