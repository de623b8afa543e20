"""Rule lm_aggregate: a whole-model run's records -> lm.csv/.parquet, lm_ops.csv, and the
claims of config/claims.yaml judged on them (claims.csv).

Every record read must match its sidecar first (ssmbench.provenance.check_all).  With
``partial=True`` (finishing a stopped run) the planned cells without a record are rows
too, not_run."""

import os

import _src  # noqa: F401  (puts ../src on sys.path)
import pandas as pd

from ssmbench import claims
from ssmbench.lm.matrix import LMCell
from ssmbench.lm.record import LMRecord, read_lm_record
from ssmbench.lm.table import cells_view, lm_ops_table, lm_table, write_lm_tables
from ssmbench.lm.zoo import entry
from ssmbench.provenance import check_all, from_snakemake, now
from ssmbench.scripting import logged

with logged(snakemake):
    started = now()
    run, p, i, o = snakemake.wildcards.run, snakemake.params, snakemake.input, snakemake.output
    check_all([*i.cells, *i.ops, *i.verify])  # or ProvenanceError, naming the file
    records = [read_lm_record(path) for path in i.cells]
    have = {
        LMCell(r.model, r.backend, r.phase, r.batch, r.seq_len, r.new_tokens, r.dtype)
        for r in records
    }
    for cell in [LMCell(**c) for c in p.planned]:  # a stopped run's missing cells
        if cell not in have:
            records.append(
                LMRecord(
                    run=run,
                    **vars(cell),
                    device=p.device,
                    preset=p.size,
                    family=entry(cell.model).family,
                    status="not_run",
                    reason="the run stopped before this cell was measured",
                )
            )
    table = lm_table(records)
    write_lm_tables(table, o.lm_csv, o.lm_parquet)
    ops = [pd.read_csv(path) for path in i.ops]
    ops = pd.concat(ops, ignore_index=True) if ops else lm_ops_table([])
    tmp = f"{o.ops_csv}.tmp"
    ops.to_csv(tmp, index=False)
    os.replace(tmp, o.ops_csv)
    judged = claims.evaluate(cells_view(table), run, claims.load(i.claims))
    tmp = f"{o.claims_csv}.tmp"
    judged.to_csv(tmp, index=False)
    os.replace(tmp, o.claims_csv)
    print(table.groupby(["model", "backend", "phase", "status"]).size().to_string())
    print(judged[["id", "verdict", "why"]].to_string())
    outputs = [o.lm_csv, o.lm_parquet, o.ops_csv, o.claims_csv]
    from_snakemake(snakemake, outputs=outputs, started=started)
