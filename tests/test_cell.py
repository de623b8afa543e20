"""One cell outside the workflow: every status a cell can end in, and what each records."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ssmbench import numerics
from ssmbench.cell import CellSpec, run_cell
from ssmbench.matrix import Cell, Size, Timing
from ssmbench.process import is_oom
from ssmbench.verify.run import run_verify
from tests.conftest import set_up_and_one_call_s

SIZE = Size(d_model=32, n_layers=1, n_heads=2, head_dim=16, expand=2, d_conv=4, chunk=16)
TIMING = Timing(warmup=1, min_samples=3, max_samples=3, min_time_s=0.0, max_time_s=5.0)


def spec(
    model="mamba",
    backend="torch",
    seq_len=48,
    device="cpu",
    d_state=4,
    phase="prefill",
    timing=TIMING,
    dtype="fp32",
) -> CellSpec:
    cell = Cell(model, backend, phase, 1, seq_len, d_state, dtype)
    return CellSpec("t", cell, device, SIZE, timing, seed=0)


def test_ok_cell_has_samples_counts_and_measured_sizes():
    verify = run_verify("mamba", "torch", "cpu", ["fp32"])
    assert verify["status"] == "passed" and verify["checks"]
    r = run_cell(spec(), verify=verify, threads=1)
    assert r.status == "ok", r.reason
    assert r.n_samples == 3 == len(r.samples_ms) and r.time_ms_p95 >= r.time_ms_median
    # the work is counts.py's analytic count, the rate that work over the samples' median
    # (recomputed here with NumPy); measured weights and cache equal its analytic sizes
    from ssmbench import counts

    c = counts.counts("mamba", "prefill", SIZE, 1, 48, 4, "fp32")
    median_s = float(np.median(r.samples_ms)) / 1e3
    assert r.tokens == 48 and (r.flop, r.bytes) == (c.flop, c.bytes)
    assert r.intensity == pytest.approx(c.flop / c.bytes)
    assert r.tflops == pytest.approx(c.flop / median_s / 1e12)
    assert r.weights_bytes == c.weights_bytes and r.cache_bytes == c.cache_bytes
    assert r.verify["status"] == "passed" and r.threads == 1
    assert re.match(r"glibc [\d.]+, freed memory kept", r.host_allocator)  # the default: retain
    # the memory split adds up, measured from the allocator's events
    assert r.memory_method == "cpu_profiler_memory_events"
    assert r.peak_bytes == r.weights_bytes + r.cache_bytes + r.activations_bytes
    assert r.activations_bytes > 48 * SIZE.d_model * 4  # at least the output y
    assert r.spread is not None and r.spread >= 0
    # energy: RAPL where a package zone's counter is readable here, else empty saying why
    if readable_rapl_zones():
        assert r.energy_method == "rapl"
    else:
        assert r.energy_j is None and r.energy_method == "none" and r.energy_reason


def readable_rapl_zones() -> list[Path]:
    """The RAPL package zones whose counter this process can read (judged here, not by
    ssmbench.measure.energy)."""
    zones = []
    for zone in Path("/sys/class/powercap").glob("intel-rapl:*"):
        try:
            if (zone / "name").read_text().startswith("package"):
                int((zone / "energy_uj").read_text())
                zones.append(zone)
        except (OSError, ValueError):
            continue
    return zones


def rates(r) -> tuple[float, float]:
    """(TFLOP/s, GB/s) of a record's analytic work over its samples' median, computed here."""
    median_s = float(np.median(r.samples_ms)) / 1e3
    return r.flop / median_s / 1e12, r.bytes / median_s / 1e9


MODELS = ["attention", "mamba", "mamba2", "deltanet", "hybrid"]


@pytest.mark.parametrize("model", MODELS)
def test_decode_cell_steps_from_a_cache_of_t_tokens(model):
    from ssmbench import counts

    d_state = 0 if model in ("attention", "deltanet") else 4
    r = run_cell(spec(model=model, phase="decode", d_state=d_state), threads=1)
    assert r.status == "ok", r.reason
    assert r.tokens == 1 and r.n_samples == 3
    c = counts.counts(model, "decode", SIZE, 1, 48, d_state, "fp32")
    # the cache going in is the one a prefill of 48 tokens returns, byte for byte, where
    # attention's is a buffer of 49 (the new token is written in place) with its position
    positions = 8 * sum(SIZE.layer_kind(i) == "A" for i in range(SIZE.n_layers))
    positions = SIZE.n_layers * 8 if model == "attention" else positions if model == "hybrid" else 0
    assert r.cache_bytes == c.cache_bytes + positions
    assert r.kv_cache == ("in-place" if model in ("attention", "hybrid") else "")
    assert r.peak_bytes == r.weights_bytes + r.cache_bytes + r.activations_bytes


@pytest.mark.parametrize("model", ["attention", "mamba2"])
def test_train_cell_runs_forward_and_backward(model):
    d_state = 0 if model == "attention" else 4
    r = run_cell(spec(model=model, phase="train", d_state=d_state), threads=1)
    assert r.status == "ok", r.reason
    assert r.tokens == 48 and r.cache_bytes == 0
    # a training step allocates every parameter's gradient on top of the activations
    assert r.activations_bytes >= r.weights_bytes
    prefill = run_cell(spec(model=model, d_state=d_state), threads=1)
    assert r.time_ms_median > prefill.time_ms_median


def test_compile_decode_is_unavailable_with_its_reason():
    r = run_cell(spec(model="mamba2", backend="compile", phase="decode"), threads=1)
    assert r.status == "unavailable" and "compile has no decode step" in r.reason


def test_utilization_against_the_calibrated_ceilings():
    device_info = {
        "ceilings": {"tflops": {"fp32": 0.5}, "bw_gbps": 20.0},
        "datasheet": {"tflops": {"fp32": 2.0}, "memory_gbps": 80.0},
        "float32_matmul_precision": "highest",
    }
    r = run_cell(spec(), threads=1, device_records=[device_info])
    assert r.status == "ok", r.reason
    assert r.ceiling_tflops == 0.5 and r.ceiling_bw_gbps == 20.0
    tflops, gbps = rates(r)
    assert r.compute_util == pytest.approx(tflops / 0.5)
    assert r.bw_util == pytest.approx(gbps / 20.0)
    assert r.compute_util_datasheet == pytest.approx(tflops / 2.0)
    assert r.bw_util_datasheet == pytest.approx(gbps / 80.0)


def test_a_cell_is_divided_by_its_own_devices_ceilings_only():
    """A CPU cell among a run's calibrations takes the one that names no GPU, whatever
    the order; a GPU's ceilings alone are not its own, so it gets no utilization."""
    cpu = {"gpu": None, "ceilings": {"tflops": {"fp32": 0.5}, "bw_gbps": 20.0}}
    gpu = {
        "gpu": {"index": 0, "uuid": "GPU-1", "pci_bus_id": "0000:18:00.0", "name": "Fake"},
        "ceilings": {"tflops": {"fp32": 50.0}, "bw_gbps": 2000.0},
    }
    r = run_cell(spec(), threads=1, device_records=[gpu, cpu])
    assert r.status == "ok", r.reason
    assert (r.ceiling_tflops, r.ceiling_bw_gbps) == (0.5, 20.0)
    r = run_cell(spec(), threads=1, device_records=[gpu])
    assert r.status == "ok", r.reason
    assert r.ceiling_tflops is None and r.compute_util is None and r.bw_util is None


