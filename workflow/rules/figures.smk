localrules:
    figure_table,
    figure,


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


rule figure:
    input:
        table=figure_table,
        notebook="notebooks/{figure}.ipynb",
    output:
        pdf=paths.figure("{run}", "{figure}", "pdf"),
        png=report(
            paths.figure("{run}", "{figure}", "png"),
            caption="../report/figure.rst",
            category="figures",
            subcategory="{run}",
            labels={"figure": "{figure}"},
        ),
        ipynb=paths.figure("{run}", "{figure}", "ipynb"),
        prov=[
            paths.prov(paths.figure("{run}", "{figure}", e)) for e in paths.FIGURE_EXTS
        ],
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
