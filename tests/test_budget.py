"""The cost model (ssmbench.budget): the lease preset fits its lease by arithmetic, and the
estimate of each job follows the preset's timing budget."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from ssmbench import budget, config

LEASE_LIMIT_S = 7 * 60  # the bound: leaves time to install and pack


def _plan(preset: str) -> config.Plan:
    return config.plan(config.load(overrides={"preset": preset}))


def test_the_lease_preset_is_sized_to_finish_in_seven_minutes():
    plan = _plan("lease")
    assert plan.device == "cuda" and plan.headline
    assert budget.total_seconds(plan) <= LEASE_LIMIT_S
    # and it is the larger h200 preset's job to take longer loans
    assert budget.total_seconds(_plan("h200")) > LEASE_LIMIT_S


def test_every_job_of_the_plan_is_counted_once():
    plan = _plan("lease")
    jobs = budget.jobs(plan)
    rules = [j.rule for j in jobs]
    assert rules.count("bench") == len(plan.cells)
    assert rules.count("verify") == len(plan.pairs)
    assert rules.count("profile") == len(plan.profiled)
    assert rules.count("calibrate") == 1 and rules[0] == "calibrate"
    assert all(j.seconds > 0 for j in jobs)
    # each replicate of a paired cell is a job of its own, and priced
    assert {plan.replicates(c) for c in plan.paired} == {3}  # the headline pairs: k >= 3
    assert rules.count("paired") == 3 * len(plan.paired)
    paired = [j.name for j in jobs if j.rule == "paired"]
    assert len(set(paired)) == len(paired) and paired[0].endswith("-r0")
    # headline cells are listed (and scheduled) before the others
    bench = [j.name for j in jobs if j.rule == "bench"]
    headline = {
        f"{c.model}/{c.backend}/{c.phase}/b{c.batch}-t{c.seq_len}-{c.dtype}" for c in plan.headline
    }
    assert len(headline) < len(bench) and set(bench[: len(headline)]) == headline


def test_a_cells_estimate_is_its_timing_budget_plus_start_up():
    plan = _plan("lease")
    costs = budget.CUDA_COSTS
    cell = next(c for c in plan.cells if c.backend == "fused" and c.phase == "prefill")
    t = plan.timing
    expected = costs.start_s + costs.cuda_init_s + costs.build_s + t.warmup_s
    expected += max(t.max_time_s, budget.ENERGY_WINDOW_S)
    assert budget.cell_seconds(plan, cell, costs) == pytest.approx(expected)
    # a cell never outlasts its timeout, however long its sampling budget
    long = replace(plan, timing=replace(t, max_time_s=1000.0))
    capped = costs.start_s + costs.cuda_init_s + t.timeout_s
    assert budget.cell_seconds(long, cell, costs) == pytest.approx(capped)
    compiled = replace(cell, backend="compile")
    assert budget.cell_seconds(plan, compiled, costs) > budget.cell_seconds(plan, cell, costs)


def test_triton_compilation_is_paid_once_per_kernel_family():
    plan = _plan("lease")
    verify = {j.name: j.seconds for j in budget.jobs(plan) if j.rule == "verify"}
    # the hybrid runs Mamba-2's kernels: whichever of the two comes first pays them
    pays = [name for name in ("mamba2/fused", "hybrid/fused") if verify[name] > 20]
    assert len(pays) == 1
    assert verify["attention/fused"] < 20  # FlashAttention ships compiled


def test_plan_is_printed_by_the_command_line():
    out = subprocess.run(
        [sys.executable, "-m", "ssmbench", "plan", "--preset", "lease", "--jobs"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = out.stdout.splitlines()
    assert lines[0].startswith("plan of run 'lease' (preset lease, device cuda)")
    total = next(line for line in lines if line.strip().startswith("total"))
    assert float(total.split()[2]) == pytest.approx(budget.total_seconds(_plan("lease")), abs=1)
    job_lines = [line.split() for line in lines if " s  " in line]  # "rule seconds s name"
    assert sum(words[0] == "bench" for words in job_lines) == len(_plan("lease").cells)


def test_an_unknown_preset_is_named():
    out = subprocess.run(
        [sys.executable, "-m", "ssmbench", "plan", "--preset", "nope"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode != 0 and "unknown value 'nope'" in out.stderr


def test_a_task_job_is_priced_by_its_steps_and_imdb_without_data_only_starts(tmp_path):
    raw = config.load(overrides={"preset": "tasks-study"})
    tasks = raw["presets"]["tasks-study"]["tasks"]
    tasks["tasks"].append("imdb")
    tasks["seeds"]["imdb"] = [0]
    plan = config.plan(raw)
    costs = budget.costs_for(plan.device)
    missing = replace(plan, tasks=replace(plan.tasks, imdb_dir=str(tmp_path / "none")))
    jobs = {j.name: j.seconds for j in budget.task_jobs(missing, costs)}
    assert len(jobs) == len(plan.tasks.cells)
    assert jobs["imdb/mamba/s0"] == pytest.approx(costs.start_s / costs.parallel)
    # the same steps cost in proportion to the family's step time, and a seed is a seed
    start = costs.start_s / costs.parallel
    slower = (jobs["parity/mamba/s0"] - start) / (jobs["parity/attention/s0"] - start)
    assert slower == pytest.approx(budget.TASK_STEP_S["mamba"] / budget.TASK_STEP_S["attention"])
    assert jobs["parity/mamba/s0"] == jobs["parity/mamba/s2"]
    # twice the epochs, about twice the training
    longer = replace(plan, tasks=replace(plan.tasks, imdb_dir=str(tmp_path / "none")))
    specs = dict(longer.tasks.specs)
    epochs = 2 * specs["parity"]["train"]["epochs"]
    specs["parity"] = {**specs["parity"], "train": {**specs["parity"]["train"], "epochs": epochs}}
    longer = replace(longer, tasks=replace(longer.tasks, specs=specs))
    twice = {j.name: j.seconds for j in budget.task_jobs(longer, costs)}
    ratio = (twice["parity/mamba3/s0"] - start) / (jobs["parity/mamba3/s0"] - start)
    assert ratio == pytest.approx(2.0, rel=0.05)
