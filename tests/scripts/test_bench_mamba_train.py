"""scripts/bench_mamba_train.py: its old side is the torch backend's scan and causal conv
as they ran under autograd before, which differentiate to the same gradients, the sides
swap back, and a small run prints one line per case and clock with the ratio of its
medians inside its interval.  No timing is asserted."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ssmbench.matrix import Size
from ssmbench.models import build_model, mamba
from ssmbench.models.common import CausalConv1d
from ssmbench.numerics import assert_close

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench_mamba_train.py"

LINE = re.compile(
    r"^(?P<case>[\w-]+)\s+(?P<clock>wall|cpu)\s+old_ms=\s*(?P<old>[\d.]+) \(IQR [\d.]+-[\d.]+\)"
    r"\s+new_ms=\s*(?P<new>[\d.]+) \(IQR [\d.]+-[\d.]+\)\s+"
    r"speedup=(?P<ratio>[\d.]+)x \[(?P<lo>[\d.]+), (?P<hi>[\d.]+)\]$"
)


@pytest.fixture(scope="module")
def bench():
    """The script as a module."""
    spec = importlib.util.spec_from_file_location("bench_mamba_train", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_forms_swap_the_scan_and_the_conv_and_restore_them(bench):
    scan, shifted = mamba.SCAN_BACKENDS["torch"], CausalConv1d.shifted
    with bench.forms("old"):
        assert mamba.SCAN_BACKENDS["torch"] is bench.selective_scan_autograd
        assert CausalConv1d.shifted is bench.conv1d_autograd
    with pytest.raises(RuntimeError), bench.forms("old"):
        raise RuntimeError("a failing step")
    assert (mamba.SCAN_BACKENDS["torch"], CausalConv1d.shifted) == (scan, shifted)
    with bench.forms("new"):
        assert (mamba.SCAN_BACKENDS["torch"], CausalConv1d.shifted) == (scan, shifted)
    with pytest.raises(ValueError, match="unknown side 'older'"), bench.forms("older"):
        pass


def test_both_sides_train_the_same_function(bench):
    """fp64, a two-layer Mamba-1 of awkward width at B2-T37: the same outputs and the same
    gradients for every parameter through the old forms and the new ones."""
    size = Size(d_model=20, n_layers=2, n_heads=1, head_dim=20, expand=2, d_conv=4, chunk=8)
    net = build_model("mamba", size, 5, "torch", dtype=torch.float64, seed=3)
    x = torch.randn(2, 37, 20, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    results = {}
    for side in bench.SIDES:
        net.zero_grad(set_to_none=True)
        with bench.forms(side):
            y, _ = net(x)
            y.square().mean().backward()
        results[side] = [y.detach()] + [p.grad for p in net.parameters()]
    names = ["y"] + [f"grad_{name}" for name, _ in net.named_parameters()]
    for name, old, new in zip(names, results["old"], results["new"], strict=True):
        assert_close(name, old, new, "fp64")


def test_time_case_interleaves_rounds_of_each_side_and_clock(bench):
    calls = []
    times = bench.time_case(lambda: calls.append(mamba.SCAN_BACKENDS["torch"]), 3, warmup=1)
    assert {side: sorted(t) for side, t in times.items()} == {
        side: sorted(bench.CLOCKS) for side in bench.SIDES
    }
    assert all(len(ms) == 3 for t in times.values() for ms in t.values())
    old, new = bench.selective_scan_autograd, mamba.SCAN_BACKENDS["torch"]
    # each side twice in a row (the second timed), the sides' order alternating
    assert calls == [old, old, new, new, new, new, old, old] * 2


def test_a_small_run_prints_a_line_per_case_and_clock():
    cmd = [sys.executable, str(SCRIPT)]
    cmd += ["--cases", "prefill-1024", "--rounds", "3", "--warmup", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    rows = [m.groupdict() for line in done.stdout.splitlines() if (m := LINE.match(line))]
    assert [(r["case"], r["clock"]) for r in rows] == [
        ("prefill-1024", "wall"),
        ("prefill-1024", "cpu"),
    ], done.stdout
    for r in rows:  # printed to 1 decimal (ms) and 2 (ratio)
        assert float(r["lo"]) - 0.01 <= float(r["ratio"]) <= float(r["hi"]) + 0.01


@pytest.mark.parametrize(
    "args, message",
    [
        (["--cases", "parity-2"], "argument --cases: invalid choice: 'parity-2'"),
        (["--rounds", "0"], "argument --rounds: must be a positive integer, got 0"),
    ],
    ids=["unknown-case", "no-rounds"],
)
def test_bad_arguments_are_named(args, message):
    cmd = [sys.executable, str(SCRIPT), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and message in done.stderr, done.stderr
