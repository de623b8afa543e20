"""Planning stays linear in the cells: the input functions Snakemake calls once or more
per job look cells up in sets built once on the Plan (scripts/bench_planning.py times it;
these tests count instead of timing).  And a run says how far it has come
(ssmbench.progress)."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from ssmbench import config, progress
from ssmbench.budget import cell_seconds, costs_for, jobs, paired_seconds
from ssmbench.matrix import Cell
from tests.conftest import snakemake

CI = config.plan(config.load(overrides={"preset": "ci"}))

# A dry run of the ci preset inside one process, with every comparison of two cells
# counted: a membership test against a tuple of N cells compares about N/2 cells, one
# against a set compares one.
COUNT_CELL_COMPARISONS = """
import sys
sys.path.insert(0, "src")
from snakemake.cli import main
from ssmbench.matrix import Cell

calls = 0
generated_eq = Cell.__eq__


def counted_eq(self, other):
    global calls
    calls += 1
    return generated_eq(self, other)


Cell.__eq__ = counted_eq  # the workflow imports this class: the module is already loaded
try:
    main(["--cores", "1", "-n", "--quiet", "--config", "preset=ci"])
except SystemExit as stop:
    print(f"cell comparisons: {calls}")
    sys.exit(stop.code)
"""


def test_a_dry_run_compares_each_planned_cell_a_few_times_not_with_every_cell(
    workflow_copy,
):
    out = subprocess.run(
        [sys.executable, "-c", COUNT_CELL_COMPARISONS],
        cwd=workflow_copy,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    calls = int(out.stdout.strip().splitlines()[-1].removeprefix("cell comparisons: "))
    planned = len(CI.cells) + len(CI.paired)
    # each bench job looks its cell up three times (params, cache source, priority): 188
    # comparisons in all; against the tuple of ci's 56 cells, 4,888
    assert 0 < calls <= 8 * planned, f"{calls} comparisons of cells for {planned} jobs"


def test_the_plans_lookups_hold_its_cells():
    assert CI.cell_set == frozenset(CI.cells) and len(CI.cell_set) == len(CI.cells)
    assert CI.paired_set == frozenset(CI.paired) and CI.paired
    assert CI.headline_pairs is CI.headline_pairs  # built once, not per call


@pytest.mark.parametrize(
    ("model", "backend", "expected"),
    [("mamba2", "torch", ["fp32"]), ("attention", "naive", ["fp32"]), ("mamba2", "fused", [])],
    ids=["planned", "attention-naive", "unplanned"],
)
def test_verify_dtypes_come_from_the_cells_of_the_pair(model, backend, expected):
    assert CI.verify_dtypes(model, backend) == expected
    # the answer is a copy: a caller that changes it changes no later answer
    CI.verify_dtypes(model, backend).append("fp16")
    assert CI.verify_dtypes(model, backend) == expected


def test_the_budget_plan_puts_the_headline_pairs_first():
    lease = config.plan(config.load(overrides={"preset": "lease"}), cuda=True)
    verify = [j.name for j in jobs(lease) if j.rule == "verify"]
    headline = {f"{m}/{b}" for m, b in lease.headline_pairs}
    assert headline and set(verify[: len(headline)]) == headline


# --- progress (ssmbench.progress) ---


def _written(path, at: float) -> str:
    path.write_text("{}")
    os.utime(path, (at, at))
    return str(path)


def test_progress_counts_outputs_written_since_the_start_and_scales_by_the_pace(tmp_path):
    started = 1_000_000.0
    tracked = [
        progress.Tracked("bench", (_written(tmp_path / "a", started + 50),), 10.0),
        progress.Tracked("bench", (str(tmp_path / "b"),), 15.0),  # not written yet
        progress.Tracked("paired", (_written(tmp_path / "c", started - 5),), 5.0),  # stale
        progress.Tracked("aggregate", (str(tmp_path / "d"),), 0.0),
    ]
    done, line = progress.report(tracked, started, now=started + 100)
    # 10 s of estimate took 100 s: the 20 s left are about 200 s at this pace
    assert done == 1
    assert line == "ssm-bench: 1/3 cells done (1/4 jobs), about 3 min left"
    for name in "bcd":
        _written(tmp_path / name, started + 120)
    assert progress.report(tracked, started, now=started + 130) == (
        4,
        "ssm-bench: 3/3 cells done (4/4 jobs)",
    )


def test_progress_prices_each_job_by_the_cost_model():
    w = SimpleNamespace(model="mamba2", backend="torch", phase="prefill", batch="1",
                        seq_len="32", d_state="4", dtype="fp32")  # fmt: skip
    jobs_ = [
        SimpleNamespace(rule=SimpleNamespace(name="bench"), output=["r.json"], wildcards=w),
        SimpleNamespace(rule=SimpleNamespace(name="paired"), output=["p.json"], wildcards=w),
        SimpleNamespace(rule=SimpleNamespace(name="all"), output=[], wildcards=w),
    ]
    tracked = progress.tracked_jobs(CI, jobs_)
    costs = costs_for("cpu")
    cell = Cell("mamba2", "torch", "prefill", 1, 32, 4, "fp32")
    assert [t.rule for t in tracked] == ["bench", "paired"]  # `all` writes nothing
    assert tracked[0].estimate_s == cell_seconds(CI, cell, costs)
    assert tracked[1].estimate_s == paired_seconds(CI, costs)


def test_a_run_prints_its_cells_done_and_time_left(workflow_copy):
    cells = [
        "results/ci/cells/mamba2/torch/prefill/b1-t32-n4-fp32.json",
        "results/ci/cells/attention/torch/prefill/b1-t32-n0-fp32.json",
    ]
    out = snakemake(workflow_copy, *cells, "--config", "preset=ci",
                    env={"SSMBENCH_PROGRESS_EVERY_S": "0"})  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line for line in out.stderr.splitlines() if line.startswith("ssm-bench: ")]
    assert lines[0].startswith("ssm-bench: 2 cells to measure (5 jobs), about ")
    assert any(" left" in line and "/2 cells done" in line for line in lines[1:])
    # the last progress line (the end-of-run summary of ssmbench.outcome follows it)
    assert [line for line in lines if "cells done" in line][-1] == (
        "ssm-bench: 2/2 cells done (5/5 jobs)"
    )
