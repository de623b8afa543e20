"""Prewarm jobs (ssmbench.prewarm): which cells each job runs, and that it runs them once
each, recording what failed or was skipped instead of stopping."""

from __future__ import annotations

from ssmbench import config
from ssmbench.cell import CellSpec
from ssmbench.matrix import Cell
from ssmbench.prewarm import prewarm, prewarm_groups

CI = config.plan(config.load(overrides={"preset": "ci"}))


def _spec_of(cell: Cell) -> CellSpec:
    return CellSpec("ci", cell, "cpu", CI.size, CI.timing, seed=0)


def _passed(*phases: str, failed: tuple[str, ...] = ()) -> dict:
    verdicts = {p: {"status": "passed", "reason": ""} for p in phases}
    verdicts.update({p: {"status": "failed", "reason": "y off by 1e-1"} for p in failed})
    return {"status": "failed" if failed else "passed", "reason": "", "phases": verdicts}


def test_one_job_per_fused_or_compiled_model_and_dtype_graph_cells_included():
    lease = config.plan(config.load(overrides={"preset": "lease"}))
    groups = prewarm_groups(lease.cells)
    assert {backend for _, backend, _ in groups} == {"fused"}
    mamba2 = groups[("mamba2", "fused", "bf16")]
    # the fused-graph decode cell runs the fused decode step: one shape, not two
    assert [(c.phase, c.seq_len) for c in mamba2 if c.phase == "decode"] == [("decode", 16384)]
    assert {c.phase for c in mamba2} == {"prefill", "decode", "train"}
    sizes = [c.batch * c.seq_len for c in mamba2]
    assert sizes == sorted(sizes)  # cheapest first
    assert prewarm_groups(CI.cells) == {}  # naive and torch compile nothing


def test_prewarm_runs_each_shape_once_and_records_failures():
    cells = [
        Cell("mamba2", "torch", "prefill", 1, 32, 4, "fp32"),
        Cell("mamba2", "fused", "train", 1, 32, 4, "fp32"),  # no CUDA: its kernels refuse
        Cell("mamba2", "torch", "decode", 1, 64, 4, "fp32"),
    ]
    record = prewarm(_spec_of, cells, _passed("prefill", "train", "decode"), budget_s=300)
    status = [(s["phase"], s["status"]) for s in record["shapes"]]
    assert status == [("prefill", "done"), ("train", "failed"), ("decode", "done")]
    assert "BackendUnavailable" in record["shapes"][1]["reason"]
    assert record["status"] == "partial" and "train b1 t32: failed" in record["reason"]
    assert all(s["seconds"] >= 0 for s in record["shapes"])


def test_prewarm_skips_phases_that_failed_verification_and_shapes_past_its_budget():
    cells = [
        Cell("attention", "torch", "prefill", 1, 32, 0, "fp32"),
        Cell("attention", "torch", "prefill", 1, 64, 0, "fp32"),
        Cell("attention", "torch", "decode", 1, 32, 0, "fp32"),
    ]
    record = prewarm(_spec_of, cells, _passed("prefill", failed=("decode",)), budget_s=0.0)
    status = [(s["phase"], s["seq_len"], s["status"]) for s in record["shapes"]]
    assert status == [
        ("prefill", 32, "done"),  # the first shape runs whatever the budget
        ("prefill", 64, "skipped"),
        ("decode", 32, "skipped"),
    ]
    assert "budget" in record["shapes"][1]["reason"]
    assert record["shapes"][2]["reason"].startswith("verification failed")
    assert record["status"] == "partial"


def test_prewarm_runs_nothing_when_no_phase_passed_verification():
    cells = [Cell("attention", "torch", "prefill", 1, 32, 0, "fp32")]
    verify = {"status": "unavailable", "reason": "no CUDA", "phases": {}}
    record = prewarm(_spec_of, cells, verify, budget_s=300)
    assert record["status"] == "skipped" and record["shapes"] == []