@pytest.mark.parametrize(
    "model, backend, compute",
    [
        ("mamba2", "torch", "fp32"),
        ("attention", "torch", "bf16"),
        ("mamba2", "torch-mixed", "bf16"),
    ],
    ids=str,
)
def test_utilization_divides_by_the_ceiling_of_the_compute_dtype(model, backend, compute):
    """A bf16 cell whose operator widens to fp32 (Mamba-2's torch form) is measured against
    the fp32 ceilings; one whose operator runs in bf16 (attention's SDPA, Mamba-2's
    torch-mixed form) against bf16's."""
    device_info = {
        "ceilings": {"tflops": {"fp32": 0.5, "bf16": 4.0}, "bw_gbps": 20.0},
        "datasheet": {"tflops": {"fp32": 2.0, "bf16": 16.0}, "memory_gbps": 80.0},
        "float32_matmul_precision": "highest",
    }
    d_state = 0 if model == "attention" else 4
    cell = spec(model=model, backend=backend, d_state=d_state, dtype="bf16")
    r = run_cell(cell, threads=1, device_records=[device_info])
    assert r.status == "ok", r.reason
    assert r.dtype == "bf16" and r.compute_dtype == compute
    ceiling = device_info["ceilings"]["tflops"][compute]
    assert r.ceiling_tflops == ceiling
    tflops, _ = rates(r)
    assert r.compute_util == pytest.approx(tflops / ceiling)
    datasheet = device_info["datasheet"]["tflops"][compute]
    assert r.compute_util_datasheet == pytest.approx(tflops / datasheet)


