"""Planning stays linear in the cells: the input functions Snakemake calls once or more
per job look cells up in sets built once on the Plan (scripts/bench_planning.py times it;
these tests count instead of timing)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ssmbench import config
from ssmbench.budget import jobs

CI = config.plan(config.load(overrides={"preset": "ci"}))

# A dry run of the ci preset inside one process, with every comparison of two cells
# counted: a membership test against a tuple of N cells compares about N/2 cells, one
# against a set compares one.
COUNT_CELL_COMPARISONS = """
import sys
sys.path.insert(0, "src")
from snakemake.cli import main
from ssmbench.config import Cell

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
