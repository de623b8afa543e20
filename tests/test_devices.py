"""The node's GPUs as ssmbench.devices lists them without torch or NVML: the driver's
folder (one folder per GPU, named by its PCI bus id), nvidia-smi where that folder is
absent, PCI bus ids in one form, and the part of the list CUDA_VISIBLE_DEVICES allows."""

from __future__ import annotations

import stat

import pytest

from ssmbench import devices
from ssmbench.devices import Gpu, allowed, bus_id
from tests.gpufakes import fake_gpus


def driver_folder(root, gpus):
    """A fake /proc/driver/nvidia/gpus: ``(bus id, uuid, model)`` per GPU, in the
    ``information`` file's layout (keys, a colon, tabs)."""
    for bus, uuid, model in gpus:
        (root / bus).mkdir(parents=True)
        (root / bus / "information").write_text(
            f"Model: \t\t {model}\nIRQ:   \t\t 148\nGPU UUID: \t {uuid}\n"
            f"Video BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nBus Location: \t {bus}\n"
            "Device Minor: \t 0\nGPU Excluded:\t No\n"
        )
    return root


def test_gpus_come_in_pci_bus_order_from_the_drivers_folder(tmp_path):
    root = driver_folder(
        tmp_path,
        [
            ("0000:b3:00.0", "GPU-6e1d7c44-0e8c-4bd5-a4c5-3b8a5e0b7a11", "NVIDIA H100 80GB HBM3"),
            ("0000:3b:00.0", "GPU-????????-????-????-????-????????????", "NVIDIA L4"),
            ("0001:1a:00.0", "GPU-0a2b3c4d-5e6f-4a8b-9c0d-1e2f3a4b5c6d", "NVIDIA L4"),
        ],
    )
    assert devices.gpus(root) == [
        Gpu(0, "", "0000:3b:00.0", "NVIDIA L4"),  # a UUID not shown yet is unknown
        Gpu(1, "GPU-6e1d7c44-0e8c-4bd5-a4c5-3b8a5e0b7a11", "0000:b3:00.0", "NVIDIA H100 80GB HBM3"),
        Gpu(2, "GPU-0a2b3c4d-5e6f-4a8b-9c0d-1e2f3a4b5c6d", "0001:1a:00.0", "NVIDIA L4"),
    ]


def test_gpus_from_nvidia_smi_where_the_folder_is_absent(tmp_path, monkeypatch):
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(
        "#!/bin/sh\n"
        'echo "0, GPU-11111111-2222-3333-4444-555555555555, 00000000:3B:00.0, NVIDIA H200"\n'
        'echo "1, GPU-66666666-7777-8888-9999-000000000000, 00000000:B3:00.0, NVIDIA H200"\n'
    )
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(smi.parent), prepend=":")
    devices._nvidia_smi_gpus.cache_clear()
    try:
        found = devices.gpus(tmp_path / "absent")
    finally:
        devices._nvidia_smi_gpus.cache_clear()
    assert found == [
        Gpu(0, "GPU-11111111-2222-3333-4444-555555555555", "0000:3b:00.0", "NVIDIA H200"),
        Gpu(1, "GPU-66666666-7777-8888-9999-000000000000", "0000:b3:00.0", "NVIDIA H200"),
    ]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0000:3b:00.0", "0000:3b:00.0"),  # the driver's folder name
        ("00000000:3B:00.0", "0000:3b:00.0"),  # NVML's and nvidia-smi's
        ("3b:00.0", "0000:3b:00.0"),  # no domain: domain 0
        ("not a bus id", "not a bus id"),
    ],
)
def test_bus_ids_in_one_form(text, expected):
    assert bus_id(text) == expected


@pytest.mark.parametrize(
    "listed, expected",
    [
        (None, [0, 1, 2, 3]),  # unset: every GPU
        ("2,0", [2, 0]),  # indices, in the order listed
        ("GPU-00000003", [3]),  # the start of a UUID
        ("1,7,2", [1]),  # an entry naming no GPU hides the rest, as in CUDA
        ("1,1", []),  # a GPU listed twice: none
        ("", []),  # empty: none
        ("-1", []),
        ("MIG-0a1b2c3d", []),  # MIG instances are not leased
    ],
)
def test_cuda_visible_devices_allows(listed, expected):
    node = fake_gpus(4)
    assert [g.index for g in allowed(node, listed)] == expected