@pytest.mark.parametrize("llc_bytes, resident", [(1 << 40, True), (1, False), (None, None)])
def test_a_cell_that_fits_in_the_last_level_cache_is_flagged(llc_bytes, resident):
    device_info = {"ceilings": {"tflops": {"fp32": 0.5}, "bw_gbps": 20.0}, "llc_bytes": llc_bytes}
    r = run_cell(spec(), threads=1, device_records=[device_info])
    assert r.status == "ok", r.reason
    assert r.cache_resident is resident and r.llc_bytes == llc_bytes
    if resident is not None:  # the flag compares the cell's minimum bytes with the cache
        assert (r.bytes <= llc_bytes) is resident


def test_last_level_cache_sizes_are_read_from_sysfs_units():
    from ssmbench.measure.ceilings import _sysfs_size, last_level_cache_bytes

    assert _sysfs_size("32768K\n") == 32 << 20 and _sysfs_size("2M") == 2 << 20
    assert _sysfs_size("512") == 512
    llc = last_level_cache_bytes("cpu")
    sysfs = Path("/sys/devices/system/cpu/cpu0/cache")
    assert (llc is None) == (not sysfs.is_dir()) and (llc is None or llc >= 1 << 20)


def test_a_cell_over_its_time_budget_is_a_timeout_with_its_samples():
    """The budget ends sampling between calls: the samples taken are kept.  The budget is
    twice what the set-up and one call took here just before, plus a second (a fixed
    1.5 s once ran out before the first sample on a loaded CI machine), so sampling starts
    inside it on any machine; a million calls of a Python loop over 48 tokens outlast it."""
    cell_spec = spec(model="mamba2", backend="naive")
    budget_s = round(2 * set_up_and_one_call_s(cell_spec) + 1.0, 1)
    timing = Timing(
        warmup=0,
        min_samples=1_000_000,
        max_samples=1_000_000,
        min_time_s=0.0,
        max_time_s=3600.0,
        timeout_s=budget_s,
    )
    r = run_cell(spec(model="mamba2", backend="naive", timing=timing), threads=1)
    assert r.status == "timeout", r.reason
    assert 0 < r.n_samples == len(r.samples_ms) < 1_000_000 and r.time_ms_median is None
    assert f"timeout_s={budget_s:g} s ran out after" in r.reason
    assert "min_samples=1000000" in r.reason


def test_a_timeout_interrupts_a_long_python_loop():
    """The deadline alarm stops a naive loop over time in the middle of a call."""
    import time

    timing = Timing(
        warmup=0, min_samples=1, max_samples=1, min_time_s=0.0, max_time_s=60.0, timeout_s=0.3
    )
    start = time.monotonic()
    r = run_cell(spec(model="mamba", backend="naive", seq_len=200_000, timing=timing), threads=1)
    assert r.status == "timeout" and r.n_samples == 0, r.reason
    assert time.monotonic() - start < 10  # the whole loop would take ~15 s


def test_profile_cell_buckets_and_writes_a_trace(tmp_path):
    import gzip

    from ssmbench.cell import profile_cell
    from ssmbench.measure.profile import BUCKETS

    trace = tmp_path / "t.trace.json.gz"
    rows = profile_cell(spec(model="attention", d_state=0), trace_path=str(trace), threads=1)
    assert [r["bucket"] for r in rows] == list(BUCKETS)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    by = {r["bucket"]: r for r in rows}
    assert by["gemm"]["time_ms"] > 0 and by["attention"]["time_ms"] > 0
    assert {r["model"] for r in rows} == {"attention"} and rows[0]["time_basis"] == "cpu_self"
    assert "traceEvents" in json.loads(gzip.decompress(trace.read_bytes()))
    # an SSM's chunked operator is one scope: its matmuls and pointwise ops count as ssm_scan
    rows = profile_cell(spec(model="mamba2"), threads=1)
    by = {r["bucket"]: r for r in rows}
    assert by["ssm_scan"]["share"] > 0.1 and by["gemm"]["share"] > 0  # in_proj, out_proj


