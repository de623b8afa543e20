"""Rule verify: check one (model, backend) against the float64 reference on the run's device."""

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.outcome import refuse_if_stopped, saving
from ssmbench.provenance import from_snakemake, now
from ssmbench.records import validate_verify, write_json_atomic
from ssmbench.scripting import logged

with logged(snakemake):
    started = now()
    p = snakemake.params
    run = snakemake.wildcards.run
    refuse_if_stopped(run, snakemake.output.record)
    from ssmbench.verify.run import run_verify  # imports torch: after the refusal, logged

    record = run_verify(
        snakemake.wildcards.model, snakemake.wildcards.backend, p.device, p.dtypes, seed=p.seed
    )
    print(f"{record['model']}/{record['backend']}: {record['status']} {record['reason']}")
    for check in record["checks"]:
        print(
            f"  {check['name']} [{check['dtype']}] max_abs_err={check['max_abs_err']:.3e} "
            f"rel_rms_err={check['rel_rms_err']:.3e} ok={check['ok']}"
        )
    validate_verify(record, snakemake.output.record)
    with saving(run, snakemake.output.record):
        write_json_atomic(snakemake.output.record, record)
        from_snakemake(snakemake, seed=p.seed, started=started)
