"""The quality axis end to end on the `tasks-ci` preset, in a temporary copy of the
repository: one job per (task, family, seed) with its record and sidecar, tasks.csv, the
task claims in claims.csv, the two task figures' tables and figures beside the block
cells of the same run; nothing to do a second time; a damaged record is healed by a
plain rerun of its job only; and the shipped-run path draws the figures without torch."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ssmbench import config as sbconfig
from ssmbench import paths, registry
from ssmbench.provenance import check
from tests.conftest import snakemake, succeeded

PLAN = sbconfig.plan(sbconfig.load(overrides={"preset": "tasks-ci"}))
RUN = PLAN.run


def test_every_task_job_left_a_record_with_its_sidecar(tasks_ci_run):
    wf, out = tasks_ci_run
    for cell in PLAN.tasks.cells:
        path = wf / paths.task_record(RUN, cell)
        check(path)  # its sidecar vouches for it
        record = json.loads(path.read_text())
        assert record["status"] == "ok", (cell.name, record["reason"])
        assert record["cut"] == PLAN.tasks.cut(cell.task)
        prov = json.loads((wf / paths.prov(paths.task_record(RUN, cell))).read_text())
        assert prov["seed"] == cell.seed and prov["rule"] == "task_train"
    assert f"ssm-bench: {RUN}:" in out.stderr


def test_tasks_csv_has_every_job_split_and_metric(tasks_ci_run):
    wf, _ = tasks_ci_run
    table = pd.read_csv(wf / paths.table(RUN, "tasks.csv"), keep_default_na=False, na_values=[""])
    headline = table[table.headline]
    per_task = {t: len(PLAN.tasks.spec(t)["data"]["evals"]) for t in PLAN.tasks.specs}
    assert len(headline) == sum(per_task[c.task] for c in PLAN.tasks.cells)
    assert (headline.status == "ok").all() and headline.value.between(0, 1).all()
    assert set(headline[headline.task == "exact_copy"]["eval"]) == {"L32", "L64", "L128"}
    assert set(table[table.task == "imdb"].metric) == {"accuracy", "auc", "loss"}


def test_the_study_s_claims_are_judged_on_the_run_s_seeds(tasks_ci_run):
    wf, _ = tasks_ci_run
    claims = pd.read_csv(wf / paths.table(RUN, "claims.csv"), keep_default_na=False)
    ours = claims[claims.id == "ssmbench-parity-attention"].iloc[0]
    assert ours.verdict in ("reproduced", "contradicted")
    assert "seeds 0, 1" in ours.cells and "cut:" in ours.cells
    assert float(ours.ours_lo) <= float(ours.ours) <= float(ours.ours_hi)
    # a family this run does not train stays not comparable, saying why
    s4d = claims[claims.id == "ssmbench-parity-s4d"].iloc[0]
    assert s4d.verdict == "not comparable here" and "no ok parity/s4d runs" in s4d.why


def test_the_figure_tables_join_the_study_and_the_families_speed(tasks_ci_run):
    wf, _ = tasks_ci_run
    accuracy = pd.read_csv(wf / paths.table(RUN, "task_accuracy.csv"))
    parity = accuracy[(accuracy.task == "parity") & (accuracy.family == "attention")]
    assert len(parity) == 2 and parity.study.notna().all()  # the study's transformer
    assert (accuracy.chance > 0).all() and accuracy.cut.str.contains("epochs").all()
    speed = pd.read_csv(wf / paths.table(RUN, "quality_vs_speed.csv"))
    cells = pd.read_csv(wf / paths.table(RUN, "cells.csv"))
    for family in ("attention", "mamba2"):
        rows = speed[speed.family == family]
        prefill = cells[(cells.model == family) & (cells.phase == "prefill")].time_ms_median
        assert rows.prefill_ms.eq(prefill.min()).all() and rows.decode_ms.gt(0).all()
        assert set(rows.speed_T) == {32}


def test_the_task_figures_are_drawn(tasks_ci_run):
    wf, _ = tasks_ci_run
    for figure in registry.figures_of("tasks"):
        for ext in paths.FIGURE_EXTS:
            path = wf / "figures" / RUN / f"{figure}.{ext}"
            assert path.stat().st_size > 0, path
            check(path)


def test_a_second_run_has_nothing_to_do(tasks_ci_run):
    wf, _ = tasks_ci_run
    out = succeeded(snakemake(wf, "-n", "--config", "preset=tasks-ci"))
    assert "Nothing to be done" in out.stdout + out.stderr


def test_a_damaged_record_is_moved_aside_and_only_its_job_reruns(tasks_ci_run):
    wf, _ = tasks_ci_run
    cell = PLAN.tasks.cells[0]
    damaged = wf / paths.task_record(RUN, cell)
    others = [wf / paths.task_record(RUN, c) for c in PLAN.tasks.cells if c != cell]
    before = {p: p.stat().st_mtime_ns for p in others}
    damaged.write_text(damaged.read_text().replace('"status": "ok"', '"status": "fine"'))
    # the table and its sidecar, not the figures: quicker, the same heal (the sidecar is
    # what heal takes away so that the table, and the record it lacks, are made again)
    table = paths.table(RUN, paths.TASKS_TABLE)
    out = succeeded(
        snakemake(wf, table, paths.prov(table), "--config", "preset=tasks-ci", timeout=600)
    )
    assert f"{paths.task_record(RUN, cell)}: " in out.stderr and ".corrupt" in out.stderr
    assert Path(f"{damaged}.corrupt").is_file()
    check(damaged)
    assert json.loads(damaged.read_text())["status"] == "ok"
    assert {p: p.stat().st_mtime_ns for p in others} == before  # nothing else retrained
