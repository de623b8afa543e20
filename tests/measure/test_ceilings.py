"""Device calibration: copy bandwidth and GEMM rate on the CPU at tiny sizes, datasheet
matching of CUDA device names, utilization arithmetic, and the device.json record."""

from __future__ import annotations

import json
import statistics

import pytest
import torch

from ssmbench.measure.ceilings import (
    calibrate,
    datasheet_for,
    datasheet_key,
    dispatch_block,
    dispatch_us,
    last_level_cache_bytes,
    measure_copy_bandwidth,
    measure_dispatch,
    measure_matmul_rate,
    utilization,
)
from ssmbench.paths import REPO
from ssmbench.provenance import cpu_model
from ssmbench.records import write_json_atomic
from tests.gpufakes import FakeLaunches

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.mark.parametrize(
    # memory bandwidth in GB/s as NVIDIA's datasheets state it (the sources in
    # config/devices.yaml)
    "name, key, memory_gbps",
    [
        ("NVIDIA H200", "H200 SXM", 4800),
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 3350),
        ("NVIDIA H100 PCIe", "H100 PCIe", 2000),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB", 2039),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB", 1555),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB", 1935),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB", 1555),
        ("NVIDIA L40S", "L40S", 864),
        ("NVIDIA L4", "L4", 300),
        ("Tesla T4", "T4", 320),
        ("NVIDIA GeForce RTX 4090", "RTX 4090", 1008),
    ],
)
def test_datasheet_matches_device_names(name, key, memory_gbps):
    entry = datasheet_for(name)
    assert entry is not None and entry["name"] == key
    assert entry["memory_gbps"] == memory_gbps


@pytest.mark.parametrize(
    "name",
    [
        "Intel(R) Xeon(R) Processor",  # a CPU
        "NVIDIA GH200 480GB",  # Grace Hopper: not an H200
        "NVIDIA H100 NVL",  # other peaks than H100 PCIe/SXM, not in the table
        "NVIDIA H200 NVL",
        "NVIDIA A10",  # not an A100
        "NVIDIA RTX A1000",
        "NVIDIA L40",  # not an L40S, not an L4
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA GeForce RTX 4090 Laptop GPU",
        "",
    ],
)
def test_datasheet_none_for_unknown_devices(name):
    assert datasheet_for(name) is None


# The peaks (GB/s, dense TFLOP/s: fp32, tf32, bf16, fp16) that datasheet_for gave before
# they moved into config/devices.yaml, frozen here: the move changes no device.json.
BEFORE_CATALOGUE = {
    "H100 SXM": (3350.0, (67.0, 494.5, 989.5, 989.5)),
    "H100 PCIe": (2000.0, (51.0, 378.0, 756.5, 756.5)),
    "H200 SXM": (4800.0, (67.0, 494.5, 989.5, 989.5)),
    "A100 SXM 80GB": (2039.0, (19.5, 156.0, 312.0, 312.0)),
    "A100 SXM 40GB": (1555.0, (19.5, 156.0, 312.0, 312.0)),
    "A100 PCIe 80GB": (1935.0, (19.5, 156.0, 312.0, 312.0)),
    "A100 PCIe 40GB": (1555.0, (19.5, 156.0, 312.0, 312.0)),
    "L40S": (864.0, (91.6, 183.0, 362.05, 362.05)),
    "L4": (300.0, (30.3, 60.0, 121.0, 121.0)),
    "T4": (320.0, (8.1, None, None, 65.0)),
    "RTX 4090": (1008.0, (82.6, 82.6, 165.2, 165.2)),
}
NAMES = {
    "H100 SXM": "NVIDIA H100 80GB HBM3",
    "H100 PCIe": "NVIDIA H100 PCIe",
    "H200 SXM": "NVIDIA H200",
    "A100 SXM 80GB": "NVIDIA A100-SXM4-80GB",
    "A100 SXM 40GB": "NVIDIA A100-SXM4-40GB",
    "A100 PCIe 80GB": "NVIDIA A100 80GB PCIe",
    "A100 PCIe 40GB": "NVIDIA A100-PCIE-40GB",
    "L40S": "NVIDIA L40S",
    "L4": "NVIDIA L4",
    "T4": "Tesla T4",
    "RTX 4090": "NVIDIA GeForce RTX 4090",
}


@pytest.mark.parametrize("key", sorted(BEFORE_CATALOGUE))
def test_datasheet_unchanged_by_the_catalogue(key):
    memory_gbps, (fp32, tf32, bf16, fp16) = BEFORE_CATALOGUE[key]
    entry = datasheet_for(NAMES[key])
    assert entry["name"] == key and entry["memory_gbps"] == memory_gbps
    # the same keys in the same order as device.json has always written them
    assert list(entry["tflops"].items()) == [
        ("fp32", fp32),
        ("tf32", tf32),
        ("bf16", bf16),
        ("fp16", fp16),
    ]
    assert "NVIDIA" in entry["source"] and "https://" in entry["source"]


