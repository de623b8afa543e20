"""Rule prewarm: run each cell of one (model, backend, dtype) once, untimed, so that the
cells find their kernels compiled and autotuned (ssmbench.prewarm)."""

import json

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.cell import CellSpec
from ssmbench.gpulease import gpu_record
from ssmbench.matrix import Cell, Size, Timing
from ssmbench.prewarm import prewarm
from ssmbench.process import set_threads
from ssmbench.provenance import from_snakemake, now
from ssmbench.records import write_json_atomic
from ssmbench.scripting import logged

with logged(snakemake):
    started = now()
    p = snakemake.params
    with open(snakemake.input.verify) as f:
        verify = json.load(f)
    set_threads(snakemake.threads)
    size, timing = Size(**p.size), Timing(**p.timing)

    def spec_of(cell):
        return CellSpec(p.run, cell, p.device, size, timing, p.seed)

    cells = [Cell(**c) for c in p.cells]
    record = prewarm(spec_of, cells, verify, budget_s=p.budget_s)
    record.update(
        {k: snakemake.wildcards[k] for k in ("model", "backend", "dtype")},
        device=p.device,
        gpu=gpu_record(p.device),
        started=started,
        ended=now(),
    )
    for shape in record["shapes"]:
        print(shape)
    print(f"prewarm {record['status']} in {record.get('seconds', 0)} s {record['reason']}")
    write_json_atomic(snakemake.output.record, record)
    from_snakemake(snakemake, seed=p.seed, started=started)
