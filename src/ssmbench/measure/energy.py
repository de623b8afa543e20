"""Energy around a timed loop, and GPU clocks before and after it
(docs/ARCHITECTURE.md, "Measurement").

:class:`EnergyMeter` reads a cumulative energy counter before and after the loop; the
difference is the energy of the loop plus whatever else ran on the device meanwhile (the
bench job owns its device, so nothing else should).  Where no counter can be read the
result says so in ``reason`` and ``energy_j`` is None: status is data, never an exception.

Sources, by device:

- NVIDIA GPU, ``nvml-total-energy``: NVML's ``nvmlDeviceGetTotalEnergyConsumption``, the
  board's energy in millijoules since the driver was loaded (NVML API reference; Volta and
  newer).  The counter advances in steps of tens of milliseconds (PETSc's
  ``PetscLogGpuEnergyMeter`` notes 20-100 ms on recent GPUs), so loops of a second or more
  read well and very short ones coarsely; ``duration_s`` is recorded so readers can judge.
- NVIDIA GPU without that counter (NVML raises ``NVMLError_NotSupported``),
  ``nvml-power-sampling``: ``nvmlDeviceGetPowerUsage`` (milliwatts) polled from a background
  thread every ``sample_interval_s`` and integrated with the trapezoid rule.  Recent drivers
  may report a power value averaged over a window of up to a second, so this is coarser than
  the counter; the number of samples and the achieved rate are recorded.
- CPU, ``rapl``: Linux powercap's Intel RAPL zones,
  ``/sys/class/powercap/intel-rapl:*/energy_uj`` (microjoules; kernel documentation,
  ``Documentation/power/powercap/powercap.rst``), package zones only (their ``name`` is
  ``package-N``; core, uncore and DRAM sub-zones are not added, psys is left out because it
  contains the packages).  A counter wraps to 0 after ``max_energy_range_uj``; one wrap per
  zone between two reads is corrected, which holds for loops shorter than the wrap period
  (minutes at full load).  Many kernels make ``energy_uj`` readable by root only (the fix for
  CVE-2020-8694); a refused read gives a reason, not an error.

NVML (the ``pynvml`` module of the ``nvidia-ml-py`` package) is imported only when a GPU is
metered; both the module and the powercap root can be passed in, which is how the tests
drive fake counters.  NVML numbers devices in PCI bus order, CUDA by default fastest first
and from 0 again among those ``CUDA_VISIBLE_DEVICES`` lists (a leased job's one GPU is its
CUDA device 0, ssmbench.gpulease), so the meter and :func:`gpu_clocks` find the job's GPU
in NVML by its UUID, else its PCI bus id (:func:`nvml_handle`; the device
:func:`ssmbench.gpulease.current_gpu` names), and by NVML index only where neither is known.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ssmbench.devices import Gpu
from ssmbench.gpulease import current_gpu

__all__ = [
    "EnergyMeter",
    "EnergyResult",
    "clock_drop",
    "MIN_WINDOW_S",
    "gpu_clocks",
    "load_nvml",
    "min_window_s",
    "nvml_handle",
    "trapezoid_j",
    "window_reason",
]

RAPL_ROOT = Path("/sys/class/powercap")
NVML_ERROR_NOT_SUPPORTED = 3  # nvml.h: NVML_ERROR_NOT_SUPPORTED
DEFAULT_SAMPLE_INTERVAL_S = 0.02
# The shortest window an energy reading is trusted over, by device.  NVML's total-energy
# counter advances in steps of 20-100 ms on recent GPUs (PETSc's PetscLogGpuEnergyMeter
# notes), and its power readings may average over up to a second: over 1 s one step is
# 2-10 % of the window.  RAPL's package counters update about every millisecond (the rate
# usually quoted from Intel's documentation of the energy status MSRs; not measured here),
# so a CPU window is not padded.  A timed loop shorter than this is padded with untimed
# calls (ssmbench.measure.timing.measure, min_meter_s).
MIN_WINDOW_S = {"cuda": 1.0, "cpu": 0.0}


def min_window_s(device: str) -> float:
    """The shortest energy window for ``device`` ("cuda", "cuda:1", "cpu"), in seconds."""
    return MIN_WINDOW_S.get(device.split(":", 1)[0], 0.0)


def window_reason(duration_s: float, device: str) -> str:
    """Why an energy reading over ``duration_s`` seconds on ``device`` is too short to
    trust ("" when it is not)."""
    shortest = min_window_s(device)
    if duration_s >= shortest:
        return ""
    return (
        f"energy window of {duration_s:.3f} s is shorter than {shortest:g} s (NVML's energy "
        "counter advances in steps of 20-100 ms): reading too short, not recorded"
    )


@dataclass
class EnergyResult:
    """What one :class:`EnergyMeter` interval measured.

    ``energy_j`` in joules (None where no source could be read, with ``reason``); ``method``
    is ``nvml-total-energy``, ``nvml-power-sampling``, ``rapl`` or ``none``; ``duration_s``
    is the wall time between start and stop; ``samples`` and ``sample_hz`` are set when power
    was sampled; ``domains`` names the RAPL zones or the NVML device read.
    """

    energy_j: float | None
    method: str
    reason: str
    duration_s: float
    samples: int | None = None
    sample_hz: float | None = None
    domains: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def load_nvml(nvml=None) -> tuple[object | None, str]:
    """``(module, "")`` with NVML initialised, or ``(None, reason)``; the caller calls
    ``module.nvmlShutdown()`` when done.  ``nvml`` replaces ``import pynvml`` (tests)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None, "no NVML: the nvidia-ml-py package (module pynvml) is not installed"
    try:
        nvml.nvmlInit()
    except Exception as error:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return None, f"no NVML: nvmlInit failed: {_describe(error)}"
    return nvml, ""