def test_datasheet_of_a_device_new_to_the_catalogue():
    entry = datasheet_for("NVIDIA B200")
    assert entry["name"] == "B200" and entry["memory_gbps"] == 8000.0
    assert entry["tflops"]["bf16"] == 2250.0  # 36 PFLOPS with sparsity / 8 GPUs / 2
    assert entry["tflops"]["fp32"] is None  # not read from a datasheet: left out


def test_copy_bandwidth_cpu():
    nbytes = 1 << 20
    result = measure_copy_bandwidth("cpu", nbytes=nbytes, repeats=3, quick=True)
    assert result["nbytes"] == nbytes and result["bytes_moved"] == 2 * nbytes
    assert len(result["samples_gbps"]) == result["repeats"] == 3
    assert all(x > 0 for x in result["samples_gbps"])
    assert result["gbps"] == statistics.median(result["samples_gbps"])
    # GB/s is bytes moved per second over 1e9, from the median time
    assert result["gbps"] == pytest.approx(2 * nbytes / (result["time_ms_median"] * 1e-3) / 1e9)
    assert "copy_" in result["method"]


def test_matmul_rate_cpu_fp32():
    n = 64
    result = measure_matmul_rate("cpu", "fp32", n=n, repeats=3, quick=True)
    assert result["status"] == "ok" and result["reason"] == ""
    assert result["n"] == n and result["flop"] == 2 * n**3
    assert len(result["samples_tflops"]) == 3 and result["tflops"] > 0
    assert result["tflops"] == pytest.approx(
        result["flop"] / (result["time_ms_median"] * 1e-3) / 1e12
    )
    assert result["float32_matmul_precision"] == torch.get_float32_matmul_precision()


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp64"])
def test_matmul_rate_cpu_other_dtypes_never_raise(dtype):
    result = measure_matmul_rate("cpu", dtype, quick=True)
    assert result["status"] in ("ok", "unavailable")
    if result["status"] == "ok":
        assert result["tflops"] > 0
    else:
        assert result["reason"] and result["tflops"] is None


def test_matmul_rate_explicit_unavailable():
    tf32 = measure_matmul_rate("cpu", "tf32", quick=True)
    assert tf32["status"] == "unavailable" and tf32["reason"] == "tf32 is a CUDA tensor-core mode"
    unknown = measure_matmul_rate("cpu", "int8", quick=True)
    assert unknown["status"] == "unavailable" and unknown["reason"] == "unknown dtype 'int8'"