def test_failed_verification_is_never_timed_and_says_by_how_much(monkeypatch):
    monkeypatch.setitem(numerics.TOLERANCES, "fp32", (0.0, 0.0))
    verify = run_verify("mamba", "naive", "cpu", ["fp32"])
    assert verify["status"] == "failed" and not verify["passed"]
    r = run_cell(spec(backend="naive"), verify=verify)
    assert r.status == "failed" and r.n_samples == 0 and r.time_ms_median is None
    assert "verification failed for mamba/naive" in r.reason
    assert "max_abs_err=" in r.reason and "atol=0e+00" in r.reason


def test_missing_device_is_unavailable_with_its_reason():
    verify = run_verify("attention", "torch", "cuda", ["fp32"])
    assert verify["status"] == "unavailable"
    r = run_cell(spec(model="attention", device="cuda", d_state=0), verify=verify)
    assert r.status == "unavailable" and "torch.cuda.is_available() is False" in r.reason
    r = run_cell(spec(model="attention", device="cuda", d_state=0), verify=None)
    assert r.status == "unavailable"


def test_a_crash_becomes_a_failed_record(monkeypatch):
    import ssmbench.models

    def broken(*args, **kwargs):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(ssmbench.models, "build_model", broken)
    r = run_cell(spec())
    assert r.status == "failed" and r.reason == "RuntimeError: kernel exploded"


@pytest.mark.parametrize(
    "error, oom",
    [
        (MemoryError(), True),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 9 GB"), True),
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
        (RuntimeError("shape mismatch"), False),
        (ValueError("out of memory"), False),
    ],
    ids=["MemoryError", "cpu-allocator", "cuda-message", "other-runtime", "not-runtime"],
)
def test_oom_classification(error, oom):
    assert is_oom(error) is oom


@pytest.mark.slow
def test_a_cell_over_the_configured_memory_cap_is_oom(tmp_path):
    """`--mem-limit-gb` (the preset's cpu_mem_limit_gb in the workflow) caps the cell's
    process; attention scores of 2 x 32768^2 floats (8 GiB) cannot fit under 5 GiB."""
    cmd = [sys.executable, "-m", "ssmbench", "cell", "--preset", "ci", "--model", "attention"]
    cmd += ["--backend", "naive", "--seq-len", "32768", "--threads", "1", "--no-verify"]
    out = subprocess.run(cmd + ["--mem-limit-gb", "5"], capture_output=True, text=True, timeout=300)
    record = json.loads(out.stdout)
    assert out.returncode == 1 and record["status"] == "oom", record["reason"]
    assert "allocate" in record["reason"]


