"""Fakes of the three surfaces through which ssm-bench learns about GPUs, so that the GPU
lease can be tested on a machine without one (tests/test_gpulease.py,
tests/measure/test_energy.py, tests/workflow/test_one_job_per_device.py):

- the node's GPU list, :func:`ssmbench.devices.gpus`: :func:`fake_gpus`;
- torch's device query once CUDA is initialised: :class:`FakeTorch`, whose CUDA device 0
  is the GPU ``CUDA_VISIBLE_DEVICES`` names first (the node's first where it is unset), as
  the CUDA runtime would choose it;
- NVML's lookups: :class:`FakeNVML`, one energy counter per GPU that advances by
  ``index + 1`` joules per read, so an energy reading names the device it was read from;
- a tiny kernel's launches and CUDA graphs of them over a clock of their own:
  :class:`FakeLaunches` (tests/measure/test_ceilings.py, the dispatch ceiling).
"""

from __future__ import annotations

import contextlib
import os
import types

from ssmbench.devices import Gpu

# a node of two kinds of GPU, as torch and the driver name them: two H100s, then two A100s
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
MIXED = (H100, H100, A100, A100)


def fake_gpus(n: int, names: tuple[str, ...] | None = None) -> list[Gpu]:
    """``n`` GPUs as :func:`ssmbench.devices.gpus` lists them: PCI bus order, distinct
    UUIDs (none the start of another) and bus ids; each named "Fake GPU", or ``names[i]``
    (:data:`MIXED`: a node whose GPUs differ)."""
    return [
        Gpu(
            i,
            f"GPU-{i:08x}-fake-4000-8000-{i:012x}",
            f"0000:{0x18 + 0x10 * i:02x}:00.0",
            names[i] if names else "Fake GPU",
        )
        for i in range(n)
    ]


def chosen(node: list[Gpu]) -> Gpu:
    """The GPU the CUDA runtime opens as device 0 under this process's
    ``CUDA_VISIBLE_DEVICES`` (its first entry: a UUID or an index in PCI bus order)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    first = listed.split(",")[0].strip() if listed else ""
    for gpu in node:
        if first and (gpu.uuid == first or first == str(gpu.index)):
            return gpu
    if first:
        raise RuntimeError(f"CUDA_VISIBLE_DEVICES={listed}: no such fake GPU")
    return node[0]


class FakeTorch(types.ModuleType):
    """``torch`` as ssmbench's device queries see it in a job whose CUDA is initialised."""

    def __init__(self, node: list[Gpu]):
        super().__init__("torch")
        self.node = node
        self.__version__ = "0+fake"
        self.version = types.SimpleNamespace(cuda="0+fake")
        self.cuda = types.SimpleNamespace(
            is_initialized=lambda: True,
            is_available=lambda: True,
            current_device=lambda: 0,
            synchronize=lambda: None,
            get_device_name=lambda device=None: chosen(self.node).name,
            get_device_properties=self._properties,
        )

    def _properties(self, device: int):
        assert device == 0, "a leased job sees one device"
        gpu = chosen(self.node)
        domain, bus, rest = gpu.pci_bus_id.split(":")
        return types.SimpleNamespace(
            name=gpu.name,
            uuid=gpu.uuid.removeprefix("GPU-"),  # torch prints the UUID without the prefix
            pci_domain_id=int(domain, 16),
            pci_bus_id=int(bus, 16),
            pci_device_id=int(rest.split(".")[0], 16),
        )


class FakeNVMLError(Exception):
    pass


class FakeNVML:
    """The slice of pynvml the energy meter and the clock reading use, over ``node``.
    Each device's energy counter advances by ``(index + 1) * 1000`` mJ per read; its SM
    clock is ``1000 + index`` MHz."""

    NVMLError = FakeNVMLError
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, node: list[Gpu]):
        self.node = node
        self.energy_mj = {gpu.index: 0 for gpu in node}
        self.lookups: list[str] = []

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def _found(self, gpus: list[Gpu], what: str) -> int:
        if len(gpus) != 1:
            raise FakeNVMLError(f"no GPU {what}")
        self.lookups.append(what)
        return gpus[0].index

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return self._found([g for g in self.node if g.uuid == uuid], uuid)

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        return self._found([g for g in self.node if g.pci_bus_id == bus_id.lower()], bus_id)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self._found([g for g in self.node if g.index == index], f"index {index}")

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        self.energy_mj[handle] += (handle + 1) * 1000
        return self.energy_mj[handle]

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return 1000 + handle

    def nvmlDeviceGetTemperature(self, handle, kind):
        return 40

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return 0


class FakeLaunches:
    """A tiny kernel (:meth:`launch`) and the names of ``torch.cuda`` that
    :func:`ssmbench.measure.ceilings.capture_graph` uses, over a clock of its own
    (:meth:`clock_ns`): an eager launch costs ``launch_ns``; a launch while a graph is
    being captured is recorded in it and costs nothing; a replay costs ``replay_ns`` plus
    ``kernel_ns`` per kernel it holds; :meth:`synchronize` costs ``sync_ns`` (the queue's
    last kernel draining), so a timer that reads the clock around it shows it."""

    def __init__(self, launch_ns: int, kernel_ns: int, replay_ns: int, sync_ns: int):
        self.launch_ns, self.kernel_ns = launch_ns, kernel_ns
        self.replay_ns, self.sync_ns = replay_ns, sync_ns
        self.now_ns = 0
        self.launches = self.syncs = 0
        self.capturing = None
        self.graphs: list = []

    def clock_ns(self) -> int:
        return self.now_ns

    def launch(self) -> None:
        if self.capturing is not None:
            self.capturing.kernels += 1
            return
        self.launches += 1
        self.now_ns += self.launch_ns

    def synchronize(self) -> None:
        self.syncs += 1
        self.now_ns += self.sync_ns

    def CUDAGraph(self):  # noqa: N802  (torch.cuda's name)
        fake = self

        class Graph:
            kernels = 0

            def replay(self):
                fake.now_ns += fake.replay_ns + self.kernels * fake.kernel_ns

        self.graphs.append(Graph())
        return self.graphs[-1]

    @contextlib.contextmanager
    def graph(self, graph):
        self.capturing = graph
        try:
            yield
        finally:
            self.capturing = None

    class Stream:
        def wait_stream(self, other):
            pass

    def current_stream(self):
        return self.Stream()

    def stream(self, stream):
        return contextlib.nullcontext()
