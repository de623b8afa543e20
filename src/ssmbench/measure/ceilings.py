"""Device ceilings for ``results/<run>/device.json``: measured copy bandwidth, GEMM rate
per dtype and the cost of one dispatch, with the vendor's datasheet peaks beside them
(docs/ARCHITECTURE.md, "Measurement").

Utilization in the cells table is achieved / *measured* ceiling: what this device, driver and
torch build reach on the simplest kernel that saturates each resource.  The datasheet peak is
kept beside it (``*_datasheet``) because it is what readers compare against, and because the
gap between the two (typically 80-95% for a GEMM, 85-92% for an HBM copy) is itself a result.

Method:

- bandwidth: ``dst.copy_(src)`` on one device, counted as bytes read plus bytes written,
  ``2 * nbytes / time``, the convention of STREAM's "Copy" kernel (McCalpin, "Memory Bandwidth
  and Machine Balance", IEEE TCCA newsletter 1995) and nvbench's declared global-memory bytes.
  Buffers are larger than any last-level cache (1 GiB on CUDA, 256 MiB on CPU).
- compute: a square ``torch.mm`` of size ``n``, ``2 n^3`` flop (one multiply and one add per
  inner-product term), in each dtype.  fp32 runs under torch's current float32 matmul
  precision, which the record keeps: "highest" (torch's default) is true FP32 and compares
  with the datasheet's non-tensor FP32 peak; "high"/"medium" allow TF32 and compare with TF32.
- dispatch: what one eager operator costs when its work is nothing, the floor under a cell
  made of many small ops (a decode step).  ``a + b`` on two 1-element float32 tensors, a
  new output each call, under ``torch.inference_mode`` as the prefill and decode cells run:
  the whole path of an ordinary eager op (Python binding, dispatcher, TensorIterator set-up,
  an output's allocation, a kernel over one element), which views skip part of and
  matmuls add to.  Called ``calls`` times back to back per sample, the host clock around
  them, the device synchronised once before and once at the end: per call = elapsed /
  calls (on a GPU, the cost of a launch, or of the kernel itself where the GPU is the
  slower of the two).  On a GPU also the same op captured ``kernels`` times in one CUDA
  graph: per kernel = one replay's elapsed / kernels, what a kernel costs once its launch
  is the graph's.  :func:`ssmbench.measure.opcount.count_ops` counts a cell's ops in the
  same units.
- timing: warm-up by count and by time (GPU clocks ramp up over tens of ms), then a fixed
  number of samples through :func:`ssmbench.measure.timing.measure` (CUDA events or
  ``perf_counter_ns``); the median is the ceiling, every sample is kept.

Datasheet peaks come from the device catalogue, ``config/devices.yaml``
(:mod:`ssmbench.catalogue`), each with its source: dense (no 2:4 structured sparsity); where
a datasheet prints only the with-sparsity figure, the entry says so and stores half of it.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ssmbench import catalogue
from ssmbench.gpulease import gpu_record
from ssmbench.matrix import Timing
from ssmbench.measure.timing import measure
from ssmbench.provenance import cpu_model, now

__all__ = [
    "calibrate",
    "datasheet_for",
    "datasheet_key",
    "dispatch_block",
    "dispatch_us",
    "measure_copy_bandwidth",
    "measure_dispatch",
    "measure_matmul_rate",
    "utilization",
]

# Sizes: honest ceilings on a GPU (buffers far past L2, GEMMs past the wave-quantisation
# regime), proportionate on a CPU, tiny for tests and the ci preset.
COPY_NBYTES = {"cuda": 1 << 30, "cpu": 256 << 20, "quick": 4 << 20}
GEMM_N = {"cuda": 8192, "cpu": 2048, "quick": 128}
# bf16/fp16 GEMMs on a CPU without AMX/AVX512-BF16 can be 10-100x slower than fp32.
GEMM_N_CPU_LOW_PRECISION = 1024
GEMM_N_QUICK_LOW_PRECISION = 64
REPEATS = {"cuda": 51, "cpu": 11, "quick": 3}  # odd: the median is one of the samples
WARMUP = {"cuda": 3, "cpu": 2, "quick": 1}
WARMUP_S = {"cuda": 1.0, "cpu": 0.2, "quick": 0.0}
# Dispatch: calls of the tiny op per eager sample (a sample lasts milliseconds, far above
# the clock's resolution), and the tiny kernels one CUDA graph holds
DISPATCH_CALLS = {"cuda": 10_000, "cpu": 10_000, "quick": 200}
GRAPH_KERNELS = {"cuda": 1_000, "cpu": 1_000, "quick": 50}
# the tiny op (the module's docstring says why this one)
DISPATCH_OP = "a + b on 1-element float32 tensors (a new output each call) under inference_mode"
# On a CPU a slow dtype keeps at least one sample but stops adding samples past this budget.
CPU_GEMM_BUDGET_S = 60.0

LOW_PRECISION = ("bf16", "fp16")
# "tf32" is fp32 storage with TF32 tensor-core math (CUDA only); the others are
# ssmbench.models.DTYPES names.
MATMUL_DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16")

# The datasheet's tflops keys, in the order device.json has always written them.
DATASHEET_DTYPES = ("fp32", "tf32", "bf16", "fp16")


def datasheet_for(device_name: str) -> dict | None:
    """The vendor's peaks for a CUDA device name, from the device catalogue
    (:func:`ssmbench.catalogue.match`, ``config/devices.yaml``), as device.json keeps them:
    ``{"name", "memory_gbps" (GB/s), "tflops" ({dtype: dense TFLOP/s or None}),
    "source"}``; None for a device the catalogue does not know (every CPU among them)."""
    entry = catalogue.match(device_name, kind="gpu")
    if entry is None:
        return None
    source = entry.sources.get("peak_TFLOPs", "")
    bandwidth_source = entry.sources.get("bandwidth_GBps", "")
    if bandwidth_source and bandwidth_source != source:
        source = f"{source}; {bandwidth_source}" if source else bandwidth_source
    return {
        "name": entry.name,
        "memory_gbps": entry.bandwidth_GBps,
        "tflops": {dtype: entry.peak_TFLOPs[dtype] for dtype in DATASHEET_DTYPES},
        "source": source,
    }


def datasheet_key(dtype: str, float32_matmul_precision: str = "highest") -> str:
    """The datasheet column a GEMM in ``dtype`` runs on: fp32 is TF32 once torch allows it."""
    if dtype == "fp32" and float32_matmul_precision != "highest":
        return "tf32"
    return dtype


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _samples_ms(
    fn: Callable[[], object],
    device: str,
    repeats: int,
    warmup: int,
    warmup_s: float,
    budget_s: float = float("inf"),
) -> list[float]:
    """Run ``fn`` at least ``warmup`` times and ``warmup_s`` seconds untimed, then time it
    ``repeats`` times, or fewer (at least one) once ``budget_s`` of sampling has passed."""
    begin = time.perf_counter()
    done = 0
    while done < warmup or time.perf_counter() - begin < warmup_s:
        fn()
        _sync(device)
        done += 1
    timing = Timing(
        warmup=0, min_samples=repeats, max_samples=repeats, min_time_s=0.0, max_time_s=budget_s
    )
    return measure(fn, timing, device).samples_ms


def _resolve(device: str, quick: bool, table: dict):
    return table["quick" if quick else ("cuda" if device == "cuda" else "cpu")]


def measure_copy_bandwidth(
    device: str,
    nbytes: int | None = None,
    repeats: int | None = None,
    *,
    quick: bool = False,
) -> dict:
    """Bandwidth of ``dst.copy_(src)`` for ``nbytes``-byte buffers on ``device``.

    Returns ``{"gbps": median GB/s, "samples_gbps": [...], "time_ms_median", "nbytes",
    "bytes_moved" (2 * nbytes), "repeats", "method"}``; GB/s is 1e9 bytes per second.
    """
    import torch

    nbytes = nbytes or _resolve(device, quick, COPY_NBYTES)
    repeats = repeats or _resolve(device, quick, REPEATS)
    n = max(nbytes // 4, 1)  # float32 elements: the plain vectorised copy path on every device
    nbytes = 4 * n
    src = torch.ones(n, dtype=torch.float32, device=device)  # touch every page before timing
    dst = torch.zeros(n, dtype=torch.float32, device=device)
    samples_ms = _samples_ms(
        lambda: dst.copy_(src),
        device,
        repeats,
        _resolve(device, quick, WARMUP),
        _resolve(device, quick, WARMUP_S),
    )
    moved = 2 * nbytes  # each byte read once and written once
    samples_gbps = [moved / (ms * 1e-3) / 1e9 for ms in samples_ms]
    timer = "CUDA events" if device == "cuda" else "perf_counter_ns"
    return {
        "gbps": statistics.median(samples_gbps),
        "samples_gbps": samples_gbps,
        "time_ms_median": statistics.median(samples_ms),
        "nbytes": nbytes,
        "bytes_moved": moved,
        "repeats": len(samples_ms),
        "method": f"dst.copy_(src), float32, read+write bytes / time, median of "
        f"{len(samples_ms)} samples after warm-up, {timer}",
    }


def measure_matmul_rate(
    device: str,
    dtype: str,
    n: int | None = None,
    repeats: int | None = None,
    *,
    quick: bool = False,
    seed: int = 0,
) -> dict:
    """Rate of a square ``n x n`` GEMM (``torch.mm`` into a preallocated output) in ``dtype``.

    Returns ``{"status": "ok" | "unavailable", "reason", "dtype", "tflops": median TFLOP/s or
    None, "samples_tflops": [...], "time_ms_median", "n", "flop" (2 n^3), "repeats",
    "float32_matmul_precision", "method"}``.  A dtype this device or build cannot multiply
    gives ``status: "unavailable"`` and the error as ``reason``; it never raises.
    """
    import torch

    from ssmbench.models import DTYPES

    precision = torch.get_float32_matmul_precision()
    record = {
        "status": "ok",
        "reason": "",
        "dtype": dtype,
        "tflops": None,
        "samples_tflops": [],
        "time_ms_median": None,
        "n": None,
        "flop": None,
        "repeats": 0,
        "float32_matmul_precision": "high" if dtype == "tf32" else precision,
        "method": "",
    }
    if dtype not in MATMUL_DTYPES:
        record.update(status="unavailable", reason=f"unknown dtype {dtype!r}")
        return record
    if dtype == "tf32" and device != "cuda":
        record.update(status="unavailable", reason="tf32 is a CUDA tensor-core mode")
        return record
    low = dtype in LOW_PRECISION
    if n is None:
        if quick:
            n = GEMM_N_QUICK_LOW_PRECISION if low else GEMM_N["quick"]
        elif device == "cpu" and (low or dtype == "fp64"):
            n = GEMM_N_CPU_LOW_PRECISION
        else:
            n = GEMM_N["cuda" if device == "cuda" else "cpu"]
    repeats = repeats or _resolve(device, quick, REPEATS)
    torch_dtype = DTYPES["fp32" if dtype == "tf32" else dtype]
    budget_s = CPU_GEMM_BUDGET_S if device == "cpu" else float("inf")
    try:
        generator = torch.Generator(device="cpu").manual_seed(seed)
        a, b = (torch.randn(n, n, generator=generator) for _ in range(2))
        a, b = (x.to(device=device, dtype=torch_dtype) for x in (a, b))
        c = torch.empty(n, n, device=device, dtype=torch_dtype)
        with _float32_precision("high" if dtype == "tf32" else precision):
            samples_ms = _samples_ms(
                lambda: torch.mm(a, b, out=c),
                device,
                repeats,
                _resolve(device, quick, WARMUP),
                _resolve(device, quick, WARMUP_S),
                budget_s,
            )
    except (RuntimeError, TypeError, NotImplementedError) as error:
        # e.g. "addmm_impl_cpu_" not implemented for 'Half' on older builds, or CUDA OOM
        record.update(status="unavailable", reason=f"{type(error).__name__}: {error}", n=n)
        return record
    flop = 2 * n**3  # one multiply and one add per term of each of the n^2 inner products
    samples_tflops = [flop / (ms * 1e-3) / 1e12 for ms in samples_ms]
    timer = "CUDA events" if device == "cuda" else "perf_counter_ns"
    record.update(
        tflops=statistics.median(samples_tflops),
        samples_tflops=samples_tflops,
        time_ms_median=statistics.median(samples_ms),
        n=n,
        flop=flop,
        repeats=len(samples_ms),
        method=f"torch.mm(a, b, out=c), {n}x{n} {dtype}, 2n^3 flop / time, median of "
        f"{len(samples_ms)} samples after warm-up, {timer}",
    )
    return record


@contextlib.contextmanager
def _float32_precision(precision: str) -> Iterator[None]:
    """Set torch's float32 matmul precision inside a ``with`` block, restore it after."""
    import torch

    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