@pytest.mark.slow
def test_real_allocation_failure_is_an_oom_record(tmp_path):
    """A cell whose attention scores cannot fit under an address-space cap ends as oom."""
    code = """
import resource, json
from ssmbench.cell import CellSpec, run_cell
from ssmbench.config import Cell, Size, Timing
import torch  # load the libraries before the cap
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
size = Size(d_model=32, n_layers=1, n_heads=8, head_dim=4, expand=2, d_conv=4, chunk=16)
spec = CellSpec("t", Cell("attention", "naive", "prefill", 1, 32768, 0, "fp32"), "cpu",
                size, Timing(0, 1, 1, 0.0, 5.0))
print(json.dumps(run_cell(spec, threads=1).to_dict()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout.strip().splitlines()[-1])
    assert record["status"] == "oom", record["reason"]


@pytest.mark.slow
def test_compile_backend_verifies_and_measures():
    verify = run_verify("attention", "compile", "cpu", ["fp32"])
    assert verify["status"] == "passed", verify["reason"]
    r = run_cell(spec(model="attention", backend="compile", d_state=0), verify=verify, threads=1)
    assert r.status == "ok", r.reason
    assert r.n_samples == 3
    # a dispatch mode would count the eager code Dynamo falls back to: not counted
    assert r.n_ops is None and r.n_ops_method.startswith("not counted: under a TorchDispatch")


def test_compile_that_cannot_build_is_unavailable(monkeypatch):
    import torch

    from ssmbench import ops
    from ssmbench.models import common

    def no_compiler(fn, *args, **kwargs):
        def fail(*a, **k):
            raise RuntimeError("InvalidCxxCompiler: no working C++ compiler found")

        return fail

    monkeypatch.setattr(torch, "compile", no_compiler)
    monkeypatch.setattr(common, "_COMPILED", {})
    q = torch.randn(1, 5, 2, 4)
    with pytest.raises(common.BackendUnavailable, match="InvalidCxxCompiler"):
        ops.attention(q, q, q, backend="compile")
    verify = run_verify("attention", "compile", "cpu", ["fp32"])
    assert verify["status"] == "unavailable" and "torch.compile of" in verify["reason"]
    r = run_cell(spec(model="attention", backend="compile", d_state=0), verify=verify)
    assert r.status == "unavailable" and "InvalidCxxCompiler" in r.reason
    r = run_cell(spec(model="attention", backend="compile", d_state=0), verify=None)
    assert r.status == "unavailable" and "InvalidCxxCompiler" in r.reason


def test_graph_backends_need_cuda_and_the_decode_phase():
    # a graph backend is verified as its base: the eager step it replays
    verify = run_verify("mamba2", "torch-graph", "cpu", ["fp32"])
    assert verify["status"] == "passed" and verify["backend"] == "torch"
    assert "torch-graph replays torch's decode step" in verify["note"]
    # the cell says why it cannot run: CUDA graphs need a CUDA device, whatever verify said
    r = run_cell(spec(model="mamba2", backend="torch-graph", phase="decode"), verify=verify)
    assert r.status == "unavailable" and r.reason == (
        "torch-graph: CUDA graphs need a CUDA device (this run's device is cpu)"
    )
    r = run_cell(spec(model="mamba2", backend="torch-graph", phase="decode"), threads=1)
    assert r.status == "unavailable" and "CUDA graphs need a CUDA device" in r.reason


def test_graph_backends_time_the_decode_step_only(monkeypatch):
    from ssmbench.models import graphs

    monkeypatch.setattr(graphs, "graph_unavailable", lambda backend, device: "")
    r = run_cell(spec(model="mamba2", backend="fused-graph", phase="train"), threads=1)
    assert r.status == "unavailable" and "times the decode step only, not train" in r.reason


class FakeCuda:
    """The few names of torch.cuda that graph_step uses: streams and synchronize do
    nothing, the capture runs its body once eagerly, replays count, and the allocator's
    counters grow by POOL_BYTES across the capture."""

    POOL_BYTES = 3 * 2**20

    def __init__(self):
        self.allocated = self.reserved = 1000
        self.replays = 0
        fake = self

        class Graph:
            def replay(self):
                fake.replays += 1

        class Capture:
            def __init__(self, graph):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                fake.reserved += fake.POOL_BYTES
                fake.allocated += fake.POOL_BYTES // 3

        self.CUDAGraph, self.graph = Graph, Capture

    class Stream:
        def wait_stream(self, other):
            pass

    def current_stream(self):
        return self.Stream()

    def stream(self, s):
        import contextlib

        return contextlib.nullcontext()

    def synchronize(self):
        pass

    def memory_allocated(self):
        return self.allocated

    def memory_reserved(self):
        return self.reserved


def test_graph_replay_holds_its_static_buffers_and_measures_its_pool():
    import gc
    import weakref

    import torch

    from ssmbench.cell import _model_and_input
    from ssmbench.models.graphs import GraphReplay, graph_step

    s = spec(model="mamba2", backend="torch-graph", phase="decode")
    model, x = _model_and_input(s)
    with torch.inference_mode():
        _, cache = model(x)
    x_t = x[:, -1].clone()
    cuda = FakeCuda()
    replay = graph_step(model, x_t, cache, warmup=1, cuda=cuda)
    assert isinstance(replay, GraphReplay) and replay.pool_bytes == FakeCuda.POOL_BYTES
    alive = [weakref.ref(t) for t in (x_t, cache[0][0], replay.outputs[0])]
    del x_t, cache, model
    gc.collect()
    assert all(ref() is not None for ref in alive)  # held by the replay, not a closure
    assert replay() is replay.outputs and cuda.replays == 2  # the check's replay, then ours

    class Drifting:  # a step whose captured output differs from the eager one
        calls = 0

        def step(self, x_t, cache):
            Drifting.calls += 1
            return torch.full((1, 4), float(Drifting.calls)), cache

    with pytest.raises(RuntimeError, match="graph replay differs from the eager step"):
        graph_step(Drifting(), torch.zeros(1, 4), None, warmup=1, cuda=FakeCuda())


def test_a_graph_cells_pool_counts_in_its_peak(monkeypatch):
    from ssmbench.models import graphs

    real = graphs.graph_step
    monkeypatch.setattr(graphs, "graph_unavailable", lambda backend, device: "")
    monkeypatch.setattr(
        graphs, "graph_step", lambda model, x_t, cache: real(model, x_t, cache, cuda=FakeCuda())
    )
    verify = run_verify("mamba2", "torch", "cpu", ["fp32"])
    r = run_cell(spec(model="mamba2", backend="torch-graph", phase="decode"), verify, threads=1)
    assert r.status == "ok", r.reason
    assert r.graph_pool_bytes == FakeCuda.POOL_BYTES
    assert r.activations_bytes >= r.graph_pool_bytes  # a fake replay allocates nothing
    assert r.peak_bytes == r.weights_bytes + r.cache_bytes + r.activations_bytes
    assert r.verify["backend"] == "torch"


@pytest.mark.parametrize(
    "backend, verify_backend, status, reason",
    [
        ("fused-graph", "fused", "passed", None),
        ("fused-graph", "fused-graph", "passed", None),
        ("fused-graph", "torch", "passed", "the verify record is for mamba/torch"),
        ("fused", "fused", "unavailable", "verification unavailable for mamba/fused (prefill)"),
    ],
)
def test_a_cell_takes_the_verdict_of_its_phase(backend, verify_backend, status, reason):
    from ssmbench.cell import _verify_unusable

    verify = {
        "model": "mamba",
        "backend": verify_backend,
        "status": "unavailable",
        "reason": "prefill, train unavailable: selective_scan_cuda not built",
        "phases": {
            "prefill": {"status": "unavailable", "reason": "selective_scan_cuda not built"},
            "decode": {"status": status, "reason": ""},
            "train": {"status": "unavailable", "reason": "selective_scan_cuda not built"},
        },
    }
    phase = "prefill" if backend == "fused" else "decode"
    cell = Cell("mamba", backend, phase, 1, 48, 4, "bf16")
    found = _verify_unusable(cell, verify)
    if reason is None:
        assert found is None
    else:
        assert reason in found[1]
    # an older record without phases: its one verdict holds for every phase
    older = {k: v for k, v in verify.items() if k != "phases"}
    if backend == "fused-graph" and verify_backend != "torch":
        assert _verify_unusable(cell, older)[0] == "unavailable"


def test_compile_past_the_cells_budget_is_a_timeout(monkeypatch):
    """A first call of torch.compile that runs past timeout_s is timeout, not unavailable,
    also when Dynamo wraps the alarm's exception in an error of its own."""
    import time

    import torch

    from ssmbench.models import common

    def slow_compiler(fn, *args, **kwargs):
        def compiling(*a, **k):
            try:
                time.sleep(30)
            except Exception as e:
                raise RuntimeError("BackendCompilerFailed: inductor raised") from e

        return compiling

    monkeypatch.setattr(torch, "compile", slow_compiler)
    monkeypatch.setattr(common, "_COMPILED", {})
    timing = Timing(1, 1, 1, min_time_s=0.0, max_time_s=5.0, timeout_s=0.5)
    start = time.monotonic()
    r = run_cell(spec(model="attention", backend="compile", d_state=0, timing=timing))
    assert r.status == "timeout", r.reason
    assert "timeout_s=0.5 s ran out" in r.reason and time.monotonic() - start < 10


