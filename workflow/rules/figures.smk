localrules:
    verify_provenance,
    figure_table,
    figure,


# A shipped run is checked before any of its figures is drawn: every file against its
# sidecar and the run's manifest (ssmbench.provenance.verify_run); a mismatch stops the run.
rule verify_provenance:
    input:
        shipped_files,
    output:
        stamp=paths.VERIFIED,
        prov=paths.prov(paths.VERIFIED),
    log:
        "logs/{run}/verify_provenance.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        run_dir=lambda w: f"{PLAN.precollected_dir}/{w.run}",
    script:
        "../../scripts/verify_provenance.py"


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
        verified=precollected_verified,
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
