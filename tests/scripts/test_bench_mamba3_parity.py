"""scripts/bench_mamba3_parity.py: every row builds the model it names; run small (one epoch
of one seed), it writes each job's record and a summary with the per-epoch curve, reuses a
record it has, and --report tables what is there without training."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench_mamba3_parity.py"


def load_script():
    sys.path.insert(0, str(SCRIPT.parent))  # its `import _src`
    try:
        spec = importlib.util.spec_from_file_location("bench_mamba3_parity", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


def test_every_row_builds_its_model():
    """faithful is the project's model; zero-pad holds PAD's row at zero, as the task model
    did; block rows carry their Mamba3Mixer options to every layer."""
    from ssmbench.models.mamba3 import Mamba3Mixer
    from ssmbench.tasks.data import make
    from ssmbench.tasks.model import build_task_model

    script = load_script()
    data = make("parity", "train", 2, seed=0, seq_len=8)
    cfg = {"d_model": 16, "n_layers": 2, "d_state": 8, "headdim": 8}
    assert script.ROWS["faithful"] == {}
    for row, options in script.ROWS.items():
        model = build_task_model("mamba3", cfg, data, **options)
        assert (model.embed.padding_idx is None) == (row != "zero-pad"), row
        mixer = model.stack.mixers[0]
        block = script.BLOCK_CHANGES.get(row, {})
        plain = Mamba3Mixer(16, d_state=8, head_dim=8, **block)
        assert (mixer.A_mode, mixer.angle_bound) == (plain.A_mode, plain.angle_bound), row
        dt_range = block.get("dt_range", (1e-3, 1e-1))
        dt = torch.nn.functional.softplus(mixer.dt_bias)
        assert ((dt >= dt_range[0] * (1 - 1e-6)) & (dt <= dt_range[1] * (1 + 1e-6))).all(), row


@pytest.mark.slow
def test_a_small_run_writes_records_and_a_summary(tmp_path):
    rows = ["faithful", "mamba3-wide-dt-free-angle"]
    cmd = [sys.executable, str(SCRIPT), "--rows", *rows, "--seeds", "0", "--jobs", "1"]
    cmd += ["--epochs", "1", "--out", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [(s["row"], s["seed"], s["status"]) for s in summary] == [(r, 0, "ok") for r in rows]
    for s in summary:
        assert len(s["test_accuracy"]) == len(s["train_loss"]) == 1
        assert s["final"] == s["test_accuracy"][-1] and 0 <= s["final"] <= 1
    record = json.loads((tmp_path / f"{rows[1]}-s0.json").read_text())
    assert record["model"]["mixer_options"] == {"dt_range": [0.1, 1.0], "angle_bound": None}
    assert "epochs 20 -> 1" in record["cut"]
    lines = done.stdout.splitlines()
    assert any(line.startswith(rows[1]) and " 0  " in line for line in lines), done.stdout

    mtime = (tmp_path / f"{rows[0]}-s0.json").stat().st_mtime
    cmd = [sys.executable, str(SCRIPT), "--rows", "faithful", "--seeds", "0", "--jobs", "1"]
    cmd += ["--epochs", "1", "--out", str(tmp_path)]
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert again.returncode == 0 and (tmp_path / f"{rows[0]}-s0.json").stat().st_mtime == mtime
    report = subprocess.run(
        [sys.executable, str(SCRIPT), "--report", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    assert sum(line.startswith(tuple(rows)) for line in report.stdout.splitlines()) == 4
