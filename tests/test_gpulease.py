"""The GPU lease (ssmbench.gpulease) on fake GPUs: two processes never hold one GPU, a
process killed with SIGKILL frees its GPU for the next, CUDA_VISIBLE_DEVICES names the
leased GPU (and, set before, narrows the choice), nothing is leased on a node without GPUs
or where SLURM chose the GPU, and the device a job computes on is named by torch's UUID
and PCI bus id, matched to the node's list."""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import pytest

from ssmbench import devices, gpulease, provenance
from ssmbench.devices import Gpu
from ssmbench.paths import REPO
from ssmbench.scripting import logged
from tests.gpufakes import A100, MIXED, FakeTorch, fake_gpus

# A process that leases one of two fake GPUs, says which, and holds it until its stdin
# closes (or it is killed).
HOLDER = """
import json, os, sys
from ssmbench import gpulease
from tests.gpufakes import fake_gpus

lease = gpulease.acquire(fake_gpus(2), sys.argv[1])
print(json.dumps({"index": lease.gpu.index, "visible": os.environ["CUDA_VISIBLE_DEVICES"]}))
sys.stdout.flush()
sys.stdin.read()
"""
# the variables a lease reads, unset for a child: it sees only the fake node
LEASE_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", *gpulease.SLURM_GPU_VARS)


@pytest.fixture
def clean_env(monkeypatch):
    """A job's process before its lease: no CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER or
    SLURM GPUs, and no torch (on a GPU machine an earlier test may have initialised CUDA);
    restored after the test (a lease sets the first two in this process)."""
    for name in LEASE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    yield
    assert gpulease.held() is None, "a test left its lease held"


def holder(folder: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in LEASE_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO)])
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        bufsize=0,  # unbuffered: said() reads the pipe itself, a byte at a time
        env=env,
    )


def said(process: subprocess.Popen, wait_s: float = 600) -> str:
    """The next line ``process`` prints (what came of it if none ends within ``wait_s``
    seconds: a bound for a loaded machine, where a niced process may take minutes to
    start). Read a byte at a time from the pipe, so no line waits in a buffer that
    ``select`` cannot see."""
    fd, line = process.stdout.fileno(), b""
    deadline = time.monotonic() + wait_s
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        byte = os.read(fd, 1) if ready else b""
        if not byte:
            break
        line += byte
    return line.decode().strip()


