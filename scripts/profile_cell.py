"""Rule profile: torch.profiler over one cell's phase -> its ops.csv rows and Chrome trace."""

import os

import _src  # noqa: F401  (puts ../src on sys.path)
import pandas as pd

from ssmbench.cell import profile_cell, spec_from_params
from ssmbench.provenance import from_snakemake, now
from ssmbench.scripting import logged
from ssmbench.tables import OPS_COLUMNS

with logged(snakemake):
    started = now()
    p = snakemake.params
    spec = spec_from_params(p)
    rows = profile_cell(spec, trace_path=snakemake.output.trace, threads=snakemake.threads)
    table = pd.DataFrame(rows)[OPS_COLUMNS]
    for row in rows:
        print(f"  {row['bucket']:14s} {row['time_ms']:9.3f} ms {row['share']:6.1%}")
    tmp = f"{snakemake.output.ops}.tmp"
    table.to_csv(tmp, index=False)
    os.replace(tmp, snakemake.output.ops)
    from_snakemake(snakemake, seed=p.seed, started=started)
