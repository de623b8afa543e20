"""Energy meter: RAPL on a fake powercap tree (packages only, wrap-around, refused reads),
NVML through a fake module (energy counter, power-sampling fallback, errors), the real
sources of this machine, and GPU clock readings."""

from __future__ import annotations

import pathlib
import time

import pytest

from ssmbench.measure.energy import (
    RAPL_ROOT,
    EnergyMeter,
    clock_drop,
    gpu_clocks,
    trapezoid_j,
)
from tests.conftest import set_up_and_one_call_s

MAX_RANGE_UJ = 262_143_328_850  # a typical package max_energy_range_uj


def make_zone(root: pathlib.Path, zone: str, name: str, energy_uj: int) -> pathlib.Path:
    path = root / zone
    path.mkdir(parents=True)
    (path / "name").write_text(f"{name}\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{MAX_RANGE_UJ}\n")
    return path


def set_energy(zone: pathlib.Path, energy_uj: int) -> None:
    (zone / "energy_uj").write_text(f"{energy_uj}\n")


@pytest.fixture
def powercap(tmp_path):
    """Two packages, with core/dram sub-zones and psys that must not be added."""
    root = tmp_path / "powercap"
    zones = {
        "pkg0": make_zone(root, "intel-rapl:0", "package-0", 1_000_000),
        "core0": make_zone(root, "intel-rapl:0:0", "core", 500_000),
        "dram0": make_zone(root, "intel-rapl:0:1", "dram", 700_000),
        "pkg1": make_zone(root, "intel-rapl:1", "package-1", 2_000_000),
        "psys": make_zone(root, "intel-rapl:2", "psys", 9_000_000),
    }
    return root, zones


def test_rapl_sums_package_zones_only(powercap):
    root, zones = powercap
    meter = EnergyMeter("cpu", rapl_root=root).start()
    set_energy(zones["pkg0"], 1_000_000 + 12_500_000)  # 12.5 J
    set_energy(zones["pkg1"], 2_000_000 + 7_250_000)  # 7.25 J
    set_energy(zones["core0"], 99_000_000)
    set_energy(zones["dram0"], 99_000_000)
    set_energy(zones["psys"], 99_000_000)
    result = meter.stop()
    assert result.energy_j == 19.75
    assert result.method == "rapl" and result.reason == ""
    assert result.domains == ["intel-rapl:0", "intel-rapl:1"]
    assert result.duration_s >= 0 and result.samples is None


def test_rapl_wraparound(tmp_path):
    zone = make_zone(tmp_path, "intel-rapl:0", "package-0", MAX_RANGE_UJ - 1_000_000)
    with EnergyMeter("cpu", rapl_root=tmp_path) as meter:
        set_energy(zone, 2_000_000)  # 1 J up to the wrap, 2 J after it
    assert meter.result.energy_j == 3.0
    assert meter.result.method == "rapl"


def test_rapl_permission_denied(powercap, monkeypatch):
    root, zones = powercap
    refused = zones["pkg1"] / "energy_uj"
    read_text = pathlib.Path.read_text

    def guarded(self, *args, **kwargs):
        if self == refused:  # root reads anything, so refuse like a non-root user's read
            raise PermissionError(13, "Permission denied", str(self))
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "read_text", guarded)
    result = EnergyMeter("cpu", rapl_root=root).start().stop()
    assert result.energy_j is None and result.method == "none"
    assert result.reason.startswith(f"permission denied reading {refused}")
    assert "CVE-2020-8694" in result.reason


def test_rapl_missing_tree(tmp_path):
    missing = tmp_path / "powercap"
    result = EnergyMeter("cpu", rapl_root=missing).start().stop()
    assert result.energy_j is None and result.method == "none"
    assert result.reason == f"{missing} not present"
    make_zone(missing, "intel-rapl:2", "psys", 1)
    result = EnergyMeter("cpu", rapl_root=missing).start().stop()
    assert result.reason == f"no intel-rapl package zone under {missing}"


def test_rapl_on_this_machine():
    result = EnergyMeter("cpu").start().stop()
    if not RAPL_ROOT.is_dir():
        assert result.reason == "/sys/class/powercap not present"
    if result.energy_j is None:
        assert result.method == "none" and result.reason
    else:
        assert result.method == "rapl" and result.energy_j >= 0


class FakeNVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNotSupported(FakeNVMLError):
    def __init__(self):
        super().__init__(3)


class FakeNVML:
    """The slice of pynvml that the meter uses, with scripted answers."""

    NVMLError = FakeNVMLError
    NVMLError_NotSupported = FakeNotSupported
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, energy_mj=None, energy_error=None, power_mw=250_000, power_error=None):
        self.energy_mj = list(energy_mj or [])
        self.energy_error = energy_error
        self.power_mw = power_mw
        self.power_error = power_error
        self.inits = self.shutdowns = 0

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, index):
        if index != 0:
            raise FakeNVMLError(2)
        return "handle0"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if self.energy_error is not None:
            raise self.energy_error
        return self.energy_mj.pop(0)

    def nvmlDeviceGetPowerUsage(self, handle):
        if self.power_error is not None:
            raise self.power_error
        return self.power_mw

    def nvmlDeviceGetClockInfo(self, handle, kind):
        assert kind == self.NVML_CLOCK_SM
        return 1980

    def nvmlDeviceGetTemperature(self, handle, kind):
        return 41

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return 0


def test_nvml_energy_counter():
    nvml = FakeNVML(energy_mj=[5_000_000, 5_012_345])
    with EnergyMeter("cuda", nvml=nvml) as meter:
        pass
    result = meter.result
    assert result.energy_j == pytest.approx(12.345, abs=1e-12)
    assert result.method == "nvml-total-energy" and result.reason == ""
    assert result.domains == ["nvml:0"] and result.samples is None
    assert nvml.inits == nvml.shutdowns == 1
    assert meter.stop() is result  # a second stop returns the same result


def test_nvml_not_supported_falls_back_to_power_sampling():
    nvml = FakeNVML(energy_error=FakeNotSupported(), power_mw=250_000)  # 250 W
    meter = EnergyMeter("cuda", nvml=nvml, sample_interval_s=0.01).start()
    time.sleep(0.1)
    result = meter.stop()
    assert result.method == "nvml-power-sampling" and result.reason == ""
    assert result.samples >= 3 and result.sample_hz > 0
    # constant power: energy is power times the sampled span (first to last sample: on a
    # loaded machine the sampler's last read can come a few ms after stop's clock)
    span_s = (result.samples - 1) / result.sample_hz
    assert result.energy_j == pytest.approx(250 * span_s, rel=1e-9)
    assert span_s == pytest.approx(result.duration_s, abs=0.1)
    assert nvml.inits == nvml.shutdowns == 1


def test_nvml_power_sampling_error_is_a_reason():
    nvml = FakeNVML(energy_error=FakeNotSupported(), power_error=FakeNotSupported())
    result = EnergyMeter("cuda", nvml=nvml).start().stop()
    assert result.energy_j is None and result.method == "none"
    assert result.reason == "nvmlDeviceGetPowerUsage: FakeNotSupported: NVML error 3"
    assert nvml.inits == nvml.shutdowns == 1


def test_nvml_other_errors_are_reasons():
    nvml = FakeNVML(energy_error=FakeNVMLError(999))
    result = EnergyMeter("cuda", nvml=nvml).start().stop()
    assert result.energy_j is None and result.method == "none"
    assert result.reason == "nvmlDeviceGetTotalEnergyConsumption: FakeNVMLError: NVML error 999"
    assert nvml.inits == nvml.shutdowns == 1
    missing = EnergyMeter("cuda", device_index=1, nvml=FakeNVML()).start().stop()
    assert missing.reason.startswith("nvmlDeviceGetHandleByIndex(1): ")


def test_nvml_init_failure():
    class NoDriver(FakeNVML):
        def nvmlInit(self):
            raise FakeNVMLError(9)

    result = EnergyMeter("cuda", nvml=NoDriver()).start().stop()
    assert result.energy_j is None
    assert result.reason == "no NVML: nvmlInit failed: FakeNVMLError: NVML error 9"


def test_nvml_on_this_machine():
    result = EnergyMeter("cuda").start().stop()
    try:
        import pynvml  # noqa: F401
    except ImportError:
        assert result.reason == (
            "no NVML: the nvidia-ml-py package (module pynvml) is not installed"
        )
    if result.energy_j is None:
        assert result.method == "none" and result.reason
    clocks = gpu_clocks()
    if clocks["sm_clock_mhz"] is None:
        assert clocks["reason"]