def test_records_say_whether_the_run_locked_the_clocks(monkeypatch):
    monkeypatch.setenv("SSMBENCH_CLOCKS_LOCKED", "1")
    assert run_cell(spec(), threads=1).clocks_locked is True
    monkeypatch.delenv("SSMBENCH_CLOCKS_LOCKED")
    assert run_cell(spec(), threads=1).clocks_locked is False


def test_a_profile_that_cannot_run_writes_a_status_row_and_an_empty_trace(tmp_path):
    import gzip

    from ssmbench.cell import profile_or_status
    from ssmbench.tables import read_ops, write_ops

    trace = tmp_path / "t.trace.json.gz"
    rows = profile_or_status(spec(model="s4d", backend="fused"), trace_path=str(trace))
    assert len(rows) == 1 and rows[0]["status"] == "unavailable"
    assert "no fused kernel" in rows[0]["reason"] and rows[0]["model"] == "s4d"
    assert json.loads(gzip.decompress(trace.read_bytes())) == {"traceEvents": []}
    write_ops(rows, tmp_path / "ops.csv")
    ops = read_ops(tmp_path / "ops.csv")
    assert list(ops.status) == ["unavailable"] and ops.bucket.isna().all()
    # a failed verification is a failed row; a graph backend off CUDA is unavailable
    failed = {"model": "mamba", "backend": "torch", "status": "failed", "reason": "y off"}
    (row,) = profile_or_status(spec(), verify=failed, trace_path=str(trace))
    assert row["status"] == "failed" and "verification failed for mamba/torch" in row["reason"]
    (row,) = profile_or_status(spec(backend="torch-graph", phase="decode"))
    assert row["status"] == "unavailable" and "CUDA graphs" in row["reason"]
    # a profile that runs has status ok on every row
    rows = profile_or_status(spec(model="attention", d_state=0), threads=1, iters=1)
    assert {r["status"] for r in rows} == {"ok"} and len(rows) > 1


