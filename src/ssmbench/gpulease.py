"""One GPU per job: a lease on one of the node's GPUs, held for the job's whole life.

Snakemake's global ``gpu`` resource says how many GPU jobs run at once (one per GPU of
the node, ``workflow/rules/common.smk``); it does not say which GPU each takes.  The lease
does.  A GPU job takes it first thing, in its own process (:func:`ssmbench.scripting.logged`
takes it for every rule's script that holds a ``gpu``), before anything initialises CUDA:

1. the devices it may use: the node's GPUs (:func:`ssmbench.devices.gpus`), narrowed by a
   ``CUDA_VISIBLE_DEVICES`` the run was started with (:func:`ssmbench.devices.allowed`);
2. the first of them whose lock file (``<folder>/<pci bus id>.lock``) it can lock with
   ``fcntl.flock``, waiting while every one is held (a job that must measure one GPU, a
   per-device calibration, names it and waits for that one: ``wanted``);
3. ``CUDA_VISIBLE_DEVICES`` set to that GPU (its UUID, else its index with
   ``CUDA_DEVICE_ORDER=PCI_BUS_ID``), so the job's ``cuda`` is that device and no other.

The lock is the kernel's and belongs to the process: it goes when the process ends,
however it ends (an exception, SIGKILL, the OOM killer), so a crashed job never leaves a
device held and there is nothing to clean up.  Any executor's jobs on one node share the
locks, and so do two runs of two checkouts there.

The folder is ``$SSMBENCH_GPU_LOCKS``, else ``<tmp>/ssmbench-gpus-<node>`` (node-local;
the node's name keeps two nodes apart where ``/tmp`` is shared).  Nothing is leased on a
node without GPUs, nor where SLURM gave the job its GPU (``SLURM_JOB_GPUS`` or
``SLURM_STEP_GPUS`` set): there the scheduler chose the device and set
``CUDA_VISIBLE_DEVICES`` itself.

:func:`current_gpu` is the device a job computes on, as its records and sidecars name it
(:func:`gpu_record`) and as NVML's energy and clock readings look it up
(:mod:`ssmbench.measure.energy`): by UUID and PCI bus id, never by CUDA's index, which
``CUDA_VISIBLE_DEVICES`` renumbers.  No torch is imported here; torch is asked only once the
caller has initialised CUDA.
"""

from __future__ import annotations

import fcntl
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ssmbench import devices
from ssmbench.devices import Gpu

ENV_FOLDER = "SSMBENCH_GPU_LOCKS"
# SLURM sets these in a job it gave GPUs (its gres plugin): the device is chosen already
SLURM_GPU_VARS = ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS")
POLL_S = 0.2  # how often a job waiting for a GPU tries the locks again


def node() -> str:
    """This node's name as SLURM gives it, else the hostname."""
    return os.environ.get("SLURMD_NODENAME") or platform.node()


def lock_folder() -> Path:
    """Where the node's GPU locks are: ``$SSMBENCH_GPU_LOCKS``, else a folder of the
    node's temporary directory named after the node."""
    return Path(
        os.environ.get(ENV_FOLDER) or Path(tempfile.gettempdir()) / f"ssmbench-gpus-{node()}"
    )


@dataclass
class Lease:
    """One process's hold on one GPU: ``gpu`` (None when nothing was leased: no GPU on
    the node, or a device SLURM chose), ``path`` its lock file, and why nothing was leased
    (``note``).  Released by :meth:`release`, at the end of a ``with``, or by the kernel
    when the process ends."""

    gpu: Gpu | None
    path: Path | None = None
    note: str = ""
    fd: int | None = None

    def release(self) -> None:
        global _HELD
        if self.fd is not None:
            os.close(self.fd)  # closing the only descriptor drops the flock
            self.fd = None
        if _HELD is self:
            _HELD = None

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


_HELD: Lease | None = None  # this process's lease, while it holds one


def held() -> Lease | None:
    """The lease this process holds, or None."""
    return _HELD


def slurm_given() -> str:
    """``NAME=value`` of the variable by which SLURM says it chose this job's GPUs, or ""."""
    given = [name for name in SLURM_GPU_VARS if os.environ.get(name)]
    return f"{given[0]}={os.environ[given[0]]}" if given else ""


def leasable(node_gpus: list[Gpu] | None = None) -> list[Gpu]:
    """The GPUs a job of this node may lease, in PCI bus order: the node's
    (:func:`ssmbench.devices.gpus`, or ``node_gpus``) that ``CUDA_VISIBLE_DEVICES``
    allows; none where SLURM chose the device (:func:`slurm_given`).  A cuda preset's
    plan calibrates each of them (``ssmbench.config.Plan.calibrated_gpus``)."""
    if slurm_given():
        return []
    return devices.allowed(
        devices.gpus() if node_gpus is None else node_gpus,
        os.environ.get("CUDA_VISIBLE_DEVICES"),
    )