def per_op_us(
    run: Callable[[], object],
    ops: int,
    sync: Callable[[], object],
    clock_ns: Callable[[], int] = time.perf_counter_ns,
) -> float:
    """Microseconds per op of one ``run()`` of ``ops`` ops: the host clock from before the
    first op (the device idle: ``sync()`` first) to after a ``sync()`` after the last."""
    sync()
    start_ns = clock_ns()
    run()
    sync()
    return (clock_ns() - start_ns) / 1e3 / ops


def back_to_back(op: Callable[[], object], calls: int) -> Callable[[], None]:
    """A run of ``calls`` calls of ``op`` in a plain loop (its own Python overhead, tens of
    nanoseconds a call, is part of every eager op's cost too)."""

    def run() -> None:
        for _ in range(calls):
            op()

    return run


def capture_graph(op: Callable[[], object], kernels: int, cuda) -> Callable[[], None]:
    """The replay of a CUDA graph holding ``kernels`` calls of ``op``, captured after one
    call on a side stream (lazy initialisation stays out of the capture, as PyTorch's
    CUDA-graph notes advise).  ``cuda`` is ``torch.cuda`` or a fake of its few names."""
    side = cuda.Stream()
    side.wait_stream(cuda.current_stream())
    with cuda.stream(side):
        op()
    cuda.current_stream().wait_stream(side)
    cuda.synchronize()
    graph = cuda.CUDAGraph()
    with cuda.graph(graph):
        for _ in range(kernels):
            op()
    cuda.synchronize()
    return graph.replay