def nvml_handle(nvml, gpu: Gpu | None, index: int = 0):
    """NVML's handle of ``gpu`` by its UUID, else by its PCI bus id, else (no GPU known)
    of NVML device ``index``; raises what NVML raises (:func:`_lookup` names the call)."""
    if gpu is not None and gpu.uuid:
        return nvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
    if gpu is not None and gpu.pci_bus_id:
        return nvml.nvmlDeviceGetHandleByPciBusId(gpu.pci_bus_id)
    return nvml.nvmlDeviceGetHandleByIndex(index)


def _lookup(gpu: Gpu | None, index: int) -> str:
    """The NVML call :func:`nvml_handle` makes, in words."""
    if gpu is not None and gpu.uuid:
        return f"nvmlDeviceGetHandleByUUID({gpu.uuid})"
    if gpu is not None and gpu.pci_bus_id:
        return f"nvmlDeviceGetHandleByPciBusId({gpu.pci_bus_id})"
    return f"nvmlDeviceGetHandleByIndex({index})"


def _domain(gpu: Gpu | None, index: int) -> str:
    """The NVML device an :class:`EnergyResult` read, by its NVML index where known."""
    if gpu is None:
        return f"nvml:{index}"
    return f"nvml:{gpu.index}" if gpu.index is not None else f"nvml:{gpu.uuid or gpu.pci_bus_id}"


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _nvml_error(nvml) -> type[BaseException]:
    return getattr(nvml, "NVMLError", Exception)


def _not_supported(nvml, error: BaseException) -> bool:
    cls = getattr(nvml, "NVMLError_NotSupported", None)
    if isinstance(cls, type) and isinstance(error, cls):
        return True
    return getattr(error, "value", None) == NVML_ERROR_NOT_SUPPORTED


def trapezoid_j(samples: list[tuple[float, float]]) -> float:
    """Energy in joules of ``(time_s, power_w)`` samples by the trapezoid rule."""
    pairs = zip(samples[:-1], samples[1:], strict=True)
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in pairs)


class _PowerSampler:
    """Poll ``read_w()`` every ``interval_s`` in a daemon thread; the first and last samples
    are taken by :meth:`start` and :meth:`stop` themselves, so the span is the interval."""

    def __init__(self, read_w: Callable[[], float], interval_s: float):
        self.read_w = read_w
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []
        self.error = ""
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="power-sampler", daemon=True)

    def _take(self) -> None:
        try:
            self.samples.append((time.perf_counter(), self.read_w()))
        except Exception as error:
            self.error = self.error or _describe(error)

    def _run(self) -> None:
        while not self._done.wait(self.interval_s) and not self.error:
            self._take()

    def start(self) -> None:
        self._take()
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self._take()


def _rapl_zones(root: Path) -> tuple[list[Path], str]:
    """The package zones under ``root``, or ``([], reason)``."""
    if not root.is_dir():
        return [], f"{root} not present"
    zones = []
    for zone in sorted(root.glob("intel-rapl:*")):
        try:
            name = (zone / "name").read_text().strip()
        except OSError:
            continue
        if name.startswith("package"):
            zones.append(zone)
    if not zones:
        return [], f"no intel-rapl package zone under {root}"
    return zones, ""


