"""Rule verdict: a short verdict for the report, every sentence read off the run's tables
(:func:`ssmbench.analysis.verdict_rst`).

It says how the cells ended (counts per status); the go/no-go answer per phase at the
longest length where attention and SSMs both ran (attention's time over each SSM's with
its 95% interval, paired where the run has paired cells, and whether that interval says
the SSM is faster, attention is, or neither: ssmbench.analysis.go_no_go_table); which
backend was fastest for each family at the longest length that family ran, per phase;
and how the published claims fared.  Written as reStructuredText: the report shows it on
its landing page and as the caption of the claims table.  Beside it, tables/go_no_go.csv
(the go/no-go table itself) and tables/speedups.csv (eager over CUDA-graph decode).
"""

import _src  # noqa: F401  (puts ../src on sys.path)
import pandas as pd

from ssmbench.analysis import go_no_go_table, speedups_table, verdict_rst
from ssmbench.provenance import from_snakemake, now
from ssmbench.scripting import logged
from ssmbench.tables import read_cells, read_pairs_table, read_samples

with logged(snakemake):
    started = now()
    cells = read_cells(snakemake.input.cells)
    samples = read_samples(snakemake.input.samples)
    paired = read_pairs_table(snakemake.input.pairs)
    claims = pd.read_csv(snakemake.input.claims)
    out = snakemake.output
    table = go_no_go_table(cells, samples=samples, paired=paired)
    table.to_csv(out.go_no_go, index=False, float_format="%.4g")
    speedups_table(cells, samples).to_csv(out.speedups, index=False, float_format="%.4g")
    with open(out.rst, "w") as f:
        f.write(verdict_rst(cells, claims, table))
    outputs = [out.rst, out.go_no_go, out.speedups]
    from_snakemake(snakemake, outputs=outputs, started=started)
