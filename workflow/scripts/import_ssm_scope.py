"""Rule import_ssm_scope: SSM-Scope's published CSVs -> our tidy tables, one run per
platform, under results/imported/ (ssmbench.importers.ssm_scope)."""

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.importers.ssm_scope import write_runs
from ssmbench.scripting import logged

with logged(snakemake):
    write_runs(snakemake.input.clone, "results/imported")
    for path in snakemake.output.tables:
        print(path)
