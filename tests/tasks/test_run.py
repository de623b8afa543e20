"""One training job (ssmbench.tasks.run): its record, whatever happens, against the
schema; the same seed gives the same numbers; missing data is `unavailable` saying where
to put it; a diverging run is `failed` with its loss curve; and the tables made of the
records."""

from __future__ import annotations

import pytest

from ssmbench import config as sbconfig
from ssmbench.tasks.matrix import TaskCell
from ssmbench.tasks.record import read_task_record, validate_task_record, write_task_record
from ssmbench.tasks.run import run_task
from ssmbench.tasks.table import tasks_table

PLAN = sbconfig.plan(sbconfig.load(overrides={"preset": "tasks-ci"}))


def job(task, family="attention", seed=0, **kw):
    cell = TaskCell(task, family, seed)
    spec = PLAN.tasks.spec(task)
    return run_task(
        cell,
        spec,
        "r",
        imdb_dir=kw.pop("imdb_dir", PLAN.tasks.imdb_dir),
        cut=PLAN.tasks.cut(task),
        progress=lambda *a, **k: None,
        **kw,
    )


def test_imdb_without_its_data_is_unavailable_saying_where_to_put_it(tmp_path):
    record = job("imdb", imdb_dir=str(tmp_path / "nowhere"))
    assert record["status"] == "unavailable"
    assert str(tmp_path / "nowhere") in record["reason"] and "aclImdb" in record["reason"]
    assert record["final"] == {} and record["n_steps"] == 0
    validate_task_record(record)
    (row,) = tasks_table([record]).query("headline").itertuples()
    assert row.status == "unavailable" and row.reason == record["reason"]


@pytest.mark.parametrize("task", ["parity", "selective_copy", "exact_copy", "imdb"])
def test_a_job_trains_scores_every_split_and_repeats_itself_for_a_seed(task, tmp_path):
    first = job(task)
    assert first["status"] == "ok", first["reason"]
    assert set(first["final"]) == set(first["evals"])
    for scores in first["final"].values():
        assert 0 <= scores[first["metric"]] <= 1
    assert first["n_steps"] == len(first["steps"]) > 0
    assert "epochs 20 -> 1" in first["cut"] or "epochs" in first["cut"]
    path = tmp_path / "s0.json"
    write_task_record(path, first)
    assert read_task_record(path) == first
    again = job(task)
    assert again["steps"] == first["steps"] and again["final"] == first["final"]
    other = job(task, seed=1)
    assert other["steps"] != first["steps"]  # another seed: another init and batch order


def test_a_diverging_run_is_failed_with_its_loss_curve_kept():
    cell = TaskCell("parity", "mamba2", 0)
    spec = PLAN.tasks.spec("parity")
    spec["train"]["lr"] = 1.0e6
    spec["train"]["grad_clip"] = 1.0e30
    record = run_task(cell, spec, "r", progress=lambda *a, **k: None)
    assert record["status"] == "failed", record
    assert "step" in record["reason"]
    assert record["steps"], "the curve up to the divergence is kept"
    validate_task_record(record)


def test_the_tasks_table_has_a_row_per_split_metric_and_seed():
    records = [job("exact_copy", seed=s) for s in (0, 1)]
    table = tasks_table(records)
    assert len(table) == 2 * 3 * 3  # seeds x splits (L32, L64, L128) x metrics
    assert set(table[table.headline].metric) == {"token_accuracy"}
    assert table.value.notna().all()
    with pytest.raises(ValueError, match="two task records for exact_copy/attention/s0"):
        tasks_table(records + records[:1])


def test_a_stopped_run_s_unfinished_jobs_are_not_run_rows():
    from ssmbench.tasks.table import not_run_records

    finished = job("parity")
    planned = [TaskCell("parity", "attention", 0), TaskCell("parity", "attention", 1)]
    why = "the run stopped (budget) before this job finished"
    extra = not_run_records(planned, {("parity", "attention", 0)}, "r", PLAN.tasks.specs, why)
    rows = tasks_table([finished, *extra]).query("headline")
    assert list(rows.status) == ["ok", "not_run"] and list(rows.seed) == [0, 1]
    assert rows.value.isna().tolist() == [False, True] and rows.reason.iloc[1] == why


def test_a_job_with_model_options_trains_that_model_and_records_them():
    """model_options reach the model (the block's options, a PAD row held at zero) and
    the record's model says so; the record is still a valid one."""
    options = {"mixer_options": {"A_mode": "per-head"}, "learned_pad": False}
    record = job("parity", family="mamba3", model_options=options)
    assert record["status"] == "ok", record["reason"]
    assert record["model"] == {**PLAN.tasks.spec("parity")["models"]["mamba3"], **options}
    validate_task_record(record)
    plain = job("parity", family="mamba3")
    assert plain["model"] == PLAN.tasks.spec("parity")["models"]["mamba3"]
    assert plain["final"] != record["final"]  # another model


def test_a_named_variant_trains_its_familys_block_with_its_options():
    """A task job of a variant (ssmbench.registry.VARIANTS) builds its family's model at the
    family's size with the variant's block options, and its record says both."""
    from ssmbench.registry import VARIANTS

    variant = VARIANTS["mamba3-wide-dt-free-angle"]
    record = job("parity", family=variant.name)
    assert record["status"] == "ok", record["reason"]
    assert record["family"] == variant.name
    options = {k: list(v) if isinstance(v, tuple) else v for k, v in variant.options.items()}
    assert record["model"] == {
        **PLAN.tasks.spec("parity")["models"]["mamba3"],
        "mixer_options": options,
    }
    validate_task_record(record)