def test_matmul_error_becomes_unavailable(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("addmm_impl_cpu_ not implemented for 'Half'")

    monkeypatch.setattr(torch, "mm", refuse)
    result = measure_matmul_rate("cpu", "fp16", n=16, repeats=2)
    assert result["status"] == "unavailable" and result["tflops"] is None
    assert result["reason"].startswith("RuntimeError: ") and "Half" in result["reason"]


def test_calibrate_quick_cpu(tmp_path):
    threads = torch.get_num_threads()
    record = calibrate("cpu", ["fp32", "bf16"], quick=True, threads=1)
    assert torch.get_num_threads() == threads  # restored
    expected = {
        "status", "reason", "device", "device_name", "torch", "cuda", "threads",
        "float32_matmul_precision", "quick", "copy", "matmul", "ceilings", "datasheet",
        "datasheet_reason", "clocks", "llc_bytes", "started", "ended", "gpu", "dispatch",
    }  # fmt: skip
    assert set(record) == expected
    assert record["gpu"] is None  # no GPU leased on a CPU run
    assert record["llc_bytes"] == last_level_cache_bytes("cpu")
    assert record["status"] == "ok" and record["device"] == "cpu" and record["quick"] is True
    assert record["device_name"] == cpu_model() and record["threads"] == 1
    assert record["torch"] == torch.__version__
    assert record["copy"]["gbps"] > 0 and record["copy"]["nbytes"] == 4 << 20
    assert set(record["matmul"]) == {"fp32", "bf16"}
    assert record["matmul"]["fp32"]["tflops"] > 0
    assert record["ceilings"]["bw_gbps"] == record["copy"]["gbps"]
    assert record["ceilings"]["tflops"]["fp32"] == record["matmul"]["fp32"]["tflops"]
    assert record["datasheet"] is None and record["clocks"] is None
    assert record["datasheet_reason"] == f"no datasheet for {cpu_model()}"
    assert record["dispatch"]["calls_per_sample"] == 200 and record["dispatch"]["graph_us"] is None
    assert dispatch_us(record) == record["dispatch"]["eager_us"] > 0
    assert record["started"] <= record["ended"]
    path = tmp_path / "device.json"
    write_json_atomic(path, record)  # strict JSON: no NaN, nothing unserialisable
    assert json.loads(path.read_text()) == record


def test_dispatch_cost_on_a_cpu_is_a_median_of_positive_samples():
    block = measure_dispatch("cpu", calls=100, repeats=5)
    assert len(block["samples_us"]) == block["repeats"] == 5 and block["calls_per_sample"] == 100
    assert all(x > 0 for x in block["samples_us"])
    assert block["eager_us"] == statistics.median(block["samples_us"])
    assert block["eager_spread_us"] == [min(block["samples_us"]), max(block["samples_us"])]
    # no CUDA graph on a CPU
    assert block["graph_us"] is block["graph_samples_us"] is block["graph_spread_us"] is None
    assert "a + b" in block["method"] and "[min, max]" in block["method"]
    assert "graph" not in block["method"]


def test_dispatch_on_a_gpu_times_launches_and_a_graphs_kernels():
    """The GPU branch over fake launches: an eager launch 5 us, a graph's kernel 1.5 us and
    its replay 20 us, a synchronize 40 us (the queue's tail).  One sample of 100 launches
    between two synchronizes reads (100 x 5 + 40) / 100 = 5.4 us a launch: exactly one
    synchronize inside the timed window; one replay of 40 kernels reads (20 + 40 x 1.5 + 40)
    / 40 = 3.0 us a kernel."""
    fake = FakeLaunches(launch_ns=5_000, kernel_ns=1_500, replay_ns=20_000, sync_ns=40_000)
    block = dispatch_block(
        fake.launch,
        fake.synchronize,
        calls=100,
        repeats=3,
        warmup=2,
        cuda=fake,
        kernels=40,
        clock_ns=fake.clock_ns,
    )
    assert block["samples_us"] == [pytest.approx(5.4)] * 3
    assert block["eager_us"] == pytest.approx(5.4)
    assert block["eager_spread_us"] == [pytest.approx(5.4)] * 2
    assert block["graph_samples_us"] == [pytest.approx(3.0)] * 3
    assert block["graph_us"] == pytest.approx(3.0) and block["graph_kernels"] == 40
    # one graph of 40 kernels, captured after one launch on the side stream; the eager
    # launches: 2 warm-up runs and 3 samples of 100 each
    assert [g.kernels for g in fake.graphs] == [40]
    assert fake.launches == (2 + 3) * 100 + 1
    assert "graph of 40 such kernels" in block["method"]


def test_dispatch_cost_of_a_record_without_the_block_is_none():
    record = {"dispatch": {"eager_us": 2.5, "graph_us": None}}
    assert dispatch_us(record) == 2.5 and dispatch_us(record, graph=True) is None
    on_a_gpu = {"dispatch": {"eager_us": 6.0, "graph_us": 1.8}}
    assert dispatch_us(on_a_gpu, graph=True) == 1.8
    assert dispatch_us({"status": "unavailable", "dispatch": None}) is None
    shipped = {p.parent.name: p for p in (REPO / "results" / "precollected").glob("*/device.json")}
    cpu = json.loads(shipped.pop("cpu").read_text())  # calibrated with the dispatch block
    assert 0 < dispatch_us(cpu) < 100 and dispatch_us(cpu, graph=True) is None
    assert shipped, "the older shipped runs hold device records too"
    for path in shipped.values():  # calibrated before the dispatch ceiling
        assert dispatch_us(json.loads(path.read_text())) is None, path


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU answer")
def test_calibrate_cuda_without_a_device_is_unavailable():
    record = calibrate("cuda", ["fp32"], quick=True)
    assert record["status"] == "unavailable"
    assert "torch.cuda.is_available() is False" in record["reason"]
    assert record["copy"] is None and record["matmul"] == {}


DEVICE_JSON = {
    "float32_matmul_precision": "highest",
    "ceilings": {"bw_gbps": 100.0, "tflops": {"fp32": 10.0, "bf16": 20.0}},
    "datasheet": {"memory_gbps": 200.0, "tflops": {"fp32": 40.0, "tf32": 80.0, "bf16": 100.0}},
}


def test_utilization_arithmetic():
    u = utilization(5.0, 50.0, DEVICE_JSON, "bf16")
    assert u == {
        "compute_util": 0.25,
        "bw_util": 0.5,
        "compute_util_datasheet": 0.05,
        "bw_util_datasheet": 0.25,
    }
    assert utilization(4.0, None, DEVICE_JSON, "fp32")["compute_util_datasheet"] == 0.1
    # fp32 under TF32 precision compares with the TF32 column
    tf32 = {**DEVICE_JSON, "float32_matmul_precision": "high"}
    assert utilization(4.0, None, tf32, "fp32")["compute_util_datasheet"] == 0.05
    assert datasheet_key("fp32", "high") == "tf32" and datasheet_key("bf16", "high") == "bf16"


def test_utilization_missing_values_are_none():
    no_sheet = {**DEVICE_JSON, "datasheet": None}
    u = utilization(5.0, 50.0, no_sheet, "fp16")  # fp16 not calibrated either
    assert u == {
        "compute_util": None,
        "bw_util": 0.5,
        "compute_util_datasheet": None,
        "bw_util_datasheet": None,
    }
    assert utilization(None, None, DEVICE_JSON, "bf16") == dict.fromkeys(u)