def test_a_family_without_a_fused_kernel_is_unavailable():
    verify = run_verify("s4d", "fused", "cpu", ["fp32"])
    assert verify["status"] == "unavailable" and "fused" in verify["reason"]
    r = run_cell(spec(model="s4d", backend="fused"), verify=verify)
    assert r.status == "unavailable" and r.n_samples == 0


FAMILIES_ALL = ["attention", "s4d", "mamba", "mamba2", "mamba3", "deltanet", "hybrid"]


def _layout(value) -> list:
    """Shape, dtype, device and strides of every tensor in a cache, in order (the stride
    of a dimension of size 1 means nothing, and a prefill's views carry its length there)."""
    import torch

    from ssmbench.models.attention import valid_cache

    if isinstance(value, torch.Tensor):
        strides = tuple(st for st, n in zip(value.stride(), value.shape, strict=True) if n > 1)
        return [(tuple(value.shape), value.dtype, value.device, strides)]
    if isinstance(value, (tuple, list)):
        return [part for v in valid_cache(value) for part in _layout(v)]
    return [value]


@pytest.mark.parametrize("model", FAMILIES_ALL)
def test_a_random_decode_cache_has_the_layout_of_a_prefilled_one(model):
    """A decode cell's random cache: the same tensors as a prefill of T tokens leaves
    (shapes, dtypes, strides), other values; what a step's time depends on is the same."""
    import torch

    from ssmbench.cell import _model_and_input, phase_work

    d_state = 0 if model in ("attention", "deltanet") else 4
    s = spec(model=model, phase="decode", seq_len=40, d_state=d_state)
    model_, x = _model_and_input(s)
    prefilled = phase_work(s.cell, model_, x, "prefill")
    random = phase_work(s.cell, model_, x, "random")
    assert _layout(random.cache) == _layout(prefilled.cache)
    with torch.inference_mode():
        y, _ = random.fn()
    assert torch.isfinite(y).all()
    first = [t for t in _flat(random.cache) if t.is_floating_point() or t.is_complex()][0]
    assert not torch.equal(first, _flat(prefilled.cache)[0])


def _flat(value) -> list:
    import torch

    from ssmbench.models.attention import valid_cache

    if isinstance(value, torch.Tensor):
        return [value]
    return (
        [t for v in valid_cache(value) for t in _flat(v)]
        if isinstance(value, (tuple, list))
        else []
    )


