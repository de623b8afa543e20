"""Which devices this host has, judged without importing torch: the workflow plans on
machines without it, and a cuda preset's global ``gpu`` resource is how many GPUs the
run may use at once."""

from __future__ import annotations

import os
from pathlib import Path


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
    ``CUDA_VISIBLE_DEVICES`` lists when it is set, else the driver's GPU folders under
    /proc/driver/nvidia/gpus; 1 when neither says (a cuda preset needs one anyway)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        count = len([d for d in listed.split(",") if d.strip() and d.strip() != "-1"])
    else:
        gpus = Path("/proc/driver/nvidia/gpus")
        count = len(list(gpus.iterdir())) if gpus.is_dir() else 0
    return max(count, 1)
