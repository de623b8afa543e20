"""Peak memory: the running-sum arithmetic, output bytes, and real CPU allocations measured
to the byte; CUDA when a GPU is present."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch

from ssmbench.measure.memory import measure_peak, peak_of_deltas, tensor_bytes

MiB = 1 << 20
FLOAT = 4  # bytes per float32
# In-place arithmetic with a Python scalar wraps it in a 0-d tensor (8 bytes, and a 4-byte
# float32 copy): the only allocations such a call makes.
SCALAR_SLACK = 64


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.mark.parametrize(
    "deltas, expected",
    [
        ([], (0, 0)),
        ([4, 2, -4], (6, 2)),
        ([4, -4, 2, 1], (4, 3)),
        ([-5, 1], (0, -4)),  # a free of older memory: below the start, the peak stays 0
    ],
    ids=["none", "overlap", "sequential", "below-start"],
)
def test_peak_of_deltas(deltas, expected):
    assert peak_of_deltas(deltas) == expected


@dataclass
class Holder:
    a: torch.Tensor
    rest: dict


def test_tensor_bytes_counts_each_storage_once():
    x = torch.zeros(1024)  # 4 KiB
    y = torch.zeros(256)  # 1 KiB
    assert tensor_bytes(x) == 4096
    assert tensor_bytes((x, x[:10], x.view(32, 32))) == 4096  # views share the storage
    assert tensor_bytes([x, {"y": y, "n": 3}, None]) == 4096 + 1024
    assert tensor_bytes(Holder(a=x, rest={"y": y})) == 4096 + 1024
    assert tensor_bytes("not a tensor") == 0


def test_cpu_peak_is_exact_for_overlapping_allocations():
    def fn():
        a = torch.empty(4 * MiB // FLOAT)
        b = torch.empty(2 * MiB // FLOAT)
        del a
        return b

    result = measure_peak(fn, "cpu")
    assert result["method"] == "cpu_profiler_memory_events"
    assert result["peak_bytes"] == 6 * MiB  # exact: requested bytes, no rounding
    assert result["end_bytes"] == 2 * MiB
    assert result["alloc_total_bytes"] == 6 * MiB
    assert result["output_bytes"] == 2 * MiB


def test_cpu_peak_of_temporaries():
    x = torch.ones(MiB // FLOAT)

    def fn():
        return (x * 2) + 1  # x * 2 is live while the sum is allocated, then freed

    result = measure_peak(fn, "cpu")
    assert 2 * MiB <= result["peak_bytes"] <= 2 * MiB + SCALAR_SLACK
    assert MiB <= result["end_bytes"] <= MiB + SCALAR_SLACK
    assert result["output_bytes"] == MiB


def test_cpu_in_place_ops_do_not_grow():
    x = torch.ones(MiB // FLOAT)
    y = torch.full_like(x, 2.0)

    def in_place_tensor():
        x.mul_(y).add_(y)

    def in_place_scalar():
        x.mul_(0.5).add_(1.0)

    assert measure_peak(in_place_tensor, "cpu")["peak_bytes"] == 0
    scalar = measure_peak(in_place_scalar, "cpu")
    assert 0 <= scalar["peak_bytes"] <= SCALAR_SLACK
    assert scalar["output_bytes"] == 0


# In a fresh process: PyTorch's CPU memory reporter remembers the size of every block
# allocated while a profiler records memory, and forgets it only when the block is freed
# while one records.  A block freed after its profiler ended leaves its size behind, and
# a later block at the same address, allocated before this test's profiler, would have
# its free reported with that stale size.  Earlier tests in this process leave such sizes.
FREE_OF_OLDER_MEMORY = """
import torch
from ssmbench.measure.memory import measure_peak
held = [torch.empty(3 * 2**20 // 4)]
def fn():
    held.clear()
    return torch.empty(2**20 // 4)
print(measure_peak(fn, "cpu", warmup=0)["peak_bytes"])
"""


def test_cpu_free_of_older_memory_is_not_seen():
    # documented limit: the profiler never saw the size of memory allocated before the call
    done = subprocess.run(
        [sys.executable, "-c", FREE_OF_OLDER_MEMORY], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) == MiB


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_peak_of_overlapping_allocations():
    def fn():
        a = torch.empty(4 * MiB // FLOAT, device="cuda")
        b = torch.empty(2 * MiB // FLOAT, device="cuda")
        del a
        return b

    result = measure_peak(fn, "cuda")
    assert result["method"] == "cuda_max_memory_allocated"
    assert result["peak_bytes"] == 6 * MiB  # multiples of 512 bytes: no rounding here
    assert result["end_bytes"] == 2 * MiB
    assert result["output_bytes"] == 2 * MiB
