"""scripts/bench_ratios.py, run small: one line per family with warm and cold timings whose
ratios are the printed speed-ups, then the SSD line, then min_speedup over the families."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAMILY = re.compile(
    r"^(?P<family>\w+)\s+T=64 naive_ms=\s*(?P<naive>[\d.]+) torch_ms=\s*(?P<torch>[\d.]+) "
    r"speedup=\s*(?P<speedup>[\d.]+)x \[95% CI (?P<lo>[\d.]+)-(?P<hi>[\d.]+)\] "
    r"torch_gflops=\s*[\d.]+ matmul_gflops=\s*[\d.]+ "
    r"of_matmul=\s*[\d.]+% \| cold: naive_ms=\s*(?P<cold_naive>[\d.]+) "
    r"torch_ms=\s*(?P<cold_torch>[\d.]+) speedup=\s*(?P<cold_speedup>[\d.]+)x$"
)
SSD = re.compile(r"^ssd\s+T=64 chunk=16\s+torch_ms=.* of_matmul=\s*[\d.]+% \| cold: torch_ms=")


@pytest.fixture(scope="module")
def output() -> list[str]:
    cmd = [sys.executable, str(ROOT / "scripts" / "bench_ratios.py"), "--seq-len", "64"]
    cmd += ["--samples", "4", "--threads", "1", "--families", "mamba2", "deltanet"]
    cmd += ["--ssd-chunks", "16"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_one_line_per_family_with_its_ratios(output):
    rows = [m.groupdict() for line in output if (m := FAMILY.match(line))]
    assert [r["family"] for r in rows] == ["mamba2", "deltanet"], output
    for r in rows:
        warm = float(r["naive"]) / float(r["torch"])
        cold = float(r["cold_naive"]) / float(r["cold_torch"])
        # printed to 2 decimals (ms) and 1 (ratio): agree to the rounding
        assert float(r["speedup"]) == pytest.approx(warm, rel=0.05, abs=0.06)
        assert float(r["cold_speedup"]) == pytest.approx(cold, rel=0.05, abs=0.06)
        # the interval of the rounds (paired) holds the estimate, to the rounding
        assert float(r["lo"]) - 0.06 <= float(r["speedup"]) <= float(r["hi"]) + 0.06
    minimum = min(float(r["naive"]) / float(r["torch"]) for r in rows)
    assert output[-1].startswith("min_speedup=")
    assert float(output[-1].split("=")[1]) == pytest.approx(minimum, rel=0.05, abs=0.06)


def test_ssd_line_at_each_chunk(output):
    assert sum(bool(SSD.match(line)) for line in output) == 1, output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--families", "mamba4"], "argument --families: invalid choice: 'mamba4'"),
        (["--samples", "0"], "argument --samples: must be a positive integer, got 0"),
    ],
)
def test_bad_arguments_are_named(args, message):
    cmd = [sys.executable, str(ROOT / "scripts" / "bench_ratios.py"), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and message in done.stderr, done.stderr
