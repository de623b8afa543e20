"""The workflow end to end on the `ci` preset, in a temporary copy of the repository."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from ssmbench import config as sbconfig
from ssmbench import paths
from ssmbench.provenance import sha256, write_manifest
from ssmbench.shipped import precollected_runs
from tests.conftest import ANCHORS, snakemake

CI = sbconfig.plan(sbconfig.load(overrides={"preset": "ci"}))


def check(out):
    assert out.returncode == 0, f"snakemake failed:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}"
    return out


def outputs_without_sidecar(root: Path) -> list[Path]:
    files = [p for p in root.rglob("*") if p.is_file() and not p.name.endswith(".prov.json")]
    return [p for p in files if not Path(f"{p}.prov.json").is_file()]


def test_tables_hold_every_cell_verified_and_measured(ci_run):
    tables = ci_run / "results" / "ci" / "tables"
    cells = pd.read_csv(tables / "cells.csv")
    assert len(cells) == len(CI.cells) == 7 * 2 * 2 + 7 * 2 * 2  # prefill; decode, train
    assert set(cells.phase) == {"prefill", "decode", "train"}
    assert (cells.status == "ok").all(), cells[["model", "backend", "status", "reason"]]
    # utilization against the run's own calibration
    device = json.loads((ci_run / "results" / "ci" / "device.json").read_text())
    ceiling = device["ceilings"]["tflops"]["fp32"]
    assert cells.ceiling_tflops.eq(ceiling).all()
    # each unreplicated row from its record, recomputed here from the raw samples
    for cell in (c for c in CI.cells if c not in CI.headline):
        record = json.loads((ci_run / paths.cell_record("ci", cell)).read_text())
        row = cells[
            (cells.model == cell.model)
            & (cells.backend == cell.backend)
            & (cells.phase == cell.phase)
            & (cells.seq_len == cell.seq_len)
        ].iloc[0]
        median = float(np.median(record["samples_ms"]))
        tflops = record["flop"] / (median / 1e3) / 1e12
        assert row.time_ms_median == pytest.approx(median, rel=1e-12), cell
        assert row.tflops == pytest.approx(tflops, rel=1e-9), cell
        assert row.compute_util == pytest.approx(tflops / ceiling, rel=1e-9), cell
    assert (
        cells.peak_bytes == cells.weights_bytes + cells.cache_bytes + cells.activations_bytes
    ).all()
    ops = pd.read_csv(tables / "ops.csv")
    assert len(ops) == len(CI.profiled) * 7
    assert ops.groupby(["model", "seq_len"]).share.sum().round(6).eq(1.0).all()
    assert (cells.time_ms_p95 >= cells.time_ms_median).all()
    assert (cells.flop > 0).all() and (cells.bytes > 0).all()
    # the headline cells in two processes each: a record per process, one row per cell
    # (the median process) with the spread and the interval over both, every sample kept
    samples = pd.read_parquet(tables / "samples.parquet")
    replicated = cells[cells.replicates > 1]
    assert len(replicated) == len(CI.headline) == 2
    assert (replicated.replicates_ok == 2).all() and replicated.time_interval.eq(
        "hierarchical"
    ).all()
    extra = 0
    for cell in CI.headline:
        record = json.loads((ci_run / paths.cell_record("ci", cell, 1)).read_text())
        assert record["replicate"] == 1 and record["replicates"] == 2
        extra += record["n_samples"]
        kept = samples[(samples.model == cell.model) & (samples.phase == "decode")]
        assert set(kept[kept.seq_len == cell.seq_len].replicate) == {0, 1}
    assert len(samples) == cells.n_samples.sum() + extra
    parquet = pd.read_parquet(tables / "cells.parquet")
    assert list(parquet.columns) == list(cells.columns) and len(parquet) == len(cells)
    verify = pd.read_csv(tables / "verify.csv")
    assert set(zip(verify.model, verify.backend, strict=True)) == set(CI.pairs)
    assert (verify.status == "passed").all() and verify.ok.all()


def test_every_cell_counts_its_ops_and_the_run_its_dispatch_cost(ci_run):
    """The records of a CPU run carry n_ops (ATen ops of one untimed call), the cells
    table their values, and device.json the dispatch ceiling the floors divide by."""
    from ssmbench.measure.ceilings import dispatch_us

    cells = pd.read_csv(ci_run / "results" / "ci" / "tables" / "cells.csv")
    for cell in CI.cells:
        record = json.loads((ci_run / paths.cell_record("ci", cell)).read_text())
        assert isinstance(record["n_ops"], int) and record["n_ops"] > 0, cell
        assert record["n_ops_kind"] == "aten_ops" and record["n_ops_method"], cell
        row = cells[
            (cells.model == cell.model)
            & (cells.backend == cell.backend)
            & (cells.phase == cell.phase)
            & (cells.seq_len == cell.seq_len)
        ]
        if cell not in CI.headline:  # a replicated row is its median process's
            assert row.n_ops.iloc[0] == record["n_ops"], cell
    # a naive prefill loops over T in Python: more ops than the torch form of the same cell
    naive = cells[(cells.backend == "naive")].set_index(["model", "seq_len"]).n_ops
    torch_ = cells[(cells.backend == "torch") & (cells.phase == "prefill")]
    assert (naive > torch_.set_index(["model", "seq_len"]).n_ops.reindex(naive.index)).all()
    device = json.loads((ci_run / "results" / "ci" / "device.json").read_text())
    block = device["dispatch"]
    assert dispatch_us(device) == block["eager_us"] > 0 and block["graph_us"] is None
    assert len(block["samples_us"]) == block["repeats"]


def test_figure_and_executed_notebook(ci_run):
    figures = ci_run / "figures" / "ci"
    for figure in CI.figures:
        for ext in ("pdf", "png", "ipynb"):
            assert (figures / f"{figure}.{ext}").stat().st_size > 1000, figure
    # the profiled cells' traces are kept beside their ops rows
    assert len(list((ci_run / "results" / "ci" / "profile").rglob("*.trace.json.gz"))) == 2
    notebook = json.loads((figures / "latency_scaling.ipynb").read_text())
    tags = [c["metadata"].get("tags", []) for c in notebook["cells"]]
    injected = [
        c for c, t in zip(notebook["cells"], tags, strict=True) if "injected-parameters" in t
    ]
    assert "results/ci/tables/figures/latency_scaling.csv" in "".join(injected[0]["source"])


def test_every_output_has_a_provenance_sidecar(ci_run):
    assert outputs_without_sidecar(ci_run / "results" / "ci") == []
    assert outputs_without_sidecar(ci_run / "figures" / "ci") == []
    record = next((ci_run / "results" / "ci" / "cells").rglob("*.json.prov.json"))
    prov = json.loads(record.read_text())
    for key in (
        "rule",
        "wildcards",
        "params",
        "command",
        "inputs",
        "outputs",
        "git",
        "packages",
        "device",
        "seed",
        "host",
        "started",
        "ended",
    ):
        assert key in prov, key
    assert prov["rule"] == "bench" and prov["packages"]["torch"].startswith("2.13")
    output = Path(ci_run / prov["output"])
    assert prov["outputs"][prov["output"]] == sha256(output)


def test_second_run_has_nothing_to_do(ci_run):
    out = check(snakemake(ci_run, "-n", "--config", "preset=ci"))
    assert "Nothing to be done" in out.stdout + out.stderr


def test_artifact_evaluation_without_torch(ci_run, tmp_path):
    """Every figure from precollected tables, with torch made unimportable."""
    wf = tmp_path / "ae"
    shutil.copytree(ci_run, wf, ignore=shutil.ignore_patterns(".snakemake"))
    # shipped as it ran, under its own name (a sidecar names its run's path)
    shutil.copytree(wf / "results" / "ci" / "tables", wf / "results/precollected/ci/tables")
    write_manifest(wf / "results/precollected/ci")  # shipped runs are checked first
    for shipped in ("lm-cpu", "tasks-cpu"):  # a whole-model run and a run with tasks
        shipped_run = Path("results") / "precollected" / shipped
        shutil.copytree(paths.REPO / shipped_run, wf / shipped_run)
    shutil.rmtree(wf / "results" / "ci")
    shutil.rmtree(wf / "figures")
    blocker = tmp_path / "no-torch"
    (blocker / "torch").mkdir(parents=True)
    (blocker / "torch" / "__init__.py").write_text(
        "raise ImportError('torch is blocked: artifact evaluation must not import it')\n"
    )
    check(snakemake(wf, "--config", "source=precollected", env={"PYTHONPATH": str(blocker)}))
    runs = precollected_runs(wf / "results" / "precollected")
    assert "ci" in runs
    assert "lm-cpu" in runs  # a whole-model run draws too, from its lm tables
    assert "tasks-cpu" in runs  # and a run with tasks, its task figures
    for run in runs:
        figures = sbconfig.shipped_figures(wf / "results" / "precollected" / run, CI.figures)
        for figure in figures:
            for ext in ("pdf", "png", "ipynb"):
                path = wf / "figures" / "precollected" / run / f"{figure}.{ext}"
                assert path.is_file(), (run, figure)
    assert outputs_without_sidecar(wf / "figures") == []
    # nothing measured, and no figure drawn where a live run of the same name would draw
    assert not (wf / "results" / "ci").exists()
    assert sorted(p.name for p in (wf / "figures").iterdir()) == ["precollected"]


def test_the_lease_script_collects_a_finished_run_and_prints_its_summary(ci_run, tmp_path):
    """scripts/gpu_check.sh on its CPU path: the finished ci run needs no job, and the
    script packs tables, records, provenance and figures and prints the summary last."""
    import subprocess
    import sys
    import tarfile

    dest = tmp_path / "out"
    out = subprocess.run(
        ["bash", "scripts/gpu_check.sh", str(dest), "ci"],
        cwd=ci_run,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    with tarfile.open(dest / "ssmbench-ci.tar.gz") as tar:
        names = set(tar.getnames())
    assert "results/ci/tables/cells.csv" in names and "results/ci/device.json" in names
    assert "results/ci/tables/cells.csv.prov.json" in names
    assert "figures/ci/roofline.pdf" in names and "figures/ci/roofline.pdf.prov.json" in names
    assert any(n.startswith("results/ci/cells/mamba2/torch/decode/") for n in names)
    assert not any(n.endswith(".trace.json.gz") for n in names)
    with tarfile.open(dest / "traces-ci.tar.gz") as tar:
        assert len(tar.getnames()) == len(CI.profiled)
    summary = (dest / "summary.txt").read_text()
    assert summary.splitlines()[0].startswith(f"== ci: {len(CI.cells)} cells")
    assert "mamba3" in summary and out.stdout.rstrip().endswith(summary.rstrip())
    assert f"outputs in {dest}" in out.stdout


def test_one_figure_runs_only_its_cells(workflow_copy, tmp_path):
    wf = workflow_copy
    override = tmp_path / "only-mamba.yaml"
    override.write_text(yaml.safe_dump({"figures": {"latency_scaling": {"models": ["mamba"]}}}))
    out = check(
        snakemake(
            wf,
            "figures/ci/latency_scaling.pdf",  # targets before --config, which takes the rest
            "-n",
            "--configfile",
            str(override),
            "--config",
            "preset=ci",
        )
    )
    stats = out.stdout.split("Job stats:")[1]
    counts = dict(line.split() for line in stats.splitlines()[3:] if len(line.split()) == 2)
    assert counts["bench"] == "4" and counts["verify"] == "2"  # mamba x {naive, torch} x 2 T
    assert "aggregate" not in counts


def test_ssm_scope_data_draws_through_our_notebooks(workflow_copy):
    """--config import_ssm_scope=<clone>: their CSVs become runs, drawn by our figures."""
    clone = Path(os.environ.get("SSM_SCOPE_DIR") or ANCHORS / "ssm-scope")
    if not clone.is_dir():
        pytest.skip(f"no SSM-Scope clone at {clone} (set SSM_SCOPE_DIR)")
    wf = workflow_copy
    target = "figures/imported/ssm-scope-rtx4090/ttft_tpot_crossover.pdf"
    check(snakemake(wf, target, "--config", f"import_ssm_scope={clone}"))
    assert (wf / target).stat().st_size > 1000 and (wf / f"{target}.prov.json").is_file()
    cells = pd.read_csv(wf / "results/imported/ssm-scope-rtx4090/tables/cells.csv")
    assert {"prefill", "decode"} <= set(cells.phase) and not (wf / "results" / "ci").exists()
