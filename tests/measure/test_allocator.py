"""The measuring process's malloc policy (ssmbench.measure.allocator), in a fresh process
each time: a policy, once set, lasts for the process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ssmbench.measure import allocator

LINUX = sys.platform.startswith("linux")


def in_fresh_process(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return out.stdout.strip()


FAULTS_PER_CALL = """
import resource, torch
from ssmbench.measure.allocator import set_host_allocator
said = set_host_allocator({policy!r})
from ssmbench import ops
g = torch.Generator().manual_seed(0)
b, t, h, p, n = 1, 4096, 8, 64, 16
x, B, C = torch.randn(b, t, h, p, generator=g), *torch.randn(2, b, t, 1, n, generator=g)
dt, lam = 0.01 + 0.09 * torch.rand(b, t, h, generator=g), torch.rand(b, t, h, generator=g)
A, theta = -0.5 - 1.5 * torch.rand(b, t, h, generator=g), torch.rand(b, t, h, n // 2, generator=g)
with torch.inference_mode():
    for i in range(7):
        if i == 2:  # after two warm-up calls
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        ops.mamba3(x, dt, A, B, C, theta, lam, chunk_size=64, backend="torch")
print(said, "|", (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)
"""


@pytest.mark.skipif(not LINUX, reason="glibc's mallopt: Linux only")
def test_retain_keeps_freed_memory_so_a_prefill_does_not_fault_its_pages_in_again():
    """A Mamba-3 prefill at T = 4096 (the cpu preset's block) allocates and frees tens of
    megabytes per call: under the C library's defaults it page-faults them in again on
    every call (5 000 - 12 000 minor faults per call on the 2-core VM), with freed memory
    kept next to none."""
    said, kept = in_fresh_process(FAULTS_PER_CALL.format(policy="retain")).split(" | ")
    assert said == "glibc, freed memory kept (M_MMAP_MAX=0, M_TRIM_THRESHOLD=1 GiB)"
    said, system = in_fresh_process(FAULTS_PER_CALL.format(policy="system")).split(" | ")
    assert said == "system"
    # kept memory leaves a few hundred faults per call (first touches of new pages, more
    # on a loaded machine: 100-720 seen); the defaults fault the working set in again,
    # 400-12 000 times per call (glibc's mmap threshold adapts to the frees it has seen)
    kept, system = float(kept), float(system)
    assert kept < system, (system, kept)
    if system > 2000:
        assert kept < system / 5, (system, kept)


def test_a_policy_is_named_and_checked():
    with pytest.raises(ValueError, match="host_allocator must be one of"):
        allocator.set_host_allocator("jemalloc")


@pytest.mark.skipif(not LINUX, reason="glibc's mallopt: Linux only")
def test_system_after_retain_in_one_process_says_what_is_in_force():
    said = in_fresh_process(
        "from ssmbench.measure.allocator import set_host_allocator as s\n"
        "s('retain'); print(s('system'))"
    )
    assert said.endswith("(retain was set earlier in this process)")
