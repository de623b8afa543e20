localrules:
    aggregate,


rule aggregate:
    input:
        cells=run_cells,
        verify=run_verify_records,
    output:
        cells_csv=paths.table("{run}", "cells.csv"),
        cells_parquet=paths.table("{run}", "cells.parquet"),
        samples_parquet=paths.table("{run}", "samples.parquet"),
        verify_csv=paths.table("{run}", "verify.csv"),
        prov=with_prov([paths.table("{run}", name) for name in paths.TABLES])[1::2],
    log:
        "logs/{run}/aggregate.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../../scripts/aggregate.py"
