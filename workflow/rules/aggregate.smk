localrules:
    aggregate,


rule aggregate:
    input:
        cells=run_cells,
        verify=run_verify_records,
        ops=run_ops,
        device=device_input,
        claims="config/claims.yaml",
    output:
        cells_csv=paths.table("{run}", "cells.csv"),
        cells_parquet=paths.table("{run}", "cells.parquet"),
        samples_parquet=paths.table("{run}", "samples.parquet"),
        verify_csv=paths.table("{run}", "verify.csv"),
        ops_csv=paths.table("{run}", "ops.csv"),
        claims_csv=paths.table("{run}", "claims.csv"),
        prov=with_prov([paths.table("{run}", name) for name in paths.TABLES])[1::2],
    log:
        "logs/{run}/aggregate.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../../scripts/aggregate.py"