def acquire(
    node_gpus: list[Gpu] | None = None,
    folder: str | os.PathLike | None = None,
    wanted: str | None = None,
) -> Lease:
    """Lease one GPU of this node for this process, waiting while every one it may use is
    leased, and set ``CUDA_VISIBLE_DEVICES`` to it; see the module's docstring.
    ``node_gpus`` replaces :func:`ssmbench.devices.gpus` and ``folder`` :func:`lock_folder`.
    ``wanted`` (a :attr:`Gpu.key`: UUID or PCI bus id) asks for that GPU and no other,
    waiting while it is held: a calibration measures one named device.

    A process holds one lease: a second call returns the first.  Raises RuntimeError when
    CUDA is initialised already (setting ``CUDA_VISIBLE_DEVICES`` then changes nothing),
    and when ``wanted`` is not a GPU this job may lease (or SLURM chose the device)."""
    global _HELD
    if _HELD is not None:
        return _HELD
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise RuntimeError(
            "CUDA is initialised already, so CUDA_VISIBLE_DEVICES cannot choose this job's "
            "GPU: take the GPU lease (ssmbench.gpulease.acquire) before anything uses CUDA"
        )
    given = slurm_given()
    if given and wanted:
        raise RuntimeError(
            f"this job must run on GPU {wanted}, but SLURM chose its device ({given})"
        )
    if given:
        return Lease(None, note=f"the GPU SLURM gave this job ({given})")
    pool = leasable(node_gpus)
    if wanted:
        pool = _only(pool, wanted)
    if not pool:
        return Lease(None, note="no GPU on this node to lease")
    folder = Path(folder or lock_folder())
    _make_folder(folder)
    waiting_since = None
    while True:
        for gpu in pool:
            lease = _try_lock(gpu, folder)
            if lease is not None:
                if waiting_since is not None:
                    waited_s = time.monotonic() - waiting_since
                    print(f"ssm-bench: GPU {gpu.index} leased after {waited_s:.1f} s", flush=True)
                os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
                os.environ["CUDA_VISIBLE_DEVICES"] = gpu.uuid or str(gpu.index)
                _HELD = lease
                return lease
        if waiting_since is None:
            waiting_since = time.monotonic()
            which = f"GPU {wanted} is" if wanted else f"all {len(pool)} GPUs this job may use are"
            print(
                f"ssm-bench: {which} leased (locks in {folder}); waiting",
                flush=True,  # a job's log (a file, a pipe) says so while it waits
            )
        time.sleep(POLL_S)


def _only(pool: list[Gpu], wanted: str) -> list[Gpu]:
    """The GPU of ``pool`` that ``wanted`` names, as a list; RuntimeError where none is."""
    gpu = devices.named(pool, wanted)
    if gpu is None:
        known = ", ".join(f"{g.index}: {g.key}" for g in pool) or "none"
        raise RuntimeError(
            f"GPU {wanted} is not one this job may lease (the node's, narrowed by "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}): {known}"
        )
    return [gpu]


def _make_folder(folder: Path) -> None:
    """The lock folder, writable by every user of the node (sticky, as /tmp is)."""
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        try:
            folder.chmod(0o1777)
        except OSError:  # another user's folder: theirs to set
            pass


def lock_path(folder: str | os.PathLike, gpu: Gpu) -> Path:
    """The lock file of ``gpu`` in ``folder``, named by its PCI bus id (else its UUID,
    else its index): the same file for a GPU whatever CUDA calls it in a process."""
    return Path(folder) / f"{gpu.pci_bus_id or gpu.uuid or gpu.index}.lock"


def _try_lock(gpu: Gpu, folder: Path) -> Lease | None:
    """A lease on ``gpu`` if its lock is free now, else None."""
    path = lock_path(folder, gpu)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        writable = True
    except PermissionError:  # another user's lock file: a read-only descriptor locks too
        fd, writable = os.open(path, os.O_RDONLY), False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    if writable:  # who holds it, for a person reading the folder; the lock is the flock
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {node()} since {stamp}\n".encode(), 0)
    return Lease(gpu, path, fd=fd)


def current_gpu() -> Gpu | None:
    """The physical GPU this process computes on: torch's current CUDA device once torch
    has initialised CUDA (its UUID, PCI bus id and name; the index from the node's list),
    else the leased GPU; None for a process on no GPU.  Never initialises CUDA."""
    torch = sys.modules.get("torch")
    lease = _HELD.gpu if _HELD is not None else None
    if torch is None or not torch.cuda.is_initialized():
        return lease
    try:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
    except Exception:  # a CUDA context broken by the job's error: the lease still knows
        return lease
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid and not uuid.startswith("GPU-"):
        uuid = f"GPU-{uuid}"  # torch prints the bare UUID; NVML and CUDA_VISIBLE_DEVICES prefix it
    pci = ""
    if getattr(props, "pci_bus_id", None) is not None:
        pci = devices.bus_id(
            f"{props.pci_domain_id:x}:{props.pci_bus_id:x}:{props.pci_device_id:x}.0"
        )
    if not (uuid or pci) and lease is not None:  # a torch that tells neither
        return Gpu(lease.index, lease.uuid, lease.pci_bus_id, props.name)
    for gpu in devices.gpus():
        if (pci and gpu.pci_bus_id == pci) or (uuid and gpu.uuid == uuid):
            return Gpu(gpu.index, uuid or gpu.uuid, pci or gpu.pci_bus_id, props.name)
    return Gpu(None, uuid, pci, props.name)


def gpu_record(device: str) -> dict | None:
    """What a record keeps of the GPU a job on ``device`` ran on (:class:`Gpu`'s fields),
    or None: a CPU job, or no GPU known."""
    if not device.startswith("cuda"):
        return None
    gpu = current_gpu()
    return gpu.to_dict() if gpu is not None else None
