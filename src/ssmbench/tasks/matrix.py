"""The task matrix of a preset (its ``tasks`` key): one cell per (task, family, seed).

Each task's settings are the case study's (``config/tasks.yaml``) with the preset's
``budget`` merged over them; what the budget changes is the run's *cut*, written out leaf
by leaf ("train.epochs 20 -> 3") so that the tables, the claims and the figures state it.
Imports no torch.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import yaml

from ssmbench import registry
from ssmbench.errors import ConfigError
from ssmbench.schemas import schema_errors

TASKS_YAML = Path(__file__).resolve().parents[3] / "config" / "tasks.yaml"
TASK_SCHEMA = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "task.schema.yaml"
TASK_KEYS = ("kind", "metric", "chance", "data", "train", "models")


@dataclass(frozen=True, order=True)
class TaskCell:
    task: str  # a config/tasks.yaml entry
    family: str  # a block family or a named variant of one (registry.TASK_FAMILIES)
    seed: int  # the training seed: the model's initial weights and the batch order

    @property
    def name(self) -> str:
        return f"{self.task}/{self.family}/s{self.seed}"


@dataclass(frozen=True)
class TaskMatrix:
    """A preset's task cells, each task's resolved settings and its cut."""

    cells: tuple[TaskCell, ...] = ()
    # task -> its settings (config/tasks.yaml with the preset's budget merged in)
    specs: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    # task -> "train.epochs 20 -> 3; data.train.n 2000 -> 512" ("" when the study's)
    cuts: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    why_cut: str = ""  # the preset's reason for its cuts
    imdb_dir: str = "data/imdb"  # where the IMDb loader looks (ssmbench.tasks.imdb)
    threads: int = 1  # torch threads per training job

    def spec(self, task: str) -> dict:
        return copy.deepcopy(self.specs[task])

    def cut(self, task: str) -> str:
        """The task's cut with the preset's reason, or "" when it runs the study's budget."""
        cut = self.cuts.get(task, "")
        return f"{cut} ({self.why_cut})" if cut and self.why_cut else cut


def load_tasks(path=TASKS_YAML) -> dict:
    """config/tasks.yaml's tasks, each checked for the keys the runner reads."""
    with open(path) as f:
        try:
            tasks = yaml.safe_load(f)["tasks"]
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML: {e}") from None
        except (KeyError, TypeError):
            raise ConfigError(f"{path}: key 'tasks': missing (a mapping of tasks)") from None
    for name, task in tasks.items():
        missing = [k for k in TASK_KEYS if k not in task]
        if missing:
            raise ConfigError(f"{path}: tasks.{name} has no {', '.join(missing)}")
        unknown = set(task["models"]) - set(registry.FAMILIES)
        if unknown:
            raise ConfigError(
                f"{path}: tasks.{name}.models: unknown families {sorted(unknown)}; "
                f"known: {list(registry.FAMILIES)}"
            )
    return tasks