def _read_uj(path: Path) -> tuple[int | None, str]:
    try:
        return int(path.read_text().strip()), ""
    except PermissionError:
        return None, (
            f"permission denied reading {path} (RAPL energy is readable by root only on "
            "kernels patched for CVE-2020-8694)"
        )
    except (OSError, ValueError) as error:
        return None, f"cannot read {path}: {_describe(error)}"


def _synchronize_cuda() -> None:
    """Wait for queued kernels, so the interval holds the work it timed (no-op without
    torch or before CUDA is initialised; never initialises CUDA itself)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class EnergyMeter:
    """Energy of the code between :meth:`start` and :meth:`stop`, or inside ``with``.

    ``device`` is "cpu" (RAPL) or "cuda" (NVML: the GPU ``gpu``, by default the one this
    process computes on, :func:`ssmbench.gpulease.current_gpu`, found by UUID or PCI bus
    id; NVML device ``device_index`` where no GPU is known).
    After the block, ``meter.result`` is the :class:`EnergyResult`; :meth:`stop` returns it.
    ``nvml`` replaces the ``pynvml`` module and ``rapl_root`` the powercap folder (tests).
    """

    def __init__(
        self,
        device: str = "cpu",
        device_index: int = 0,
        *,
        gpu: Gpu | None = None,
        nvml=None,
        rapl_root: str | Path = RAPL_ROOT,
        sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S,
    ):
        self.device = device
        self.device_index = device_index
        self.gpu = gpu
        self.nvml_module = nvml
        self.rapl_root = Path(rapl_root)
        self.sample_interval_s = sample_interval_s
        self.result: EnergyResult | None = None
        self._reset()

    def _reset(self) -> None:
        self._method = "none"
        self._reason = ""
        self._nvml = None
        self._handle = None
        self._domain = ""
        self._energy_mj: int | None = None
        self._sampler: _PowerSampler | None = None
        self._zones: list[Path] = []
        self._start_uj: list[int] = []
        self._t0 = 0.0

    def __enter__(self) -> EnergyMeter:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- start -------------------------------------------------------------------------
    def start(self) -> EnergyMeter:
        self._reset()
        self.result = None
        if self.device.startswith("cuda"):
            _synchronize_cuda()
            self._start_nvml()
        elif self.device == "cpu":
            self._start_rapl()
        else:
            self._reason = f"no energy source for device {self.device!r}"
        self._t0 = time.perf_counter()
        return self

    def _start_nvml(self) -> None:
        nvml, reason = load_nvml(self.nvml_module)
        if nvml is None:
            self._reason = reason
            return
        self._nvml = nvml
        error_type = _nvml_error(nvml)
        gpu = self.gpu if self.gpu is not None else current_gpu()
        self._domain = _domain(gpu, self.device_index)
        try:
            self._handle = nvml_handle(nvml, gpu, self.device_index)
        except error_type as error:
            self._fail(f"{_lookup(gpu, self.device_index)}: {_describe(error)}")
            return
        try:
            self._energy_mj = nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
            self._method = "nvml-total-energy"
            return
        except error_type as error:
            if not _not_supported(nvml, error):
                self._fail(f"nvmlDeviceGetTotalEnergyConsumption: {_describe(error)}")
                return
        handle = self._handle
        # no energy counter on this board: integrate sampled power (mW -> W) instead
        self._sampler = _PowerSampler(
            lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0, self.sample_interval_s
        )
        self._sampler.start()
        if self._sampler.error:
            self._sampler.stop()
            self._fail(f"nvmlDeviceGetPowerUsage: {self._sampler.error}")
            return
        self._method = "nvml-power-sampling"

    def _start_rapl(self) -> None:
        zones, reason = _rapl_zones(self.rapl_root)
        if not zones:
            self._reason = reason
            return
        start_uj = []
        for zone in zones:
            value, reason = _read_uj(zone / "energy_uj")
            if value is None:
                self._reason = reason
                return
            start_uj.append(value)
        self._zones, self._start_uj = zones, start_uj
        self._method = "rapl"

    def _fail(self, reason: str) -> None:
        self._reason = reason
        self._method = "none"
        if self._nvml is not None:
            self._shutdown_nvml()

    def _shutdown_nvml(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # shutting down is best effort
            pass
        self._nvml = None

    # ---- stop --------------------------------------------------------------------------
    def stop(self) -> EnergyResult:
        """End the interval and return its :class:`EnergyResult` (the same one when called
        again)."""
        if self.result is not None:
            return self.result
        if not self._t0:
            raise RuntimeError("EnergyMeter.stop() called before start()")
        if self.device.startswith("cuda"):
            _synchronize_cuda()
        duration_s = time.perf_counter() - self._t0
        method, energy_j, reason = self._method, None, self._reason
        samples = sample_hz = None
        domains: list[str] = []
        if method == "nvml-total-energy":
            domains = [self._domain]
            try:
                end_mj = self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
                energy_j = (end_mj - self._energy_mj) / 1000.0
            except _nvml_error(self._nvml) as error:
                reason = f"nvmlDeviceGetTotalEnergyConsumption: {_describe(error)}"
        elif method == "nvml-power-sampling":
            domains = [self._domain]
            self._sampler.stop()
            points = self._sampler.samples
            samples = len(points)
            span_s = points[-1][0] - points[0][0] if points else 0.0
            sample_hz = (samples - 1) / span_s if samples > 1 and span_s > 0 else None
            if self._sampler.error:
                reason = f"nvmlDeviceGetPowerUsage: {self._sampler.error}"
            elif samples < 2:
                reason = "fewer than two power samples"
            else:
                energy_j = trapezoid_j(points)
        elif method == "rapl":
            domains = [zone.name for zone in self._zones]
            energy_j, reason = self._rapl_delta_j()
        if self._nvml is not None:
            self._shutdown_nvml()
        if energy_j is None and method != "none":
            method = "none"
        self.result = EnergyResult(
            energy_j=energy_j,
            method=method,
            reason=reason,
            duration_s=duration_s,
            samples=samples,
            sample_hz=sample_hz,
            domains=domains,
        )
        return self.result

    def _rapl_delta_j(self) -> tuple[float | None, str]:
        total_uj = 0
        for zone, begin in zip(self._zones, self._start_uj, strict=True):
            end, reason = _read_uj(zone / "energy_uj")
            if end is None:
                return None, reason
            delta = end - begin
            if delta < 0:  # the counter wrapped past max_energy_range_uj back to 0
                span, reason = _read_uj(zone / "max_energy_range_uj")
                if span is None:
                    return None, reason
                delta += span
            total_uj += delta
        return total_uj / 1e6, ""


def gpu_clocks(device_index: int = 0, *, gpu: Gpu | None = None, nvml=None) -> dict:
    """SM clock and temperature of the GPU ``gpu`` now, read through NVML: by default the
    one this process computes on (:func:`ssmbench.gpulease.current_gpu`), found by UUID or
    PCI bus id; NVML device ``device_index`` where no GPU is known.

    Returns ``{"sm_clock_mhz", "temperature_c", "clocks_event_reasons", "reason"}``:
    MHz, degrees Celsius and NVML's bitmask of why clocks are held down (0: none; see
    ``nvmlClocksEventReasons`` in the NVML reference), each None where it cannot be read;
    ``reason`` says why (e.g. no NVML on this machine), "" when all were read.  Read it
    before and after a timed loop and compare with :func:`clock_drop`.
    """
    out = {"sm_clock_mhz": None, "temperature_c": None, "clocks_event_reasons": None}
    module, reason = load_nvml(nvml)
    if module is None:
        return {**out, "reason": reason}
    problems = []
    gpu = gpu if gpu is not None else current_gpu()
    try:
        handle = nvml_handle(module, gpu, device_index)
        reads = {
            "sm_clock_mhz": lambda: module.nvmlDeviceGetClockInfo(
                handle, getattr(module, "NVML_CLOCK_SM", 1)
            ),
            "temperature_c": lambda: module.nvmlDeviceGetTemperature(
                handle, getattr(module, "NVML_TEMPERATURE_GPU", 0)
            ),
            # renamed from ...ClocksThrottleReasons in NVML 12.2; try the new name first
            "clocks_event_reasons": lambda: (
                getattr(module, "nvmlDeviceGetCurrentClocksEventReasons", None)
                or module.nvmlDeviceGetCurrentClocksThrottleReasons
            )(handle),
        }
        for key, read in reads.items():
            try:
                out[key] = int(read())
            except Exception as error:
                problems.append(f"{key}: {_describe(error)}")
    except Exception as error:
        problems.append(f"{_lookup(gpu, device_index)}: {_describe(error)}")
    finally:
        try:
            module.nvmlShutdown()
        except Exception:
            pass
    return {**out, "reason": "; ".join(problems)}


def clock_drop(before: dict | None, after: dict | None, threshold: float = 0.05) -> bool:
    """True when the SM clock fell by more than ``threshold`` (a fraction) from ``before``
    to ``after`` (two :func:`gpu_clocks` readings): the device throttled during the loop.
    False when either reading lacks a clock, since nothing can be concluded."""
    first = (before or {}).get("sm_clock_mhz")
    last = (after or {}).get("sm_clock_mhz")
    if not first or last is None:
        return False
    return last < first * (1 - threshold)
