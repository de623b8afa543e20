"""Rule verify_provenance: every file of a shipped run against its sidecar and the run's
manifest (ssmbench.provenance.verify_run), before any of the run's figures is drawn.  The
stamp holds the manifest's sha256, which each figure's sidecar then records."""

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.provenance import MANIFEST, from_snakemake, now, read_manifest, verify_run
from ssmbench.records import write_json_atomic
from ssmbench.scripting import logged

with logged(snakemake):
    started = now()
    run_dir = snakemake.params.run_dir
    manifest_sha256 = verify_run(run_dir)  # or ProvenanceError, naming every mismatch
    manifest = f"{run_dir}/{MANIFEST}"
    stamp = {
        "run_dir": run_dir,
        "manifest": manifest,
        "manifest_sha256": manifest_sha256,
        "files": len(read_manifest(manifest)),
    }
    print(f"{run_dir}: {stamp['files']} files match {manifest} (sha256 {manifest_sha256})")
    write_json_atomic(snakemake.output.stamp, stamp)
    from_snakemake(snakemake, outputs=[snakemake.output.stamp], started=started)
