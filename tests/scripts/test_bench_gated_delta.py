"""scripts/bench_gated_delta.py: its command line parses, transformers' side is the
module's pure-PyTorch function, the two sides agree on the same inputs once the
conventions are mapped (and the check says so when they do not), and a small run in two
processes prints each one's line with both medians and the ratio inside its interval, then
the median of their ratios with its hierarchical interval.  No timing is asserted."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench_gated_delta.py"

LINE = re.compile(
    r"^T=(?P<t>\d+)\s+ours_ms=\s*(?P<ours>[\d.]+) \(IQR [\d.]+-[\d.]+\)\s+"
    r"transformers_ms=\s*(?P<theirs>[\d.]+) \(IQR [\d.]+-[\d.]+\)\s+"
    r"transformers/ours=(?P<ratio>[\d.]+)x \[(?P<lo>[\d.]+), (?P<hi>[\d.]+)\]\s+"
    r"load=[\d.]+->[\d.]+$"
)


@pytest.fixture(scope="module")
def bench():
    """The script as a module."""
    sys.path.insert(0, str(SCRIPT.parent))  # its `import _src`
    try:
        spec = importlib.util.spec_from_file_location("bench_gated_delta", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


def test_help_parses():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, check=True
    )
    assert "--seq-len" in result.stdout and "--rounds" in result.stdout


def test_transformers_side_is_the_modules_own_function(bench):
    from transformers.models.qwen3_next import modeling_qwen3_next

    form = bench.transformers_form()
    assert form.__code__.co_filename == modeling_qwen3_next.__file__
    assert form.__name__ == "torch_chunk_gated_delta_rule"


def test_the_sides_agree_at_a_length_no_chunk_divides(bench):
    """T = 70 in chunks of 16: o and the final state of both sides within fp32."""
    lines = bench.check_agreement(bench.sides(bench.make_inputs(70), chunk=16))
    assert [line.split()[0] for line in lines] == ["o", "final_state"]
    assert all(" ok:" in line for line in lines), lines


def test_a_convention_left_unmapped_fails_the_check(bench):
    """Our side without transformers' 1 / sqrt(d_k) on q computes 8x the output: the
    check names what disagrees."""
    inputs = bench.make_inputs(40)
    calls = bench.sides(inputs, chunk=16)
    unscaled = bench.deltanet.delta_rule_torch

    def ours_unscaled():
        return unscaled(
            inputs["q"],
            inputs["k"],
            inputs["v"],
            inputs["beta"],
            g=inputs["g"],
            chunk_size=16,
            initial_state=inputs["initial_state"],
        )

    calls["ours"] = ours_unscaled
    with pytest.raises(ValueError, match=r"disagree: o \[fp32\] FAILED"):
        bench.check_agreement(calls)


SMALL = ["--seq-len", "64", "--rounds", "3", "--warmup", "0", "--chunk", "16", "--threads", "1"]
REPLICATED = re.compile(
    r"^T=64\s+over 2 processes: transformers/ours=(?P<ratio>[\d.]+)x "
    r"\[(?P<lo>[\d.]+), (?P<hi>[\d.]+)\] \(hierarchical\); per process "
    r"(?P<per>[\d.]+ [\d.]+); max/min [\d.]+$"
)


def test_two_processes_give_each_ones_line_and_the_median_ratio_with_its_hierarchical_interval():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *SMALL, "--processes", "2"],
        capture_output=True,
        text=True,
        check=True,
    )
    out = result.stdout.splitlines()
    per_process = [
        LINE.match(line.split(": ", 1)[1]) for line in out if line.startswith("process ")
    ]
    assert len(per_process) == 2 and all(per_process), result.stdout
    for m in per_process:  # each process's own line: its medians and ratio in its interval
        assert m["t"] == "64" and float(m["lo"]) <= float(m["ratio"]) <= float(m["hi"])
    (line,) = [m for line in out if (m := REPLICATED.match(line))]
    ratios = sorted(float(m["ratio"]) for m in per_process)
    # the printed per-process ratios are the processes' own lines' ratios, and the
    # estimate is their median (of two: their mean), inside its interval
    assert sorted(float(x) for x in line["per"].split()) == pytest.approx(ratios, abs=0.006)
    ratio, low, high = (float(line[key]) for key in ("ratio", "lo", "hi"))
    assert ratio == pytest.approx(sum(ratios) / 2, abs=0.006) and low <= ratio <= high