def _median_and_range(samples: list[float]) -> tuple[float, list[float]]:
    return statistics.median(samples), [min(samples), max(samples)]


def dispatch_block(
    op: Callable[[], object],
    sync: Callable[[], object],
    calls: int,
    repeats: int,
    warmup: int,
    cuda=None,
    kernels: int = 0,
    clock_ns: Callable[[], int] = time.perf_counter_ns,
) -> dict:
    """The ``dispatch`` block of ``device.json`` from ``op`` (one tiny op or kernel) and
    ``sync`` (wait for the device): ``repeats`` samples of ``calls`` calls back to back
    after ``warmup`` untimed runs; with ``cuda`` (``torch.cuda``, or a fake of the names
    :func:`capture_graph` uses) also ``repeats`` replays of a graph of ``kernels`` calls.

    Keys: ``eager_us`` (median microseconds a call), ``eager_spread_us`` ([min, max] of
    the samples), ``samples_us``, ``calls_per_sample``, ``graph_us``,
    ``graph_spread_us``, ``graph_samples_us``, ``graph_kernels`` (None without
    ``cuda``), ``repeats`` and ``method``."""
    run = back_to_back(op, calls)
    for _ in range(warmup):
        run()
    samples = [per_op_us(run, calls, sync, clock_ns) for _ in range(repeats)]
    eager_us, eager_spread_us = _median_and_range(samples)
    method = (
        f"{DISPATCH_OP}, {calls} calls back to back per sample timed by the host clock with "
        "the device synchronised before and after, per call = elapsed / calls; median of "
        f"{repeats} samples after {warmup} untimed, spread = [min, max]"
    )
    graph_us = graph_spread_us = graph_samples = None
    if cuda is not None:
        replay = capture_graph(op, kernels, cuda)
        for _ in range(warmup):
            replay()
        graph_samples = [per_op_us(replay, kernels, sync, clock_ns) for _ in range(repeats)]
        graph_us, graph_spread_us = _median_and_range(graph_samples)
        method += (
            f"; graph: one replay of a CUDA graph of {kernels} such kernels a sample, per "
            "kernel = elapsed / kernels, same statistics"
        )
    return {
        "eager_us": eager_us,
        "eager_spread_us": eager_spread_us,
        "samples_us": samples,
        "calls_per_sample": calls,
        "graph_us": graph_us,
        "graph_spread_us": graph_spread_us,
        "graph_samples_us": graph_samples,
        "graph_kernels": kernels if cuda is not None else None,
        "repeats": repeats,
        "method": method,
    }


