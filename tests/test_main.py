"""The command line (``python -m ssmbench``): one cell printed as its record, bad arguments
refused."""

from __future__ import annotations

import json
import subprocess
import sys


def test_command_line_prints_the_record(tmp_path):
    out_path = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "ssmbench", "cell", "--preset", "ci", "--model", "attention"]
    cmd += ["--backend", "naive", "--seq-len", "40", "--threads", "1", "--out", str(out_path)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["status"] == "ok" and record["seq_len"] == 40 and record["d_state"] == 0
    assert record["verify"]["status"] == "passed"
    assert json.loads(out_path.read_text()) == record


def test_command_line_rejects_bad_arguments():
    cmd = [sys.executable, "-m", "ssmbench", "cell", "--model", "mamba", "--backend", "torch"]
    bad = subprocess.run(cmd + ["--seq-len", "-5"], capture_output=True, text=True)
    assert bad.returncode == 2 and "must be a positive integer, got -5" in bad.stderr
    bad = subprocess.run(
        cmd + ["--seq-len", "8", "--preset", "tpu"], capture_output=True, text=True
    )
    assert bad.returncode != 0 and "unknown preset 'tpu'" in bad.stderr
