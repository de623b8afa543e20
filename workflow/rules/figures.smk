localrules:
    verify_provenance,
    figure_table,
    figure,
    figure_precollected,
    figure_imported,
    compare_table,
    figure_compare,


# A shipped run is checked before any of its figures is drawn: every file against its
# sidecar and the run's manifest (ssmbench.provenance.verify_run); a mismatch stops the run.
rule verify_provenance:
    input:
        shipped_files,
    output:
        stamp=paths.VERIFIED,
        prov=paths.prov(paths.VERIFIED),
    log:
        paths.VERIFY_PROVENANCE_LOG,
    conda:
        "../../envs/analysis.yaml"
    params:
        run_dir=lambda w: f"{PLAN.precollected_dir}/{w.run}",
    script:
        "../scripts/verify_provenance.py"


rule figure_table:
    input:
        cells=figure_cells,
        device=figure_device,
    output:
        table=paths.FIGURE_TABLE,
        prov=paths.prov(paths.FIGURE_TABLE),
    log:
        paths.FIGURE_TABLE_LOG,
    conda:
        "../../envs/analysis.yaml"
    params:
        table=figure_kind,
    script:
        "../scripts/figure_table.py"


# A live run's figure: figures/<run>/, from the table rule figure_table makes.
rule figure:
    input:
        table=figure_table,
        notebook="notebooks/{figure}.ipynb",
    output:
        **figure_outputs("live"),
    log:
        paths.FIGURE_LOGS["live"],
    conda:
        "../../envs/analysis.yaml"
    params:
        filters=figure_filters,
        notebook_kind=figure_notebook_kind,
        # Snakemake reads a report caption from one fixed path per rule: the template
        # workflow/report/figure.rst prints this, the text of workflow/report/<figure>.rst.
        caption=lambda w: Path(
            workflow.basedir, f"workflow/report/{w.figure}.rst"
        ).read_text(),
    script:
        "../scripts/figure.py"


# A shipped run's figure: figures/precollected/<run>/, from its own tables, once the run
# has passed verify_provenance.
use rule figure as figure_precollected with:
    input:
        table=precollected_figure_table,
        notebook="notebooks/{figure}.ipynb",
        verified=paths.verified("{run}"),
    output:
        **figure_outputs("precollected"),
    log:
        paths.FIGURE_LOGS["precollected"],


# An imported run's figure: figures/imported/<run>/, from the tables the import wrote.
use rule figure as figure_imported with:
    input:
        table=imported_figure_table,
        notebook="notebooks/{figure}.ipynb",
    output:
        **figure_outputs("imported"),
    log:
        paths.FIGURE_LOGS["imported"],


# Runs side by side (ssmbench.compare): every compared run's tables joined into one
# comparison table, results/compare/<comparison>/compare.csv.
rule compare_table:
    input:
        unpack(compare_inputs),
    output:
        table=paths.COMPARE_TABLE,
        prov=paths.prov(paths.COMPARE_TABLE),
    log:
        paths.COMPARE_TABLE_LOG,
    conda:
        "../../envs/analysis.yaml"
    params:
        runs=compared,
    script:
        "../scripts/compare_table.py"


# A comparison's figure: figures/compare/<comparison>/, from its comparison table.
use rule figure as figure_compare with:
    input:
        table=paths.COMPARE_TABLE,
        notebook="notebooks/{figure}.ipynb",
    output:
        **figure_outputs("compare"),
    log:
        paths.FIGURE_LOGS["compare"],
    params:
        filters={},
        notebook_kind="compare",
        caption=lambda w: Path(
            workflow.basedir, f"workflow/report/{w.figure}.rst"
        ).read_text(),
