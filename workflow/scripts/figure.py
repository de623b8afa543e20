"""Rule figure: execute the figure's notebook with papermill; keep PDF, PNG and the notebook.

A figure of a shipped run records the sha256 of the run's manifest, from the stamp of the
run's verify_provenance job: a figure drawn after the manifest itself was rewritten names
another manifest than the one committed."""

import json
import os

import _src  # noqa: F401  (puts ../src on sys.path)
import papermill

from ssmbench.provenance import from_snakemake, now
from ssmbench.scripting import logged

with logged(snakemake):
    started = now()
    out = snakemake.output
    parameters = dict(snakemake.params.filters)
    kind = snakemake.params.notebook_kind
    parameters.update(
        **{f"{kind}_path": os.path.abspath(snakemake.input.table)},
        out_pdf=os.path.abspath(out.pdf),
        out_png=os.path.abspath(out.png),
    )
    papermill.execute_notebook(
        snakemake.input.notebook,
        out.ipynb,
        parameters=parameters,
        kernel_name="python3",
        cwd=os.path.dirname(os.path.abspath(snakemake.input.notebook)),
        progress_bar=False,
    )
    extra = {}
    if verified := snakemake.input.get("verified"):  # a precollected run's, checked
        with open(verified) as f:
            stamp = json.load(f)
        extra["precollected"] = {k: stamp[k] for k in ("manifest", "manifest_sha256")}
    from_snakemake(snakemake, outputs=[out.pdf, out.png, out.ipynb], started=started, extra=extra)
