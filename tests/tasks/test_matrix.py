"""The task matrix of a preset (``tasks``): its cells, the study's settings it starts from,
the cut a budget makes and says, the refusals of a bad one and the paths of its records.
No torch."""

from __future__ import annotations

import copy

import pytest
import yaml

from ssmbench import config as sbconfig
from ssmbench import paths, registry
from ssmbench.tasks.matrix import TASKS_YAML, TaskCell, describe_cut, load_tasks
from tests.conftest import ANCHORS


def plan_of(preset: str, **overrides) -> sbconfig.Plan:
    return sbconfig.plan(sbconfig.load(overrides={"preset": preset, **overrides}))


def test_the_tasks_preset_trains_parity_at_the_studys_budget_and_a_cut_selective_copy():
    plan = plan_of("tasks")
    tasks = plan.tasks
    by_task = {
        t: {(c.family, c.seed) for c in tasks.cells if c.task == t}
        for t in ("parity", "selective_copy")
    }
    assert {f for f, _ in by_task["parity"]} == {
        "attention", "mamba2", "mamba3", "mamba3-wide-dt-free-angle"
    }  # fmt: skip
    assert {s for _, s in by_task["parity"]} == {0, 1}
    assert by_task["selective_copy"] == {("mamba", 0), ("mamba2", 0)}
    assert len(tasks.cells) == 4 * 2 + 2 == len(set(tasks.cells))
    # the speed of each trained family (a variant's is its family's) from the same run
    assert {c.model for c in plan.cells} == {"attention", "mamba", "mamba2", "mamba3"}
    assert {(c.phase, c.seq_len) for c in plan.cells} == {("prefill", 128), ("decode", 128)}
    assert set(plan.figures) == set(registry.figures_of("tasks"))
    assert plan.run == "tasks-cpu"


def test_a_budget_changes_only_what_it_names_and_the_cut_says_each_change():
    plan = plan_of("tasks")
    study = load_tasks()["selective_copy"]
    ours = plan.tasks.spec("selective_copy")
    assert ours["train"]["epochs"] == 4 and study["train"]["epochs"] == 12
    assert ours["train"]["lr"] == study["train"]["lr"] == 1.0e-3
    assert ours["models"] == study["models"]  # sizes are the study's
    cut = plan.tasks.cut("selective_copy")
    assert "train.epochs 12 -> 4" in cut and "data.evals.test.n 5000 -> 1000" in cut
    assert "lr" not in cut and plan.tasks.why_cut in cut
    assert plan.tasks.cut("parity") == ""  # parity at the study's own budget


def test_describe_cut_names_every_changed_leaf_and_nothing_else():
    base = {"a": 1, "b": {"c": 2, "d": 3}}
    assert describe_cut(base, base) == []
    assert describe_cut(base, {"a": 1, "b": {"c": 5, "d": 3}}) == ["b.c 2 -> 5"]


def test_the_study_s_settings_are_its_configs(tmp_path):
    """config/tasks.yaml holds the case study's configs/<task>.yaml values (skipped where
    the anchors are absent): sizes, epochs, learning rates, weight decay, samples."""
    configs = ANCHORS / "ssmbench" / "configs"
    if not configs.is_dir():
        pytest.skip(f"no anchors at {ANCHORS} (set SSMBENCH_ANCHORS)")
    ours = load_tasks()
    for task, spec in ours.items():
        theirs = yaml.safe_load((configs / f"{task}.yaml").read_text())
        for key in ("epochs", "lr", "weight_decay", "grad_clip", "scheduler", "warmup_frac"):
            assert spec["train"][key] == theirs["train"][key], (task, key)
        assert spec["train"]["batch_size"] == theirs["data"]["batch_size"], task
        renamed = {"transformer": "attention"}
        for family, kwargs in theirs["models"].items():
            assert spec["models"][renamed.get(family, family)] == kwargs, (task, family)
        if task == "imdb":
            assert spec["data"]["train"]["subset"] == theirs["data"]["train_subset"]
            assert spec["data"]["train"]["max_len"] == theirs["data"]["max_len"]
            continue
        samples = theirs["data"]["train_samples"]
        assert spec["data"]["train"]["n"] == samples, task
        if task == "exact_copy":
            assert spec["data"]["train"]["max_len"] == theirs["data"]["train"]["max_len"]
            lengths = [e["length"] for e in spec["data"]["evals"].values()]
            assert lengths == theirs["data"]["eval_lengths"]
        else:
            train = {k: v for k, v in spec["data"]["train"].items() if k != "n"}
            assert train == theirs["data"]["train"], task
            (test,) = spec["data"]["evals"].values()
            assert {k: v for k, v in test.items() if k != "n"} == theirs["data"]["test"], task
            assert test["n"] == theirs["data"]["test_samples"], task


