"""Rule lm_bench: measure one whole-model cell (ssmbench.lm.cell) and write its record,
whatever its status, with the gate rule lm_verify ran for its model."""

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.lm import backends

backends.prepare(snakemake.params.spec["backend"])  # before anything imports transformers

from ssmbench.lm.cell import LMCellSpec, run_lm_cell  # noqa: E402
from ssmbench.lm.record import write_lm_record  # noqa: E402
from ssmbench.outcome import refuse_if_stopped, saving  # noqa: E402
from ssmbench.process import cap_address_space  # noqa: E402
from ssmbench.provenance import from_snakemake, now  # noqa: E402
from ssmbench.records import read_json  # noqa: E402
from ssmbench.scripting import logged  # noqa: E402

with logged(snakemake):
    started = now()
    p, out = snakemake.params, snakemake.output.record
    refuse_if_stopped(p.run, out)
    spec = LMCellSpec.from_dict(p.spec)
    verify = read_json(snakemake.input.verify)
    if p.cpu_mem_limit_gb and spec.device == "cpu":
        cap_address_space(p.cpu_mem_limit_gb)  # over it, the cell is oom
        print(f"address space capped at {p.cpu_mem_limit_gb} GiB (RLIMIT_AS)")
    record = run_lm_cell(
        spec, verify={**verify, "source": snakemake.input.verify}, threads=snakemake.threads
    )
    print(
        f"{out}: {record.status} {record.reason} ttft={record.ttft_ms_median} ms "
        f"tpot={record.tpot_ms_median} ms n={record.n_samples}"
    )
    with saving(p.run, out):
        write_lm_record(out, record)
        from_snakemake(snakemake, seed=spec.seed, started=started)