def test_unknown_device_and_misuse():
    result = EnergyMeter("mps").start().stop()
    assert result.energy_j is None and result.reason == "no energy source for device 'mps'"
    with pytest.raises(RuntimeError, match="before start"):
        EnergyMeter("cpu").stop()


def test_trapezoid_exact():
    assert trapezoid_j([(0.0, 100.0), (1.0, 200.0), (3.0, 200.0)]) == 550.0
    assert trapezoid_j([(0.0, 100.0)]) == 0.0


def test_gpu_clocks_fake_and_absent():
    nvml = FakeNVML()
    clocks = gpu_clocks(nvml=nvml)
    assert clocks == {
        "sm_clock_mhz": 1980,
        "temperature_c": 41,
        "clocks_event_reasons": 0,
        "reason": "",
    }
    assert nvml.inits == nvml.shutdowns == 1

    class NoDriver(FakeNVML):
        def nvmlInit(self):
            raise FakeNVMLError(9)

    absent = gpu_clocks(nvml=NoDriver())
    assert absent["sm_clock_mhz"] is None and absent["temperature_c"] is None
    assert absent["reason"].startswith("no NVML: ")


def test_clock_drop():
    assert clock_drop({"sm_clock_mhz": 1980}, {"sm_clock_mhz": 1800})  # -9%
    assert not clock_drop({"sm_clock_mhz": 1980}, {"sm_clock_mhz": 1900})  # -4%
    assert clock_drop({"sm_clock_mhz": 1980}, {"sm_clock_mhz": 1900}, threshold=0.03)
    assert not clock_drop({"sm_clock_mhz": 1500}, {"sm_clock_mhz": 1980})  # boost up
    assert not clock_drop(None, {"sm_clock_mhz": 1000})
    assert not clock_drop({"sm_clock_mhz": None}, {"sm_clock_mhz": 1000})


class RecordingMeter:
    """A meter that logs when it starts and stops into the shared ``events`` list."""

    def __init__(self, events: list):
        self.events = events

    def start(self):
        self.events.append("start")

    def stop(self):
        self.events.append("stop")


def _timing(**kw):
    from ssmbench.matrix import Timing

    base = dict(warmup=2, min_samples=3, max_samples=3, min_time_s=0.0, max_time_s=5.0)
    return Timing(**{**base, **kw})


def test_clocks_hook_runs_after_the_warm_up_and_before_the_meter():
    from ssmbench.measure.timing import measure

    events = []
    result = measure(
        lambda: events.append("call"),
        _timing(),
        meter=RecordingMeter(events),
        after_warmup=lambda: events.append("clocks"),
    )
    assert events == ["call", "call", "clocks", "start", "call", "call", "call", "stop"]
    assert result.meter_calls == 3 == len(result.samples_ms) and result.meter_s >= 0


def test_a_short_loop_is_padded_with_untimed_calls_to_the_meters_window():
    from ssmbench.measure.timing import measure

    events = []

    def work():
        time.sleep(0.005)
        events.append("call")

    result = measure(work, _timing(warmup=0), meter=RecordingMeter(events), min_meter_s=0.2)
    assert len(result.samples_ms) == 3  # the timed samples are the budget's, no more
    assert result.meter_calls > 3 and result.meter_s >= 0.2
    assert events.count("call") == result.meter_calls and events[-1] == "stop"
    # the deadline ends the padding: no call starts after it
    deadline = time.monotonic() + 0.1
    result = measure(
        work, _timing(warmup=0), meter=RecordingMeter([]), min_meter_s=30, deadline=deadline
    )
    assert result.meter_s < 5 and result.meter_calls >= 3


def test_energy_window_reason():
    from ssmbench.measure.energy import MIN_WINDOW_S, min_window_s, window_reason

    assert MIN_WINDOW_S["cuda"] == 1.0 and min_window_s("cuda:1") == 1.0
    assert min_window_s("cpu") == 0.0 and window_reason(0.001, "cpu") == ""
    assert window_reason(1.0, "cuda") == ""
    assert window_reason(0.25, "cuda").startswith("energy window of 0.250 s is shorter than 1 s")