def measure_dispatch(
    device: str,
    calls: int | None = None,
    repeats: int | None = None,
    *,
    quick: bool = False,
) -> dict:
    """The cost of one eager dispatch on ``device`` (and on CUDA, of one kernel inside a
    CUDA-graph replay): :func:`dispatch_block` of :data:`DISPATCH_OP` at this device's
    sizes (:data:`DISPATCH_CALLS`, :data:`GRAPH_KERNELS`, :data:`REPEATS`)."""
    import torch

    calls = calls or _resolve(device, quick, DISPATCH_CALLS)
    a = torch.ones(1, dtype=torch.float32, device=device)
    b = torch.ones(1, dtype=torch.float32, device=device)
    with torch.inference_mode():
        return dispatch_block(
            lambda: a + b,
            lambda: _sync(device),
            calls,
            repeats or _resolve(device, quick, REPEATS),
            _resolve(device, quick, WARMUP),
            cuda=torch.cuda if device == "cuda" else None,
            kernels=_resolve(device, quick, GRAPH_KERNELS),
        )


def dispatch_us(device_record: dict, *, graph: bool = False) -> float | None:
    """The calibrated cost of one dispatch in microseconds from a ``device.json`` record:
    an eager op's or launch's (``eager_us``), or with ``graph`` a kernel's inside a
    CUDA-graph replay (``graph_us``, None on a CPU).  None for a record older than the
    dispatch block (the shipped runs), or one whose calibration did not run.  Torch-free."""
    block = device_record.get("dispatch") or {}
    return block.get("graph_us" if graph else "eager_us")


