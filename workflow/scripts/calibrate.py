"""Rules calibrate and calibrate_gpu: measure the device's ceilings (copy bandwidth, GEMM
rate per dtype, the cost of one dispatch) and record the datasheet peaks beside them, into
results/<run>/device.json, or, for one GPU of the node (leased by its key,
params.lease_gpu), into results/<run>/devices/<key>.json."""

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.measure.ceilings import calibrate
from ssmbench.provenance import from_snakemake, now
from ssmbench.records import write_json_atomic
from ssmbench.scripting import logged

with logged(snakemake):
    started = now()
    p = snakemake.params
    record = calibrate(p.device, list(p.dtypes), quick=bool(p.quick), threads=snakemake.threads)
    print(f"{record['device']} ({record['device_name']}): {record['status']} {record['reason']}")
    print(f"  gpu: {record['gpu']}")
    if record["copy"] is not None:
        print(f"  copy: {record['copy']['gbps']:.1f} GB/s ({record['copy']['nbytes']} bytes)")
    for dtype, m in record["matmul"].items():
        rate = "-" if m["tflops"] is None else f"{m['tflops']:.3f} TFLOP/s"
        print(f"  matmul {dtype}: {rate} n={m['n']} {m['status']} {m['reason']}")
    dispatch = record["dispatch"]
    if dispatch is not None:
        graph = "-" if dispatch["graph_us"] is None else f"{dispatch['graph_us']:.2f} us"
        print(f"  dispatch: {dispatch['eager_us']:.2f} us eager, {graph} in a CUDA graph")
    sheet = record["datasheet"]
    print(f"  datasheet: {sheet['name'] if sheet else record['datasheet_reason']}")
    write_json_atomic(snakemake.output.device, record)
    from_snakemake(snakemake, started=started)