def lock_is_free(folder: Path, gpu: Gpu) -> bool:
    """Whether this process could lock ``gpu``'s file now (released at once)."""
    with open(gpulease.lock_path(folder, gpu), "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def test_two_processes_never_share_a_gpu_and_a_killed_one_frees_its_own(tmp_path):
    node = fake_gpus(2)
    first = holder(tmp_path)
    second = holder(tmp_path)
    third = None
    try:
        a, b = json.loads(said(first)), json.loads(said(second))
        assert {a["index"], b["index"]} == {0, 1}
        for seen in (a, b):  # CUDA's device 0 in each is the GPU it leased
            assert seen["visible"] == node[seen["index"]].uuid
        assert not lock_is_free(tmp_path, node[0]) and not lock_is_free(tmp_path, node[1])
        third = holder(tmp_path)
        assert said(third).startswith("ssm-bench: all 2 GPUs this job may use are leased")
        # kill the holder of GPU 1: a lease that ignored the locks would hand out GPU 0
        victim = first if a["index"] == 1 else second
        os.kill(victim.pid, signal.SIGKILL)  # no release, no cleanup: the kernel's doing
        victim.wait()
        assert said(third).startswith("ssm-bench: GPU 1 leased after ")
        assert json.loads(said(third)) == {"index": 1, "visible": node[1].uuid}
    finally:
        for process in (first, second, third):
            if process is not None and process.poll() is None:
                process.stdin.close()
                process.wait(timeout=60)


def test_the_lease_sets_cuda_visible_devices_and_is_released(tmp_path, clean_env, monkeypatch):
    node = fake_gpus(3)
    with gpulease.acquire(node, tmp_path) as lease:
        assert lease.gpu == node[0] and lease.path == gpulease.lock_path(tmp_path, node[0])
        assert os.environ["CUDA_VISIBLE_DEVICES"] == node[0].uuid
        assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert gpulease.held() is lease and gpulease.acquire(node, tmp_path) is lease
        assert not lock_is_free(tmp_path, node[0]) and lock_is_free(tmp_path, node[1])
        assert f"pid {os.getpid()} " in lease.path.read_text()
    assert gpulease.held() is None and lock_is_free(tmp_path, node[0])
    # a GPU whose UUID the driver does not show yet is chosen by its index in PCI order
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")  # as a new job's process starts
    unnamed = [Gpu(0, "", node[0].pci_bus_id, "Fake GPU")]
    with gpulease.acquire(unnamed, tmp_path):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"


def test_a_held_gpu_is_passed_over_and_cuda_visible_devices_narrows_the_choice(
    tmp_path, clean_env, monkeypatch
):
    node = fake_gpus(4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    with open(gpulease.lock_path(tmp_path, node[2]), "w") as other:
        fcntl.flock(other, fcntl.LOCK_EX)  # another process's lease, as far as flock knows
        with gpulease.acquire(node, tmp_path) as lease:
            assert lease.gpu == node[3]  # 0 and 1 are free, but not this run's
            assert os.environ["CUDA_VISIBLE_DEVICES"] == node[3].uuid


def test_a_job_that_wants_one_gpu_leases_that_one(tmp_path, clean_env, monkeypatch):
    """A calibration names its GPU (by UUID or PCI bus id): it gets that one though the
    first is free, and one the job may not lease is refused by name."""
    node = fake_gpus(4, MIXED)
    assert [g.key for g in node] == [g.uuid for g in node]
    with gpulease.acquire(node, tmp_path, wanted=node[2].uuid) as lease:
        assert lease.gpu == node[2] and lease.gpu.name == A100
        assert os.environ["CUDA_VISIBLE_DEVICES"] == node[2].uuid
        assert lock_is_free(tmp_path, node[0])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with gpulease.acquire(node, tmp_path, wanted="00000000:48:00.0") as lease:  # NVML's form
        assert lease.gpu == node[3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(RuntimeError, match=f"GPU {node[3].uuid} is not one this job may lease"):
        gpulease.acquire(node, tmp_path, wanted=node[3].uuid)
    assert [g.index for g in gpulease.leasable(node)] == [0, 1]
    monkeypatch.setenv("SLURM_JOB_GPUS", "1")
    assert gpulease.leasable(node) == []
    with pytest.raises(RuntimeError, match="SLURM chose its device"):
        gpulease.acquire(node, tmp_path, wanted=node[0].uuid)
    assert gpulease.held() is None


def test_a_job_that_wants_a_held_gpu_waits_for_it(tmp_path, clean_env, monkeypatch):
    """Another process holds the wanted GPU: the job waits (and says so) though others
    are free, and takes it once it is released."""
    node = fake_gpus(2)
    monkeypatch.setattr(gpulease, "POLL_S", 0.05)
    other = open(gpulease.lock_path(tmp_path, node[1]), "w")
    fcntl.flock(other, fcntl.LOCK_EX)
    slept = []

    def release_after_one_wait(seconds):
        slept.append(seconds)
        other.close()  # the other holder ends

    monkeypatch.setattr(gpulease.time, "sleep", release_after_one_wait)
    with gpulease.acquire(node, tmp_path, wanted=node[1].uuid) as lease:
        assert lease.gpu == node[1] and slept == [0.05]


def test_nothing_is_leased_without_gpus_or_where_slurm_chose(tmp_path, clean_env, monkeypatch):
    folder = tmp_path / "locks"
    lease = gpulease.acquire([], folder)
    assert lease.gpu is None and lease.note == "no GPU on this node to lease"
    assert gpulease.held() is None and not folder.exists()
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    assert gpulease.gpu_record("cuda") is None and gpulease.gpu_record("cpu") is None
    monkeypatch.setenv("SLURM_JOB_GPUS", "3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    lease = gpulease.acquire(fake_gpus(4), folder)
    assert lease.gpu is None and "SLURM_JOB_GPUS=3" in lease.note
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0" and not folder.exists()


def test_refused_once_cuda_is_initialised(tmp_path, clean_env, monkeypatch):
    node = fake_gpus(2)
    monkeypatch.setitem(sys.modules, "torch", FakeTorch(node))
    with pytest.raises(RuntimeError, match="CUDA is initialised already"):
        gpulease.acquire(node, tmp_path)


def test_the_gpu_a_job_runs_on_is_torchs_matched_to_the_node(tmp_path, clean_env, monkeypatch):
    node = fake_gpus(4)
    monkeypatch.setattr(devices, "gpus", lambda root=None: node)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    with gpulease.acquire(node, tmp_path) as lease:
        assert gpulease.current_gpu() == node[1]  # before CUDA: the lease
        monkeypatch.setitem(sys.modules, "torch", FakeTorch(node))
        assert gpulease.current_gpu() == node[1] == lease.gpu  # torch's UUID and bus id
        assert gpulease.gpu_record("cuda") == node[1].to_dict()
        assert gpulease.gpu_record("cpu") is None
        assert provenance.device_info()["gpu"] == node[1].to_dict()
    # a device the node's list lacks is named without an index
    monkeypatch.setattr(devices, "gpus", lambda root=None: node[:1])
    stranger = gpulease.current_gpu()
    assert stranger == Gpu(None, node[1].uuid, node[1].pci_bus_id, "Fake GPU")


def test_logged_leases_for_a_job_holding_a_gpu(tmp_path, clean_env, monkeypatch):
    node = fake_gpus(2)
    monkeypatch.setattr(devices, "gpus", lambda root=None: node)
    monkeypatch.setenv(gpulease.ENV_FOLDER, str(tmp_path / "locks"))
    log = tmp_path / "job.log"
    job = types.SimpleNamespace(log=[str(log)], resources=types.SimpleNamespace(gpu=1))
    with logged(job):
        assert gpulease.held().gpu == node[0]
        assert gpulease.held().path.parent == tmp_path / "locks"
        assert os.environ["CUDA_VISIBLE_DEVICES"] == node[0].uuid
    assert gpulease.held() is None
    assert f"GPU lease: GPU 0 (Fake GPU, {node[0].uuid}, PCI 0000:18:00.0)" in log.read_text()
    cpu_job = types.SimpleNamespace(log=[str(log)], resources=types.SimpleNamespace(gpu=0))
    with logged(cpu_job):
        assert gpulease.held() is None
    bare_job = types.SimpleNamespace(log=[str(log)])  # no resources at all
    with logged(bare_job):
        assert gpulease.held() is None


def test_the_lock_folder(monkeypatch):
    monkeypatch.setenv(gpulease.ENV_FOLDER, "/somewhere/locks")
    assert gpulease.lock_folder() == Path("/somewhere/locks")
    monkeypatch.delenv(gpulease.ENV_FOLDER)
    monkeypatch.setenv("SLURMD_NODENAME", "gpu07")
    assert gpulease.lock_folder() == Path(tempfile.gettempdir()) / "ssmbench-gpus-gpu07"