def _device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    return cpu_model()


def last_level_cache_bytes(device: str) -> int | None:
    """The device's last-level cache in bytes, or None where it cannot be read: a GPU's L2
    (``torch.cuda.get_device_properties``), a CPU's highest cache level of cpu0 in sysfs
    (``/sys/devices/system/cpu/cpu0/cache/index*/``, e.g. a shared L3)."""
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return None
        return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0)) or None
    best: tuple[int, int] | None = None
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            if (index / "type").read_text().strip() == "Instruction":
                continue
            size = _sysfs_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if best is None or level > best[0]:
            best = (level, size)
    return None if best is None else best[1]


def _sysfs_size(text: str) -> int:
    """sysfs's cache size ("32768K", "1M", "512") in bytes."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def calibrate(
    device: str,
    dtypes: list[str],
    quick: bool = False,
    threads: int | None = None,
    seed: int = 0,
) -> dict:
    """The content of ``results/<run>/device.json``.

    Keys: ``status`` ("ok" or "unavailable") and ``reason``; ``device``, ``device_name``,
    ``gpu`` (the physical GPU, :func:`ssmbench.gpulease.gpu_record`; None on a CPU),
    ``torch``, ``cuda``, ``threads``, ``float32_matmul_precision``, ``quick``; ``copy``
    (:func:`measure_copy_bandwidth`); ``matmul`` ({dtype: :func:`measure_matmul_rate`});
    ``dispatch`` (:func:`measure_dispatch`; :func:`dispatch_us` reads it);
    ``ceilings`` ({"bw_gbps", "tflops": {dtype: TFLOP/s or None}}), the numbers that
    :func:`utilization` divides by; ``datasheet`` (:func:`datasheet_for`: the catalogue's
    entry, or None) and ``datasheet_reason``; ``clocks`` (GPU SM clock and temperature
    before and after, CUDA only); ``started`` and ``ended`` (UTC ISO 8601).  On CPU the job
    takes ``threads`` threads (default: every core, as the bench jobs do) and restores the
    old count after.
    """
    import torch

    started = now()
    record: dict = {
        "status": "ok",
        "reason": "",
        "device": device,
        "device_name": None,
        "gpu": gpu_record(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "threads": None,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "quick": quick,
        "copy": None,
        "matmul": {},
        "dispatch": None,
        "ceilings": {"bw_gbps": None, "tflops": {}},
        "datasheet": None,
        "datasheet_reason": "",
        "clocks": None,
        "llc_bytes": None,  # the last-level cache (last_level_cache_bytes)
        "started": started,
        "ended": None,
    }
    if device == "cuda" and not torch.cuda.is_available():
        record.update(
            status="unavailable",
            reason="device cuda requested but torch.cuda.is_available() is False",
            ended=now(),
        )
        return record
    if device not in ("cpu", "cuda"):
        record.update(status="unavailable", reason=f"unknown device {device!r}", ended=now())
        return record

    saved_threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(threads or os.cpu_count() or 1)
    record["threads"] = torch.get_num_threads()
    record["device_name"] = name = _device_name(device)
    record["gpu"] = gpu_record(device)  # torch's own answer now that CUDA is initialised
    record["llc_bytes"] = last_level_cache_bytes(device)
    clocks_before = _gpu_clocks() if device == "cuda" else None
    try:
        record["copy"] = measure_copy_bandwidth(device, quick=quick)
        record["dispatch"] = measure_dispatch(device, quick=quick)
        for dtype in dtypes:
            record["matmul"][dtype] = measure_matmul_rate(device, dtype, quick=quick, seed=seed)
    finally:
        torch.set_num_threads(saved_threads)
    if device == "cuda":
        from ssmbench.measure.energy import clock_drop

        after = _gpu_clocks()
        record["clocks"] = {
            "before": clocks_before,
            "after": after,
            "dropped": clock_drop(clocks_before, after),
        }
    record["ceilings"] = {
        "bw_gbps": record["copy"]["gbps"],
        "tflops": {dtype: m["tflops"] for dtype, m in record["matmul"].items()},
    }
    record["datasheet"] = datasheet_for(name) if device == "cuda" else None
    if record["datasheet"] is None:
        record["datasheet_reason"] = f"no datasheet for {name}"
    record["ended"] = now()
    return record


def _gpu_clocks() -> dict:
    from ssmbench.measure.energy import gpu_clocks

    return gpu_clocks()  # the job's GPU by UUID: CUDA's index is not NVML's


def _ratio(achieved: float | None, peak: float | None) -> float | None:
    if achieved is None or not peak:
        return None
    return achieved / peak


def utilization(
    achieved_tflops: float | None,
    achieved_gbps: float | None,
    device_json: dict,
    dtype: str,
) -> dict:
    """Fractions of the ceilings in ``device_json`` (the dict :func:`calibrate` returns).

    Returns ``{"compute_util", "bw_util"}`` against the measured ceilings and
    ``{"compute_util_datasheet", "bw_util_datasheet"}`` against the datasheet peaks; each is
    None where the achieved value, the ceiling or the datasheet is missing.  The datasheet
    column for fp32 follows the float32 matmul precision the calibration ran under.
    """
    ceilings = device_json.get("ceilings") or {}
    sheet = device_json.get("datasheet") or {}
    key = datasheet_key(dtype, device_json.get("float32_matmul_precision", "highest"))
    return {
        "compute_util": _ratio(achieved_tflops, (ceilings.get("tflops") or {}).get(dtype)),
        "bw_util": _ratio(achieved_gbps, ceilings.get("bw_gbps")),
        "compute_util_datasheet": _ratio(achieved_tflops, (sheet.get("tflops") or {}).get(key)),
        "bw_util_datasheet": _ratio(achieved_gbps, sheet.get("memory_gbps")),
    }