def merged(base: dict, over: dict, where: str) -> dict:
    """``base`` with ``over``'s leaves put in; a key ``base`` lacks is refused (a typo in
    a budget would otherwise change nothing, silently)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if key not in out:
            raise ConfigError(
                f"config key {where}.{key}: not a setting of the task (known: {', '.join(out)})"
            )
        if isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = merged(out[key], value, f"{where}.{key}")
        else:
            out[key] = copy.deepcopy(value)
    return out


def describe_cut(base: dict, spec: dict, prefix: str = "") -> list[str]:
    """Every leaf that differs, as "path study -> ours"."""
    changes = []
    for key, value in spec.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            changes += describe_cut(base[key], value, f"{path}.")
        elif base.get(key) != value:
            changes.append(f"{path} {base.get(key)} -> {value}")
    return changes


def matrix(preset_name: str, preset: dict, path=TASKS_YAML) -> TaskMatrix | None:
    """The preset's task matrix, or None when it trains nothing."""
    cfg = preset.get("tasks")
    if cfg is None:
        return None
    where = f"presets.{preset_name}.tasks"
    known = load_tasks(path)
    for task in cfg["tasks"]:
        if task not in known:
            raise ConfigError(
                f"config key {where}.tasks: {task!r} is not in {path.name} "
                f"(known: {', '.join(known)})"
            )
    budget = cfg.get("budget", {})
    for task in budget:
        if task not in cfg["tasks"]:
            raise ConfigError(
                f"config key {where}.budget.{task}: not one of this preset's tasks "
                f"({', '.join(cfg['tasks'])})"
            )
    specs, cuts = {}, {}
    trained = per_task(cfg, "families", where)
    for task in cfg["tasks"]:
        spec = merged(known[task], budget.get(task, {}), f"{where}.budget.{task}")
        check_spec(task, spec, budget.get(task, {}), f"{where}.budget.{task}", path)
        families = dict.fromkeys(registry.base_family(f) for f in trained[task])
        for family in families:  # a variant is sized as its family
            if family not in spec["models"]:
                raise ConfigError(
                    f"config key {where}.families: {task} has no model for {family!r} "
                    f"in {path.name}"
                )
        for family in families:
            _check_model(task, family, spec, budget.get(task, {}), f"{where}.budget.{task}", path)
        specs[task] = spec
        cuts[task] = "; ".join(describe_cut(known[task], spec))
    seeds = per_task(cfg, "seeds", where)
    cells = tuple(
        sorted(
            TaskCell(task, family, seed)
            for task in cfg["tasks"]
            for family in trained[task]
            for seed in seeds[task]
        )
    )
    if any(cuts.values()) and not cfg.get("why_cut"):
        raise ConfigError(
            f"config key {where}.why_cut: the budget cuts the study's settings "
            f"({'; '.join(c for c in cuts.values() if c)}); say why"
        )
    return TaskMatrix(
        cells=cells,
        specs=MappingProxyType(specs),
        cuts=MappingProxyType(cuts),
        why_cut=cfg.get("why_cut", ""),
        imdb_dir=cfg.get("imdb_dir", "data/imdb"),
        threads=cfg.get("threads", 1),
    )


def check_spec(task: str, spec: dict, budget: dict, where: str, path=TASKS_YAML) -> None:
    """Refuse a task's resolved settings that a job would fail on: each value against
    workflow/schemas/task.schema.yaml (type, range, known values), then each synthetic
    split's parameters by its generator on one row (the rules across keys).  The
    message names the budget's key where the budget set the value, else the tasks.yaml
    entry."""

    errors = schema_errors(TASK_SCHEMA, spec)
    if errors:
        at, message = errors[0]
        raise ConfigError(f"{_origin(task, at, budget, where, path)}: {message}")
    if task == "imdb":  # read from files, checked by the schema only
        return
    from ssmbench.tasks.data import make

    data = spec["data"]
    splits = {("train",): data["train"], **{("evals", k): v for k, v in data["evals"].items()}}
    for split, params in splits.items():
        params = dict(params)
        params.pop("n", None)  # one row: the rest of the parameters are what is checked
        try:
            make(task, split[-1], 1, seed=data["seed"], **params)
        except (ValueError, TypeError) as error:
            at = ("data", *split)
            raise ConfigError(f"{_origin(task, at, budget, where, path)}: {error}") from None


def _check_model(task, family, spec, budget, where, path) -> None:
    """The family's model entry sizes a model (``ssmbench.tasks.sizes.task_size``)."""
    from ssmbench.tasks.sizes import task_size

    try:
        task_size(family, spec["models"][family])
    except ValueError as error:
        at = ("models", family)
        raise ConfigError(f"{_origin(task, at, budget, where, path)}: {error}") from None


def _origin(task: str, at: tuple, budget: dict, where: str, path) -> str:
    """Where a value at ``at`` in a task's resolved settings was written: the preset's
    budget key (``config key ...``) when the budget holds a leaf at or under it, else
    the tasks.yaml entry."""
    node = budget
    for part in at:
        if not isinstance(node, dict) or part not in node:
            dotted = ".".join(map(str, at)) if at else "<top level>"
            return f"{Path(path).name}: tasks.{task}.{dotted}"
        node = node[part]
    return "config key " + ".".join([where, *map(str, at)])


def per_task(cfg: dict, key: str, where: str) -> dict[str, list]:
    """task -> its ``key`` (``families`` or ``seeds``): the preset's list for every task,
    or its mapping of task -> list, which names every task the preset trains and no
    other."""
    value = cfg[key]
    if isinstance(value, list):
        return {task: value for task in cfg["tasks"]}
    missing = [t for t in cfg["tasks"] if t not in value]
    extra = [t for t in value if t not in cfg["tasks"]]
    if missing or extra:
        what = f"has no {key} for {missing}" if missing else f"names {extra}, not trained here"
        raise ConfigError(f"config key {where}.{key}: {what} (tasks: {cfg['tasks']})")
    return {task: value[task] for task in cfg["tasks"]}