class FakeEnergyMeter:
    """EnergyMeter's surface with a fixed 12 J over the real window."""

    def __init__(self, device, **kwargs):
        self.result = None

    def start(self):
        self._t0 = time.perf_counter()

    def stop(self):
        from ssmbench.measure.energy import EnergyResult

        duration_s = time.perf_counter() - self._t0
        self.result = EnergyResult(12.0, "fake", "", duration_s)
        return self.result


def _cpu_cell(timing):
    from ssmbench.cell import CellSpec
    from ssmbench.matrix import Cell, Size

    size = Size(d_model=32, n_layers=1, n_heads=2, head_dim=16, expand=2, d_conv=4, chunk=16)
    return CellSpec("t", Cell("mamba2", "torch", "prefill", 1, 32, 4, "fp32"), "cpu", size, timing)


def test_a_cell_divides_energy_over_every_call_in_a_padded_window(monkeypatch):
    from ssmbench.cell import run_cell
    from ssmbench.measure import energy

    monkeypatch.setattr(energy, "EnergyMeter", FakeEnergyMeter)
    monkeypatch.setitem(energy.MIN_WINDOW_S, "cpu", 0.3)
    r = run_cell(_cpu_cell(_timing(warmup=1)), threads=1)
    assert r.status == "ok", r.reason
    assert r.energy_window_s >= 0.3 and r.n_samples == 3
    calls = 12.0 / r.energy_j  # energy of one call = the window's over its calls
    assert calls > r.n_samples and calls == pytest.approx(round(calls))
    assert r.energy_j_per_token == pytest.approx(r.energy_j / 32)


def test_a_cell_whose_window_stays_short_says_so(monkeypatch):
    from ssmbench.cell import run_cell
    from ssmbench.measure import energy

    # the window pads up to the deadline, which also has to hold the build, the warm-up
    # and the 3 samples (a fixed 1 s once ran out before a sample on a loaded machine):
    # twice what they take here now, plus a second, and at least 4 s
    budget_s = max(4.0, 2 * set_up_and_one_call_s(_cpu_cell(_timing(warmup=1))) + 1.0)
    monkeypatch.setattr(energy, "EnergyMeter", FakeEnergyMeter)
    monkeypatch.setitem(energy.MIN_WINDOW_S, "cpu", 30.0)  # past the cell's deadline
    r = run_cell(_cpu_cell(_timing(warmup=1, timeout_s=budget_s)), threads=1)
    assert r.status == "ok", r.reason
    assert r.energy_j is None and r.energy_window_s < 30.0
    assert "is shorter than 30 s" in r.energy_reason and "too short" in r.energy_reason


def test_nvml_reads_the_jobs_gpu_by_uuid_or_bus_id_never_cudas_index(monkeypatch):
    """A leased job's GPU is its CUDA device 0 whatever NVML calls it: the meter and the
    clock reading look it up by UUID, else PCI bus id (fake NVML: GPU i's counter moves
    i + 1 J per read, its SM clock is 1000 + i MHz)."""
    import sys

    from ssmbench import devices
    from ssmbench.devices import Gpu
    from tests.gpufakes import FakeNVML, FakeTorch, fake_gpus

    node = fake_gpus(4)
    nvml = FakeNVML(node)
    result = EnergyMeter("cuda", gpu=node[2], nvml=nvml).start().stop()
    assert result.energy_j == 3.0 and result.domains == ["nvml:2"]
    assert nvml.lookups == [node[2].uuid]
    by_bus = Gpu(3, "", node[3].pci_bus_id, "Fake GPU")  # no UUID known
    assert EnergyMeter("cuda", gpu=by_bus, nvml=nvml).start().stop().energy_j == 4.0
    assert nvml.lookups[-1] == node[3].pci_bus_id
    assert gpu_clocks(gpu=node[1], nvml=nvml)["sm_clock_mhz"] == 1001
    # by default, the GPU this process computes on: here CUDA's device 0 is GPU 1
    monkeypatch.setattr(devices, "gpus", lambda root=None: node)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", node[1].uuid)
    monkeypatch.setitem(sys.modules, "torch", FakeTorch(node))
    result = EnergyMeter("cuda", nvml=nvml).start().stop()
    assert result.energy_j == 2.0 and result.domains == ["nvml:1"]
    assert gpu_clocks(nvml=nvml)["sm_clock_mhz"] == 1001
    assert "index 0" not in nvml.lookups
