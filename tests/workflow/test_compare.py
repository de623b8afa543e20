"""The cross-device comparison through the workflow, torch blocked: the shipped cpu run
beside SSM-Scope's imported runs (the anchors' clone; skipped where absent), checked
against its provenance, joined (rule compare_table) and drawn (rule figure_compare)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ssmbench.compare import read_compare
from tests.conftest import ANCHORS, snakemake, succeeded

CLONE = Path(os.environ.get("SSM_SCOPE_DIR") or ANCHORS / "ssm-scope")


def test_the_shipped_cpu_run_beside_ssm_scope_without_torch(new_workflow, tmp_path):
    if not CLONE.is_dir():
        pytest.skip(f"no SSM-Scope clone at {CLONE} (set SSM_SCOPE_DIR)")
    wf = new_workflow(shipped=("cpu",))
    blocker = tmp_path / "no-torch"
    (blocker / "torch").mkdir(parents=True)
    (blocker / "torch" / "__init__.py").write_text("raise ImportError('torch is blocked')\n")
    target = "figures/compare/devices/latency_across_devices.pdf"
    config = ["--config", "source=precollected", f"import_ssm_scope={CLONE}"]
    dry = succeeded(snakemake(wf, "-n", *config))
    # with source=precollected and an import, `all` asks for the three comparison figures
    assert dry.stdout.count("rule figure_compare:") == 3
    succeeded(snakemake(wf, target, *config, env={"PYTHONPATH": str(blocker)}))
    assert (wf / target).stat().st_size > 1000
    table = read_compare(wf / "results/compare/devices/compare.csv")
    assert list(dict.fromkeys(table.run)) == ["cpu", "ssm-scope-rtx4090", "ssm-scope-jetson"]
    prov = json.loads((wf / "results/compare/devices/compare.csv.prov.json").read_text())
    # the shipped run was checked against its manifest first, and its tables read
    assert "results/provenance/cpu.verified.json" in prov["inputs"]
    assert "results/precollected/cpu/tables/go_no_go.csv" in prov["inputs"]
