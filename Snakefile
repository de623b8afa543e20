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


rule all:
    default_target: True
    input:
        all_targets(),
        with_prov([VERDICT, paths.table(RUN, "go_no_go.csv")]) if LIVE else [],