def _bad(mutate) -> str:
    config = sbconfig.load(overrides={"preset": "tasks"})
    config = copy.deepcopy(config)
    mutate(config["presets"]["tasks"]["tasks"])
    with pytest.raises(sbconfig.ConfigError) as error:
        sbconfig.plan(config)
    return str(error.value)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            lambda t: t["budget"]["selective_copy"]["train"].update(epoch=3),
            "presets.tasks.tasks.budget.selective_copy.train.epoch: not a setting of the task",
        ),
        (
            lambda t: t["budget"].update(copying={"train": {"epochs": 1}}),
            "budget.copying: not one of this preset's tasks",
        ),
        (lambda t: t.update(seeds=[0, 0]), "seeds: [0, 0] has non-unique elements"),
        (lambda t: t.update(seeds={"parity": [0]}), "seeds: has no seeds for ['selective_copy']"),
        (lambda t: t.update(families=["mamba2"], seeds=[0, 0]), "has non-unique elements"),
        (lambda t: t.update(seeds={**dict.fromkeys(t["tasks"], [0]), "sorting": [1]}), "seeds"),
        (lambda t: t.pop("why_cut"), "why_cut: the budget cuts the study's settings"),
        (lambda t: t.update(tasks=["parity", "sorting"]), "tasks"),
        (lambda t: t.update(families=["rwkv"]), "families"),
    ],
)
def test_a_bad_task_matrix_is_refused_naming_the_key(mutate, message):
    assert message in _bad(mutate)


def test_a_tasks_preset_without_block_cells_is_refused():
    config = sbconfig.load(overrides={"preset": "tasks"})
    del config["presets"]["tasks"]["sweeps"]
    with pytest.raises(sbconfig.ConfigError, match="tasks: needs sweeps beside it"):
        sbconfig.plan(config)


def test_a_task_missing_a_family_in_tasks_yaml_is_refused(tmp_path):
    tasks = yaml.safe_load(TASKS_YAML.read_text())
    del tasks["tasks"]["parity"]["models"]["mamba2"]
    path = tmp_path / "tasks.yaml"
    path.write_text(yaml.safe_dump(tasks))
    from ssmbench.tasks.matrix import matrix

    preset = sbconfig.load(overrides={"preset": "tasks"})["presets"]["tasks"]
    with pytest.raises(sbconfig.ConfigError, match="parity has no model for 'mamba2'"):
        matrix("tasks", preset, path)


def test_the_path_of_a_task_record():
    cell = TaskCell("exact_copy", "mamba3", 2)
    assert paths.task_record("r", cell) == "results/r/tasks/exact_copy/mamba3/s2.json"
    assert cell.name == "exact_copy/mamba3/s2"


def test_seeds_may_differ_per_task_and_a_variant_trains_beside_its_family():
    p = sbconfig.plan(sbconfig.load(overrides={"preset": "tasks-study"}))
    seeds = {(c.task, c.family): [] for c in p.tasks.cells}
    for c in p.tasks.cells:
        seeds[(c.task, c.family)].append(c.seed)
    assert seeds[("parity", "mamba3")] == [0, 1, 2]
    assert seeds[("selective_copy", "mamba3")] == [0] == seeds[("exact_copy", "attention")]
    assert ("parity", "mamba3-wide-dt-free-angle") in seeds
    # the study's budgets, no cut
    assert p.tasks.cut("parity") == p.tasks.cut("selective_copy") == ""
    assert p.tasks.spec("parity")["train"]["epochs"] == 20
