"""The GPU path of the workflow, rehearsed on a CPU: one GPU job at a time, headline cells
first, prewarm jobs before fused cells, and scripts/gpu_check.sh under a budget that ends
before the run does, bringing home what the run made within the transfer's limits.

On this machine a cuda preset's jobs run and end quickly as ``unavailable`` (there is no
GPU), which is enough to see how Snakemake schedules them: every job's provenance sidecar
records when it started and ended."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tarfile
from datetime import datetime
from itertools import combinations
from pathlib import Path

import pandas as pd
import yaml

from ssmbench import config, paths
from ssmbench.devices import visible_gpus
from ssmbench.paths import REPO
from tests.conftest import snakemake

REHEARSAL = {
    "device": "cuda",
    "calibrate_quick": True,
    "size": {"d_model": 32, "n_layers": 1, "n_heads": 2, "head_dim": 16, "expand": 2,
             "d_conv": 4, "chunk": 16},
    "timing": {"warmup": 1, "min_samples": 3, "max_samples": 5, "min_time_s": 0.0,
               "max_time_s": 1.0, "timeout_s": 30},
    "headline": [{"models": ["mamba2"], "backends": ["fused"], "phases": ["prefill"]}],
    "sweeps": [
        {"models": ["attention", "mamba2"], "backends": ["torch", "fused"],
         "phases": ["prefill"], "batch": [1], "seq_len": [32], "d_state": [4],
         "dtype": ["bf16"]},
        {"models": ["mamba2"], "backends": ["fused-graph"], "phases": ["decode"],
         "batch": [1], "seq_len": [32], "d_state": [4], "dtype": ["bf16"]},
        {"models": ["attention"], "backends": ["torch"], "phases": ["prefill"],
         "batch": [1], "seq_len": [32], "d_state": [4], "dtype": ["bf16"], "profile": True},
    ],
}  # fmt: skip
RUN = "gpu-rehearsal"


def _rehearsal_plan() -> config.Plan:
    raw = config.load(overrides={"preset": RUN})
    raw["presets"][RUN] = REHEARSAL
    return config.plan(raw)


def _device_job_outputs(plan: config.Plan) -> list[str]:
    """Every output of a job that uses the GPU: calibrate, verify, prewarm, bench."""
    outputs = plan.device_records()
    outputs += [paths.verify_record(plan.run, m, b) for m, b in plan.pairs]
    outputs += [paths.prewarm(plan.run, m, b, d) for (m, b, d) in _prewarm_keys(plan)]
    outputs += [paths.cell_record(plan.run, c) for c in plan.cells]
    return outputs


def _prewarm_keys(plan: config.Plan):
    from ssmbench.prewarm import prewarm_groups

    return list(prewarm_groups(plan.cells))


def _interval(wf: Path, output: str) -> tuple[datetime, datetime]:
    prov = json.loads((wf / paths.prov(output)).read_text())
    return datetime.fromisoformat(prov["started"]), datetime.fromisoformat(prov["ended"])


def _run_rehearsal(new_workflow, tmp_path: Path, *extra: str) -> tuple[Path, config.Plan]:
    wf = new_workflow()
    overlay = tmp_path / "rehearsal.yaml"
    overlay.write_text(yaml.safe_dump({"presets": {RUN: REHEARSAL}}))
    plan = _rehearsal_plan()
    targets = _device_job_outputs(plan)
    out = snakemake(
        wf, *targets, "--cores", "4", *extra, "--configfile", str(overlay),
        "--config", f"preset={RUN}",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return wf, plan


def test_device_jobs_of_a_cuda_preset_never_overlap_and_headline_cells_go_first(
    new_workflow, tmp_path
):
    wf, plan = _run_rehearsal(new_workflow, tmp_path)
    outputs = _device_job_outputs(plan)
    spans = {o: _interval(wf, o) for o in outputs}
    overlapping = [
        (a, b) for a, b in combinations(outputs, 2)
        if spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]
    ]  # fmt: skip
    assert overlapping == [], "GPU jobs ran side by side"

    # the order: calibration, then the headline cell's verification and prewarm, then it
    first = min(outputs, key=lambda o: spans[o][0])
    assert first in plan.device_records()
    (headline,) = plan.headline
    headline_record = paths.cell_record(plan.run, headline)
    others = [paths.cell_record(plan.run, c) for c in plan.cells if c != headline]
    assert all(spans[headline_record][1] <= spans[o][0] for o in others)
    prewarm = paths.prewarm(plan.run, "mamba2", "fused", "bf16")
    assert spans[prewarm][1] <= spans[headline_record][0]
    # the graph cell reused its base's verification: no verify job of its own
    assert not (wf / paths.verify_record(plan.run, "mamba2", "fused-graph")).exists()


def test_the_device_cap_is_what_keeps_them_apart(new_workflow, tmp_path):
    """The control: with four GPUs' worth of the resource, the same jobs do overlap, so
    the check above can fail."""
    wf, plan = _run_rehearsal(new_workflow, tmp_path, "--resources", "gpu=4")
    outputs = _device_job_outputs(plan)
    spans = {o: _interval(wf, o) for o in outputs}
    assert any(
        spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1] for a, b in combinations(outputs, 2)
    )


def test_visible_devices_count_what_cuda_may_use(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,3")
    assert visible_gpus() == 3
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == 1  # none visible: a cuda preset still gets one slot
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    expected = (
        len(os.listdir("/proc/driver/nvidia/gpus"))
        if os.path.isdir("/proc/driver/nvidia/gpus")
        else 0
    )
    assert visible_gpus() == max(expected, 1)


def test_headline_cells_come_from_the_preset_selectors():
    plan = _rehearsal_plan()
    assert [(c.model, c.backend, c.phase) for c in plan.headline] == [
        ("mamba2", "fused", "prefill")
    ]
    assert plan.headline_pairs == {("mamba2", "fused")}
    lease = config.plan(config.load(overrides={"preset": "lease"}))
    assert all(c.batch == 1 for c in lease.headline)
    decode = {c.backend for c in lease.headline if c.phase == "decode"}
    assert {"fused", "fused-graph"} <= decode
    prefill = {c.model for c in lease.headline if c.phase == "prefill"}
    assert prefill == {"attention", "mamba2", "deltanet", "hybrid"}


def test_graph_backends_are_verified_through_their_base():
    plan = _rehearsal_plan()
    assert ("mamba2", "fused") in plan.pairs
    assert not any(b.endswith("-graph") for _, b in plan.pairs)
    # the base's verification covers the graph cells' dtypes too
    raw = config.load(overrides={"preset": RUN})
    raw["presets"][RUN] = {**REHEARSAL, "sweeps": REHEARSAL["sweeps"] + [
        {"models": ["mamba2"], "backends": ["fused-graph"], "phases": ["decode"],
         "batch": [1], "seq_len": [32], "d_state": [4], "dtype": ["fp16"]}]}  # fmt: skip
    wider = config.plan(raw)
    assert wider.verify_dtypes("mamba2", "fused") == ["bf16", "fp16"]
    assert wider.verify_dtypes("mamba2", "torch") == ["bf16"]


def _lease_script(wf: Path, dest: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        ["bash", "scripts/gpu_check.sh", str(dest), "ci", *args],
        cwd=wf,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
    )


def _check_brought_home(dest: Path, stdout: str, stopped: str) -> pd.DataFrame:
    """DEST holds what the transfer takes (at most 8 flat files of at most 16 MiB), a valid
    partial cells table with the cells never reached as not_run, the sidecars, and the
    summary, which the script printed last."""
    from ssmbench.tables import read_cells

    files = sorted(dest.iterdir())
    assert len(files) <= 8 and all(f.is_file() for f in files), [f.name for f in files]
    assert all(f.stat().st_size <= 16 << 20 for f in files)
    cells = read_cells(dest / "cells.csv")
    ci = config.plan(config.load(overrides={"preset": "ci"}))
    # what holds for any budget and any machine: every planned cell has a row, measured
    # (ok, or unavailable), never reached (not_run, saying why the run stopped) or cut
    # short (failed: its job started and was stopped); how many of each is the machine's
    assert len(cells) == len(ci.cells)
    assert set(cells.status) <= {"ok", "unavailable", "not_run", "failed"}, set(cells.status)
    not_run = cells.reason[cells.status == "not_run"].str.split(":").str[0]
    assert set(not_run) <= {stopped}
    killed = cells.reason[cells.status == "failed"]
    assert killed.str.contains("its job left no finished record").all(), list(killed)
    with tarfile.open(dest / "ssmbench-ci.tar.gz") as tar:
        names = set(tar.getnames())
        tar.extractall(dest.parent / "unpacked", filter="data")
    root = dest.parent / "unpacked"
    assert {"results/ci/tables/cells.csv", "results/ci/tables/cells.csv.prov.json"} <= names
    # every ok row's record came home with its sidecar, which vouches for it
    from ssmbench.matrix import Cell
    from ssmbench.provenance import vouched

    keys = ["model", "backend", "phase", "batch", "seq_len", "d_state", "dtype"]
    with contextlib.chdir(root):  # a sidecar names its output by the workflow's path
        for row in cells[cells.status == "ok"][keys].itertuples(index=False):
            assert vouched(paths.cell_record("ci", Cell(*row))), row
    summary = (dest / "summary.txt").read_text()
    assert stdout.rstrip().endswith(summary.rstrip())
    if (cells.status == "not_run").any():
        assert "not_run" in summary
    assert "manifest.txt" in {f.name for f in files}
    return cells


def test_the_lease_script_stops_at_its_budget_and_brings_the_partial_run_home(
    workflow_copy, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    wf = workflow_copy
    dest = tmp_path / "out"
    # 30 s for the plan and the run (no tests first: the SIGTERM rehearsal runs them), 25 s
    # to finish the tables and figures there is time for, 20 s to pack: what reaches `ok`
    # in 30 s is the machine's, what must hold is _check_brought_home's
    proc = _lease_script(wf, dest, "--budget-s", "75", "--reserve-s", "45")
    stdout, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, stdout[-4000:]
    assert "== budget: stopping the run" in stdout
    plan_line = next(line for line in stdout.splitlines() if line.startswith("plan of run"))
    assert "56 cells" in plan_line  # the plan was printed before the run
    _check_brought_home(dest, stdout, "budget")


def test_the_lease_script_brings_the_run_home_on_sigterm(workflow_copy, tmp_path, monkeypatch):
    import signal
    import time

    monkeypatch.chdir(tmp_path)
    wf = workflow_copy
    dest = tmp_path / "out"
    # one quick test first, not the default `-k gpu` selection (collecting it takes 7 s)
    proc = _lease_script(wf, dest, "--tests", "test_visible_devices_count_what_cuda_may_use")
    deadline = time.monotonic() + 300
    # wait until two cells are measured, then stop the script as a lease's end would
    # (Snakemake deletes the outputs of a job it has not yet seen end: the second cell and
    # the pause after it leave the first one seen)
    cells = wf / "results" / "ci" / "cells"
    while len(list(cells.rglob("*.json.prov.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(1)
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, stdout[-4000:]
    assert "== SIGTERM after" in stdout
    assert (dest / "pytest.txt").read_text().rstrip().splitlines()[-1].startswith("1 passed")
    cells = _check_brought_home(dest, stdout, "sigterm")
    assert (cells.status == "ok").any()  # the first cell it waited for came home


def test_pytest_k_gpu_leaves_out_the_long_rehearsals():
    """A lease's first command is `pytest -k gpu` (the checks only a GPU can make): none of
    this module's CPU rehearsals, which take minutes, may carry "gpu" in its name."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-k", "gpu", "-m", "slow", str(REPO / "tests")],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 5, out.stdout[-2000:]  # 5: no test collected
