"""Which devices this host has, judged without importing torch: the workflow plans on
machines without it, and a cuda preset's global ``gpu`` resource is how many GPUs the
run may use at once.

:func:`gpus` lists the node's GPUs as physical devices (:class:`Gpu`: index, UUID, PCI
bus id, name), which :mod:`ssmbench.gpulease` hands out one per job; :func:`allowed` is
the part of that list ``CUDA_VISIBLE_DEVICES`` lets a process use."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

# The driver's folder of GPUs: one folder per GPU, named by its PCI bus id, whose
# `information` file gives its model and UUID (the driver's README, "procfs").
GPU_FOLDER = Path("/proc/driver/nvidia/gpus")


@dataclass(frozen=True)
class Gpu:
    """One physical GPU of the node.

    ``index`` is its place in PCI bus order, which is how NVML and ``nvidia-smi`` number
    devices (CUDA numbers them fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and
    from 0 again among those ``CUDA_VISIBLE_DEVICES`` lists), None where it is not known;
    ``uuid`` is ``GPU-<hex>`` ("" where not known); ``pci_bus_id`` is
    ``domain:bus:device.function`` in :func:`bus_id`'s form; ``name`` the model."""

    index: int | None
    uuid: str
    pci_bus_id: str
    name: str

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def key(self) -> str:
        """The name of this GPU's ceilings record (``results/<run>/devices/<key>.json``)
        and of the GPU a job asks to lease: its UUID, unique across nodes and reboots,
        else its PCI bus id (the driver shows no UUID before the GPU is first opened)."""
        return self.uuid or self.pci_bus_id


def cuda_available() -> bool:
    """Whether an NVIDIA driver is loaded, judged without importing torch.

    ``SSMBENCH_DEVICE=cpu|cuda`` overrides the guess.
    """
    forced = os.environ.get("SSMBENCH_DEVICE")
    if forced in ("cpu", "cuda"):
        return forced == "cuda"
    return Path("/proc/driver/nvidia/version").exists()


def visible_gpus() -> int:
    """How many GPUs this process may use, judged without importing torch: the devices
    ``CUDA_VISIBLE_DEVICES`` lists when it is set, else the node's (:func:`gpus`); 1 when
    neither says (a cuda preset needs one anyway)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        count = len([d for d in listed.split(",") if d.strip() and d.strip() != "-1"])
    else:
        count = len(gpus())
    return max(count, 1)


def bus_id(text: str) -> str:
    """A PCI bus id in one form, ``0000:3b:00.0`` (four hex digits of domain, lower case),
    whichever form it comes in: the driver's folder name (``0000:3b:00.0``), NVML's and
    nvidia-smi's (``00000000:3B:00.0``); text that is not one comes back lower-cased."""
    found = re.fullmatch(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)", text)
    if not found:
        return text.strip().lower()
    domain, bus, device, function = (int(part or "0", 16) for part in found.groups())
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def gpus(root: Path = GPU_FOLDER) -> list[Gpu]:
    """The node's GPUs in PCI bus order (their ``index``), read from the driver's folder
    ``root`` without torch or NVML; where the folder is absent (some containers), from
    ``nvidia-smi``; [] where neither has any.  A UUID the driver shows as ``GPU-????...``
    (before the GPU was first opened) is "" here."""
    if not root.is_dir():
        return list(_nvidia_smi_gpus())
    folders = sorted(root.iterdir(), key=lambda folder: bus_id(folder.name))
    found = []
    for index, folder in enumerate(folders):
        info = _information(folder / "information")
        uuid = info.get("GPU UUID", "")
        known = uuid.startswith("GPU-") and "?" not in uuid
        found.append(Gpu(index, uuid if known else "", bus_id(folder.name), info.get("Model", "")))
    return found


def _information(path: Path) -> dict[str, str]:
    """The ``Key: value`` lines of a GPU's ``information`` file ({} when unreadable)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    pairs = (line.split(":", 1) for line in lines if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


@functools.cache  # a process asks more than once; the node's GPUs do not change meanwhile
def _nvidia_smi_gpus() -> tuple[Gpu, ...]:
    if shutil.which("nvidia-smi") is None:
        return ()
    query = ["nvidia-smi", "--query-gpu=index,uuid,pci.bus_id,name", "--format=csv,noheader"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return ()
    found = []
    for line in out.stdout.splitlines():
        parts = [part.strip() for part in line.split(",", 3)]
        if len(parts) == 4 and parts[0].isdigit():
            found.append(Gpu(int(parts[0]), parts[1], bus_id(parts[2]), parts[3]))
    return tuple(found)


def named(node_gpus: list[Gpu], key: str) -> Gpu | None:
    """The GPU of ``node_gpus`` that ``key`` names (its :attr:`Gpu.key`, UUID or PCI bus
    id in any of :func:`bus_id`'s forms), or None."""
    for gpu in node_gpus:
        if key and (key == gpu.uuid or (gpu.pci_bus_id and bus_id(key) == gpu.pci_bus_id)):
            return gpu
    return None


def allowed(node_gpus: list[Gpu], listed: str | None) -> list[Gpu]:
    """The GPUs of ``node_gpus`` that ``CUDA_VISIBLE_DEVICES`` (``listed``) lets a process
    use, in its order: all of them where it is unset; else each entry named by index (in
    PCI bus order, as ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and nvidia-smi number them) or by
    UUID (or the start of one, as CUDA accepts).  As torch reads the variable, an entry
    that names no GPU hides itself and every entry after it, and a GPU named twice leaves
    none."""
    if listed is None:
        return list(node_gpus)
    chosen: list[Gpu] = []
    for entry in (e.strip() for e in listed.split(",")):
        if entry.isdigit():
            match = [g for g in node_gpus if g.index == int(entry)]
        else:
            match = [g for g in node_gpus if entry.startswith("GPU-") and g.uuid.startswith(entry)]
        if len(match) != 1:
            break
        if match[0] in chosen:
            return []
        chosen.append(match[0])
    return chosen
