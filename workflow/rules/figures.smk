localrules:
    figure_table,
    figure,
    figure_precollected,
    figure_imported,


rule figure_table:
    input:
        cells=figure_cells,
    output:
        table=paths.FIGURE_TABLE,
        prov=paths.prov(paths.FIGURE_TABLE),
    log:
        "logs/{run}/figure_table/{figure}.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        table=figure_kind,
    script:
        "../../scripts/figure_table.py"


# A live run's figure: figures/<run>/, from the table rule figure_table makes.
rule figure:
    input:
        table=figure_table,
        notebook="notebooks/{figure}.ipynb",
    output:
        **figure_outputs("live"),
    log:
        "logs/{run}/figure/{figure}.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        filters=figure_filters,
        table=figure_kind,
        # Snakemake reads a report caption from one fixed path per rule: the template
        # workflow/report/figure.rst prints this, the text of workflow/report/<figure>.rst.
        caption=lambda w: Path(
            workflow.basedir, f"workflow/report/{w.figure}.rst"
        ).read_text(),
    script:
        "../../scripts/figure.py"


# A shipped run's figure: figures/precollected/<run>/, from its own tables.
use rule figure as figure_precollected with:
    input:
        table=precollected_figure_table,
        notebook="notebooks/{figure}.ipynb",
    output:
        **figure_outputs("precollected"),
    log:
        "logs/precollected/{run}/figure/{figure}.log",


# An imported run's figure: figures/imported/<run>/, from the tables the import wrote.
use rule figure as figure_imported with:
    input:
        table=imported_figure_table,
        notebook="notebooks/{figure}.ipynb",
    output:
        **figure_outputs("imported"),
    log:
        "logs/imported/{run}/figure/{figure}.log",
