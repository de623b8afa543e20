"""scripts/bench_paired_rerun.py: its coverage from rows with a known answer, and one small
real run of it (one pair, two runs of two processes at the ci preset)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench_paired_rerun.py"


def _module():
    spec = importlib.util.spec_from_file_location("bench_paired_rerun", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(runs=4, processes=5, process_sd=0.15, seed=0):
    """Rows as the workers print them: each process lands 15% off the true ratio 2.0 and
    its 30 rounds are 2% noisy."""
    rng = np.random.default_rng(seed)
    out = []
    for run in range(runs):
        for process in range(processes):
            landed = 2.0 * np.exp(process_sd * rng.standard_normal())
            ssm = 1 + 0.02 * rng.standard_normal(30)
            attention = landed * (1 + 0.02 * rng.standard_normal(30))
            out.append(
                dict(run=run, process=process, model="mamba2", phase="decode", seq_len=4096,
                     status="ok", attention=list(attention), ssm=list(ssm), loaded="")
            )  # fmt: skip
    return out


def test_one_process_intervals_miss_reruns_that_replicated_ones_cover():
    table, totals = _module().coverage(rows())
    (pair,) = table
    assert pair["runs"] == 4 and pair["processes"] == 20 and pair["couples"] == 12
    one = totals["one"][0] / totals["one"][1]
    replicated = totals["replicated"][0] / totals["replicated"][1]
    assert one < 0.3  # a process's rounds know nothing of the 15% between processes
    assert replicated >= 0.75
    assert pair["width_replicated"] > 3 * pair["width_one"]


def test_each_sides_time_per_run_shows_a_step_of_the_machine_between_runs():
    slowed = rows()
    for r in slowed:
        if r["run"] == 3:  # the host's memory slower for the whole last run: attention only
            r["attention"] = [1.25 * x for x in r["attention"]]
    (pair,) = _module().coverage(slowed)[0]
    (pair_before,) = _module().coverage(rows())[0]
    attention, ssm = zip(*pair["run_sides"], strict=True)
    assert attention[3] / attention[2] > 1.15 and attention[:3] == tuple(
        a for a, _ in pair_before["run_sides"][:3]
    )
    assert ssm == tuple(s for _, s in pair_before["run_sides"])


def test_a_small_real_run_prints_its_coverage(tmp_path):
    """Two runs of two processes, each run's processes spread over 6 s (the second starts
    3 s or more after its run's start, however fast the first was); a negative spread is a
    usage error."""
    out = tmp_path / "rerun.json"
    cmd = [sys.executable, str(SCRIPT), "--runs", "2", "--replicates", "2", "--preset", "ci"]
    cmd += ["--models", "mamba2", "--points", "decode:64", "--threads", "1", "--out", str(out)]
    done = subprocess.run([*cmd, "--spread-s", "6"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "coverage, one process:" in done.stdout and "coverage, 2 processes:" in done.stdout
    assert "mamba2    decode  T=64     attention " in done.stdout
    assert "each run's processes spread over 6 s" in done.stdout
    saved = json.loads(out.read_text())
    assert saved["runs"] == 2 and len(saved["rows"]) == 4 and saved["spread_s"] == 6
    starts = {(r["run"], r["process"]): r["started_s"] for r in saved["rows"]}
    assert starts[0, 1] >= 3 and starts[1, 1] >= 3  # whatever the machine's speed
    again = subprocess.run(
        [sys.executable, str(SCRIPT), "--from", str(out)], capture_output=True, text=True,
        timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    # the report from the saved rounds is the same report
    assert again.stdout.splitlines()[-2:] == done.stdout.splitlines()[-2:]
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "--spread-s", "-5"], capture_output=True, text=True,
        timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert bad.returncode == 2 and "--spread-s: must be a number >= 0, got -5" in bad.stderr
