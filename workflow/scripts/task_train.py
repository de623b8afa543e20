"""Rule task_train: train one (task, family, seed) and score it (ssmbench.tasks.run); the
record is written whatever its status: unavailable data, a diverged loss, an error."""

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.outcome import refuse_if_stopped, saving
from ssmbench.provenance import from_snakemake, now
from ssmbench.scripting import logged
from ssmbench.tasks.matrix import TaskCell
from ssmbench.tasks.record import write_task_record
from ssmbench.tasks.run import headline, run_task

with logged(snakemake):
    started = now()
    p, out = snakemake.params, snakemake.output.record
    refuse_if_stopped(p.run, out)
    job = p.job
    cell = TaskCell(job["task"], job["family"], job["seed"])
    if p.cpu_mem_limit_gb and job["device"] == "cpu":
        from ssmbench.process import cap_address_space

        cap_address_space(p.cpu_mem_limit_gb)  # over it, the run is oom
    record = run_task(
        cell,
        job["spec"],
        p.run,
        imdb_dir=job["imdb_dir"],
        threads=snakemake.threads,
        device=job["device"],
        cut=job["cut"],
    )
    print(f"{out}: {record['status']} {record['reason']} {record['metric']} {headline(record)}")
    with saving(p.run, out):
        write_task_record(out, record)
        from_snakemake(snakemake, seed=cell.seed, started=started)