def test_a_random_cache_cell_says_so_and_holds_what_a_prefilled_one_holds():
    prefilled = run_cell(spec(model="attention", phase="decode", d_state=0), threads=1)
    s = spec(model="attention", phase="decode", d_state=0)
    random = run_cell(CellSpec(**{**vars(s), "cache_source": "random"}), threads=1)
    assert random.status == prefilled.status == "ok", random.reason
    assert (random.cache_source, prefilled.cache_source) == ("random", "prefill")
    assert random.cache_bytes == prefilled.cache_bytes
    prefill = run_cell(spec(model="attention"), threads=1)
    assert prefill.cache_source == ""  # only decode cells have one


@pytest.mark.slow
@pytest.mark.parametrize("model", ["attention", "mamba2"])
def test_a_random_and_a_prefilled_cache_time_alike(model):
    """Interleaved in one process, the decode step from either cache takes the same time
    within the noise of this machine (medians within a factor of 1.5; the values of a
    cache do not change the work, unless they were denormal or NaN, which this would show)."""
    import statistics
    import time

    import torch

    from ssmbench.cell import _model_and_input, phase_work

    d_state = 0 if model == "attention" else 16
    size = Size(d_model=256, n_layers=2, n_heads=4, head_dim=64, expand=2, d_conv=4, chunk=64)
    cell = Cell(model, "torch", "decode", 1, 4096, d_state, "fp32")
    s = CellSpec("t", cell, "cpu", size, TIMING, seed=0)
    model_, x = _model_and_input(s)
    works = {src: phase_work(cell, model_, x, src) for src in ("prefill", "random")}
    samples = {src: [] for src in works}
    with torch.inference_mode():
        for _ in range(25):
            for src, work in works.items():
                work.fn()
                start = time.perf_counter()
                work.fn()
                samples[src].append(time.perf_counter() - start)
    ratio = statistics.median(samples["random"]) / statistics.median(samples["prefill"])
    assert 1 / 1.5 < ratio < 1.5, samples


def test_a_naive_prefill_counts_its_loop_per_token_and_a_decode_step_does_not_grow():
    """n_ops of mamba2's naive prefill (one layer) grows with T by the loop body of
    ssd_naive per token: ``x_t[..., None] * B_t[:, :, None, :]`` (unsqueeze x2, mul),
    ``decay_t[..., None, None] * state + update`` (unsqueeze x2, mul, add) and the einsum
    ``bhpn,bhn->bhp`` (counted alone at the layer's shapes: h = 64 / 16 heads of p = 16,
    n = 4); unbind and stack are one op whatever T.  A decode step has no loop over T."""
    import torch

    from ssmbench.measure.opcount import count_aten_ops

    state, C_t = torch.randn(1, 4, 16, 4), torch.randn(1, 4, 4)
    einsum = count_aten_ops(lambda: torch.einsum("bhpn,bhn->bhp", state, C_t)).n_ops
    per_token = 3 + 4 + einsum
    short, long = (run_cell(spec(model="mamba2", backend="naive", seq_len=t)) for t in (32, 48))
    assert short.status == long.status == "ok", (short.reason, long.reason)
    assert short.n_ops_kind == "aten_ops" and "TorchDispatchMode" in short.n_ops_method
    assert long.n_ops - short.n_ops == (48 - 32) * per_token
    steps = [run_cell(spec(model="mamba2", phase="decode", seq_len=t)) for t in (32, 48)]
    assert steps[0].n_ops == steps[1].n_ops > 0


def test_ops_are_counted_on_one_call_after_the_timed_ones(monkeypatch):
    import ssmbench.cell as cell_mod
    from ssmbench.measure import opcount

    calls = []
    real_work, real_count = cell_mod.phase_work, opcount.count_ops

    def logged_work(*args, **kwargs):
        work = real_work(*args, **kwargs)
        fn = work.fn

        def call():
            calls.append("call")
            return fn()

        work.fn = call
        return work

    def logged_count(fn, device, **kinds):
        calls.append("count")
        return real_count(fn, device, **kinds)

    monkeypatch.setattr(cell_mod, "phase_work", logged_work)
    monkeypatch.setattr(opcount, "count_ops", logged_count)
    r = run_cell(spec(model="mamba2", phase="decode"), threads=1)
    assert r.status == "ok", r.reason
    # the warm-up, the samples and the memory's call come first; then one counted call
    assert calls.count("count") == 1 and calls[-2:] == ["count", "call"]
    assert calls.index("count") >= r.warmup + r.n_samples + 1
    assert r.n_ops > 0 and r.n_ops_kind == "aten_ops"
