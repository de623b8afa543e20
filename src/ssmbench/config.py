"""The benchmark matrix: validate the config, resolve the preset, expand the cells.

Config flows one way: YAML (+ ``--config`` overrides) -> :func:`validate` -> :func:`plan`
-> a frozen :class:`Plan` that the Snakefile, the scripts and the command line share.
This module imports no torch: the workflow parses it on machines without one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import yaml

from ssmbench import gpulease, paths
from ssmbench.devices import cuda_available
from ssmbench.errors import ConfigError
from ssmbench.lm.matrix import LMCell, LMMatrix, matrix
from ssmbench.matrix import Cell, Size, Timing, expand_sweep, paired_attention
from ssmbench.paths import REPO
from ssmbench.registry import FIGURES, figures_of, verified_backend
from ssmbench.schemas import config_key, schema_errors
from ssmbench.shipped import precollected_runs, shipped_kind
from ssmbench.tasks.matrix import TaskMatrix
from ssmbench.tasks.matrix import matrix as task_matrix

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
CONFIG = REPO / "config" / "config.yaml"
CONFIG_FILE = "config/config.yaml"  # the workflow's, relative to its working directory

# Folders beside the runs under results/, figures/ and logs/ that hold other runs' data
# or their provenance checks (ssmbench.paths): a run of one of these names would write
# into them.
RESERVED_RUNS = ("precollected", "imported", "provenance", "compare")

# The least memory a cell's process can measure anything in: `python -c "import torch"`
# maps 625 MiB of address space and holds 219 MiB resident (torch 2.13.0+cpu, Python
# 3.11, x86-64), and under an RLIMIT_AS of 0.5 GiB the import fails or hangs.  A cap
# below these is refused: it would not make a run of oom cells, it would make no run.
MIN_CPU_MEM_LIMIT_GB = 1.0  # RLIMIT_AS of a CPU cell (ssmbench.process.cap_address_space)
MIN_MEM_MB = 256  # Snakemake's mem_mb of a job: the resident set above, rounded up


@dataclass(frozen=True)
class FigureSpec:
    name: str
    phase: str | None = None
    models: tuple[str, ...] | None = None
    backends: tuple[str, ...] | None = None
    lm: bool = False  # a whole-model run's figure, drawn from its lm tables

    @property
    def table(self) -> str:
        """The table the figure reads (``registry.FIGURES``): ``"cells"``, ``"ops"``, one
        of ``registry.RUN_TABLES``, or for a whole-model run ``"lm"`` or ``"lm_ops"``."""
        table = FIGURES[self.name].table
        if self.lm and table in ("cells", "ops"):
            return f"lm_{table}" if table == "ops" else "lm"
        return table

    @property
    def notebook_kind(self) -> str:
        """The kind of table its notebook is given (its parameter ``<kind>_path``): a
        whole-model run's lm tables are drawn as cells and ops
        (``ssmbench.lm.table.cells_view``)."""
        return {"lm": "cells", "lm_ops": "ops"}.get(self.table, FIGURES[self.name].notebook_kind)

    def selects(self, cell: Cell) -> bool:
        return (
            (self.phase is None or cell.phase == self.phase)
            and (self.models is None or cell.model in self.models)
            and (self.backends is None or cell.backend in self.backends)
        )


@dataclass(frozen=True)
class Plan:
    """Everything a run needs, resolved from the config."""

    preset: str
    run: str
    device: str
    size: Size | None  # the blocks' size; None for a preset of whole models only
    timing: Timing
    cells: tuple[Cell, ...]
    figures: dict[str, FigureSpec]
    seed: int = 0
    source: str = "live"
    mem_mb: int = 8000
    cpu_mem_limit_gb: float | None = None
    precollected_dir: str = "results/precollected"
    # the (model, backend) pairs verified: graph backends reuse their base's verification
    pairs: tuple[tuple[str, str], ...] = field(default=())
    profiled: frozenset[Cell] = field(default=frozenset())
    calibrate_quick: bool = False
    import_ssm_scope: str | None = None
    # decode cells whose cache is random values of the right shapes (a sweep's `cache`)
    random_cache: frozenset[Cell] = field(default=frozenset())
    # the cells the run's answer rests on, scheduled first (preset key `headline`)
    headline: frozenset[Cell] = field(default=frozenset())
    # how many separate processes (jobs) measure each headline cell (a headline
    # selector's `replicates`); absent: 1
    cell_replicates: dict[Cell, int] = field(default_factory=dict)
    # finish a stopped run from the records it left (config key `partial`: why it stopped,
    # budget, sigterm or failure; "" for a run that is not being finished)
    partial: str = ""
    # the SSM sides of the paired cells (preset key `paired`, ssmbench.paired): each is
    # timed against attention at the same axes, in one job, under `paired_timing`
    paired: tuple[Cell, ...] = field(default=())
    paired_timing: Timing | None = None
    # how many separate processes (jobs) measure each paired cell (preset key
    # `paired.replicates`, a paired sweep's `replicates`); absent: 1
    paired_replicates: dict[Cell, int] = field(default_factory=dict)
    # whole language models (preset key `lm`, ssmbench.lm.matrix)
    lm: LMMatrix = field(default=LMMatrix())
    # the quality axis (preset key `tasks`, ssmbench.tasks.matrix): None without tasks
    tasks: TaskMatrix | None = None
    # the GPUs calibrated one by one (their Gpu.key), each by a job leasing it: on a cuda
    # preset, the GPUs this node's jobs may lease (gpulease.leasable); empty on a CPU and
    # where the plan cannot know the jobs' GPUs (SLURM chose them): one device.json then
    calibrated_gpus: tuple[str, ...] = field(default=())

    def device_records(self) -> list[str]:
        """The run's calibration records, which every cell reads and joins to the GPU it
        ran on (``ssmbench.records.ceilings_for``): one per calibrated GPU, else
        ``device.json``; none for a run without block cells."""
        if not self.cells:
            return []
        if self.calibrated_gpus:
            return [paths.device_gpu(self.run, key) for key in self.calibrated_gpus]
        return [paths.device(self.run)]

    @property
    def kind(self) -> str:
        """``"blocks"`` (the mixer blocks of ssmbench.models) or ``"lm"`` (whole models)."""
        return "lm" if self.lm.cells else "blocks"

    # Lookups, built once per plan.  Snakemake calls the workflow's input functions once
    # or more per job, so each must answer in constant time: a test against the tuple of
    # cells made planning quadratic (about a minute for 10,000 cells).

    @cached_property
    def cell_set(self) -> frozenset[Cell]:
        """The cells, for ``cell in plan.cell_set``."""
        return frozenset(self.cells)

    @cached_property
    def lm_cell_set(self) -> frozenset[LMCell]:
        """The whole-model cells, for ``cell in plan.lm_cell_set``."""
        return frozenset(self.lm.cells)

    @cached_property
    def task_cell_set(self) -> frozenset:
        """The task jobs, for ``cell in plan.task_cell_set``."""
        return frozenset(self.tasks.cells if self.tasks else ())

    @cached_property
    def paired_set(self) -> frozenset[Cell]:
        """The SSM sides of the paired cells, for ``cell in plan.paired_set``."""
        return frozenset(self.paired)

    @cached_property
    def _dtypes_by_pair(self) -> dict[tuple[str, str], list[str]]:
        dtypes: dict[tuple[str, str], set[str]] = {}
        for c in [*self.cells, *self.paired, *map(paired_attention, self.paired)]:
            dtypes.setdefault((c.model, verified_backend(c.backend)), set()).add(c.dtype)
        return {pair: sorted(found) for pair, found in dtypes.items()}

    def verify_dtypes(self, model: str, backend: str) -> list[str]:
        """The dtypes the verification of (model, backend) checks: those of its cells and
        of the cells of the graph backend that reuses it."""
        return list(self._dtypes_by_pair.get((model, backend), []))

    def cache_source(self, cell: Cell) -> str:
        """How ``cell``'s decode cache is made: "random" or "prefill" (see ``Cell``); a
        paired cell's attention side makes its cache as its SSM side does."""
        return "random" if cell in self.random_cache else "prefill"

    @cached_property
    def headline_pairs(self) -> frozenset[tuple[str, str]]:
        """The (model, backend) pairs whose verification the headline cells wait for."""
        return frozenset((c.model, verified_backend(c.backend)) for c in self.headline)

    def replicates(self, cell: Cell) -> int:
        """How many processes measure the paired cell ``cell`` (its SSM side)."""
        return self.paired_replicates.get(cell, 1)

    @cached_property
    def paired_jobs(self) -> tuple[tuple[Cell, int], ...]:
        """Every paired job: (SSM side, replicate index 0..k-1)."""
        return tuple((c, r) for c in self.paired for r in range(self.replicates(c)))

    @cached_property
    def paired_job_set(self) -> frozenset[tuple[Cell, int]]:
        return frozenset(self.paired_jobs)

    def cell_replicates_of(self, cell: Cell) -> int:
        """How many processes measure the (headline) cell ``cell``."""
        return self.cell_replicates.get(cell, 1)

    @cached_property
    def bench_jobs(self) -> tuple[tuple[Cell, int], ...]:
        """Every bench job: (cell, replicate index 0..k-1); k is 1 but for headline cells
        with replicates."""
        return tuple((c, r) for c in self.cells for r in range(self.cell_replicates_of(c)))

    @cached_property
    def bench_job_set(self) -> frozenset[tuple[Cell, int]]:
        return frozenset(self.bench_jobs)

    @cached_property
    def measure_rounds(self) -> int:
        """The rounds a run's measuring jobs are spread over: the most replicates of any
        paired or headline cell (1 without replicates)."""
        counts = [*map(self.replicates, self.paired), *self.cell_replicates.values()]
        return max(counts, default=1)

    @cached_property
    def bench_round(self) -> dict[Cell, int]:
        """The round (0..measure_rounds-1) each cell that is not a headline cell is
        measured in, drawn with the plan's seed: replicate r of every paired cell runs in
        round r, and a share of the other cells between them, so the replicates of one
        pair are minutes apart and a slow drift of the machine falls on all pairs alike
        (``workflow/rules/common.smk``'s priorities)."""
        import random

        rest = [c for c in self.cells if c not in self.headline]  # headline: replicate r in round r
        random.Random(self.seed).shuffle(rest)
        return {c: i % self.measure_rounds for i, c in enumerate(rest)}

    def figure_cells(self, figure: str) -> list[Cell]:
        """The cells a figure draws: for a figure of the ops table, the profiled ones."""
        spec = self.figures[figure]
        cells = sorted(self.profiled) if spec.table == "ops" else self.cells
        return [c for c in cells if spec.selects(c)]


def load(path: str | os.PathLike = CONFIG, overrides: dict | None = None) -> dict:
    """Read the YAML config (:func:`read_config_file`) and apply ``--config``-style
    overrides (top-level keys)."""
    config = read_config_file(path)
    config.update(overrides or {})
    return config


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key that appears twice in one mapping (YAML says a
    key is unique; PyYAML keeps the last value without a word)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise ConfigError(
                    f"line {key_node.start_mark.line + 1}: key {key!r} appears twice in one "
                    f"mapping (first at line {seen[key] + 1}); the second would silently win"
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def read_config_file(path: str | os.PathLike) -> dict:
    """A config file's mapping, or :class:`ConfigError` naming the file: YAML it cannot
    parse, a key twice in one mapping (with its line), or a top level that is not a
    mapping of keys (a list, a scalar, an empty file)."""
    try:
        with open(path) as f:
            data = yaml.load(f, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)
    except ConfigError as error:
        raise ConfigError(f"config file {path}, {error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"config file {path}: not valid YAML: {error}") from None
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError(
            f"config file {path}: is {what}, not a mapping of config keys (preset, presets, "
            "figures, ...)"
        )
    return data


def from_command_line(config: dict, entries) -> dict:
    """``config`` with the values of ``--config`` typed as they were meant.

    Snakemake parses a top-level value as an int, a float or a bool, but a mapping or a
    list through YAML's base loader, whose leaves are all strings: ``presets={ci: {timing:
    {max_time_s: 3.0}}}`` gives ``'3.0'``.  Each such leaf in ``entries`` (Snakemake's
    parsed ``--config``) is read again as YAML reads it in a file (3.0 a float, true a
    bool, null None; anything else stays text).  And a run or preset name typed as digits
    (``run=123``) is the name "123", as the README allows (:func:`plan` refuses one that
    Snakemake read as a float, ``run=1.5``, saying how to name it).
    """
    config = dict(config)
    for key, value in (entries or {}).items():
        if isinstance(value, (dict, list)):
            config[key] = _typed_like(config.get(key), value)
    for key in ("run", "preset"):
        value = entries.get(key) if entries else None
        if isinstance(value, int) and not isinstance(value, bool):
            config[key] = str(value)
    return config


def _typed_like(merged, given):
    """``merged`` (the config after Snakemake merged ``given`` into it) with each string
    leaf that ``given`` holds read again as YAML reads it; the rest as it is."""
    if isinstance(given, dict) and isinstance(merged, dict):
        return {k: _typed_like(v, given[k]) if k in given else v for k, v in merged.items()}
    if isinstance(given, list) and isinstance(merged, list) and len(given) == len(merged):
        return [_typed_like(m, g) for m, g in zip(merged, given, strict=True)]
    if isinstance(given, str) and merged == given:
        try:
            value = yaml.safe_load(given)
        except yaml.YAMLError:
            return merged
        return value if value is None or isinstance(value, (bool, int, float)) else merged
    return merged


def validate(config: dict) -> None:
    """Check ``config`` against the JSON schema (integers strictly, every number finite);
    raise :class:`ConfigError` naming each bad key and its value."""
    lines = [
        f"  config key {config_key(path)}: {message}"
        for path, message in schema_errors(SCHEMA, config)
    ]
    if lines:
        raise ConfigError("invalid config:\n" + "\n".join(lines))


def plan(config: dict, cuda: bool | None = None) -> Plan:
    """Validate ``config`` and resolve it into a :class:`Plan`.

    ``cuda`` says whether a GPU is present (default: ``devices.cuda_available``); it decides
    ``preset: auto`` and whether a ``cuda`` preset can run here.
    """
    for key in ("run", "preset"):
        if isinstance(config.get(key), float):  # --config run=1.5: Snakemake made it a float
            raise ConfigError(
                f"config key {key}: {config[key]} is a number, and a {key} name is text "
                f"(--config reads {config[key]} as a number, quoted or not): start it with a "
                f"letter, or set it in a config file as a quoted string"
            )
    validate(config)
    presets = config["presets"]
    name = config["preset"]
    if name == "auto":
        cuda = cuda_available() if cuda is None else cuda
        name = "gpu" if cuda else "cpu"
    if name not in presets:
        raise ConfigError(f"config key preset: unknown value {name!r}; known: {sorted(presets)}")
    preset = presets[name]
    t = preset["timing"]
    _check_timing(t, lambda key: f"presets.{name}.timing.{key}")
    _check_memory(name, preset)
    _check_kind(name, preset)
    lm = matrix(name, preset)
    tasks = task_matrix(name, preset)

    sweeps = preset.get("sweeps", [])
    cells = sorted({c for sweep in sweeps for c in expand_sweep(sweep)})
    profiled = frozenset(c for sweep in sweeps if sweep.get("profile") for c in expand_sweep(sweep))
    random_cache = frozenset(
        c
        for sweep in sweeps
        if sweep.get("cache") == "random"
        for c in expand_sweep(sweep)
        if c.phase == "decode"
    )
    headline, cell_replicates = _headline(name, preset.get("headline", ()), cells)
    for i, sweep in enumerate(sweeps):
        if "replicates" in sweep:
            raise ConfigError(
                f"config key presets.{name}.sweeps[{i}].replicates: only a paired sweep "
                f"(presets.{name}.paired.sweeps) or a headline selector "
                f"(presets.{name}.headline) measures its cells in replicate processes"
            )
    paired, paired_timing, paired_replicates = _paired(name, preset)
    random_cache |= frozenset(
        side
        for sweep in preset.get("paired", {}).get("sweeps", ())
        if sweep.get("cache") == "random"
        for c in expand_sweep(sweep)
        if c.phase == "decode"
        for side in (c, paired_attention(c))
    )
    verified = {(c.model, verified_backend(c.backend)) for c in cells}
    verified |= {
        (side.model, verified_backend(side.backend))
        for c in paired
        for side in (c, paired_attention(c))
    }
    figures = {
        fig: FigureSpec(
            fig,
            spec.get("phase"),
            tuple(spec["models"]) if "models" in spec else None,
            tuple(spec["backends"]) if "backends" in spec else None,
        )
        for fig, spec in config["figures"].items()
    }
    source = config["source"]
    if lm.cells:  # config key `figures` filters the block figures
        figures = lm_figures(profiled=bool(lm.profiled))
    elif tasks:  # its block cells are the tasks' speed, not a sweep of their own
        figures = {fig: FigureSpec(fig) for fig in figures_of("tasks")}
    elif source == "live":
        for spec in figures.values():
            _check_figure(name, spec, sorted(profiled) if spec.table == "ops" else cells)
    precollected_dir = config.get("precollected_dir", "results/precollected")
    if source == "precollected" and not precollected_runs(precollected_dir):
        raise ConfigError(
            f"config key precollected_dir: no run in {precollected_dir!r} (a run is a "
            "folder with tables/cells.csv or lm.csv) for source=precollected to draw"
        )

    return Plan(
        preset=name,
        run=_run_name(config, name, preset),
        device=preset["device"],
        size=Size(**preset["size"]) if "size" in preset else None,
        timing=Timing(**t),
        cells=tuple(cells),
        figures=figures,
        seed=config["seed"],
        source=source,
        mem_mb=preset.get("mem_mb", 8000),
        cpu_mem_limit_gb=preset.get("cpu_mem_limit_gb"),
        profiled=profiled,
        calibrate_quick=preset.get("calibrate_quick", False),
        import_ssm_scope=_ssm_scope_clone(config.get("import_ssm_scope")),
        precollected_dir=precollected_dir,
        pairs=tuple(sorted(verified)),
        random_cache=random_cache,
        headline=headline,
        cell_replicates=cell_replicates,
        partial=_stop_reason(config.get("partial", False)),
        paired=paired,
        paired_timing=paired_timing,
        paired_replicates=paired_replicates,
        lm=lm,
        tasks=tasks,
        calibrated_gpus=calibrated_gpus(preset["device"]),
    )


def calibrated_gpus(device: str) -> tuple[str, ...]:
    """The keys of the GPUs a preset on ``device`` calibrates one by one: on cuda, those
    this node's jobs may lease (:func:`ssmbench.gpulease.leasable`), so a node whose GPUs
    differ has each one's ceilings; none on a CPU."""
    if device != "cuda":
        return ()
    return tuple(gpu.key for gpu in gpulease.leasable())


def lm_figures(profiled: bool = True) -> dict[str, FigureSpec]:
    """A whole-model run's figures (``registry.figures_of("lm")``, each at its
    ``lm_phase``): op_breakdown only with profiled cells."""
    return {
        name: FigureSpec(name, FIGURES[name].lm_phase, lm=True)
        for name in figures_of("lm")
        if profiled or name != "op_breakdown"
    }


def _check_kind(name: str, preset: dict) -> None:
    """A preset measures blocks (``size`` and ``sweeps``) or whole models (``lm``)."""
    where = f"config key presets.{name}"
    if "lm" in preset and "sweeps" in preset:
        raise ConfigError(
            f"{where}: has both sweeps (blocks) and lm (whole models); a run measures one "
            "kind (their figures share names): make two presets"
        )
    if "tasks" in preset and "sweeps" not in preset:
        raise ConfigError(
            f"{where}.tasks: needs sweeps beside it (figure quality_vs_speed sets each "
            "family's accuracy against its block cells' prefill and decode times)"
        )
    if "lm" not in preset and "sweeps" not in preset:
        raise ConfigError(f"{where}: needs sweeps (block cells) or lm (whole models)")
    if "sweeps" in preset and "size" not in preset:
        raise ConfigError(f"{where}.size: the blocks' size is needed with sweeps")
    for key in ("headline", "paired", "size"):
        if "lm" in preset and key in preset:
            raise ConfigError(f"{where}.{key}: is for block cells; a preset of lm has none")


def _paired(name: str, preset: dict) -> tuple[tuple[Cell, ...], Timing | None, dict]:
    """The SSM sides of preset ``name``'s paired cells, their timing (the preset's, with
    the overrides of ``paired.timing``) and their replicates (a sweep's ``replicates``,
    else ``paired.replicates``; a cell in several sweeps takes the most)."""
    spec = preset.get("paired")
    if not spec:
        return (), None, {}
    cells = sorted({c for sweep in spec["sweeps"] for c in expand_sweep(sweep)})
    replicates: dict[Cell, int] = {}
    for sweep in spec["sweeps"]:
        k = sweep.get("replicates", spec.get("replicates", 1))
        for c in expand_sweep(sweep):
            replicates[c] = max(replicates.get(c, 1), k)
    for i, sweep in enumerate(spec["sweeps"]):
        where = f"config key presets.{name}.paired.sweeps[{i}]"
        if "attention" in sweep["models"]:
            raise ConfigError(
                f"{where}.models: attention is the other side of every paired cell; list "
                "the SSM families to pair with it"
            )
        if sweep.get("profile"):
            raise ConfigError(f"{where}.profile: a paired cell is not profiled")
    overrides = spec.get("timing", {})
    timing = {**preset["timing"], **overrides}
    # a bound is named where it was set: the paired override, or the preset it inherits
    _check_timing(
        timing,
        lambda key: f"presets.{name}.{'paired.' if key in overrides else ''}timing.{key}",
    )
    return tuple(cells), Timing(**timing), {c: k for c, k in replicates.items() if k > 1}


def _check_timing(timing: dict, key) -> None:
    """Each upper bound of a sampling budget is at least its lower bound: max_samples >=
    min_samples, max_time_s >= min_time_s, timeout_s >= min_time_s.  ``key(field)`` is the
    config key of ``field``, for the message."""
    bounds = [("max_samples", "min_samples"), ("max_time_s", "min_time_s")]
    if timing.get("timeout_s") is not None:
        bounds.append(("timeout_s", "min_time_s"))
    for upper, lower in bounds:
        if timing[upper] < timing[lower]:
            raise ConfigError(
                f"config key {key(upper)}: {timing[upper]} is less than "
                f"{lower}={timing[lower]} ({key(lower)})"
            )


def _check_memory(name: str, preset: dict) -> None:
    """The preset's memory caps leave room for Python and torch (MIN_MEM_MB,
    MIN_CPU_MEM_LIMIT_GB)."""
    floors = {
        "mem_mb": (MIN_MEM_MB, "MB", "MIN_MEM_MB"),
        "cpu_mem_limit_gb": (MIN_CPU_MEM_LIMIT_GB, "GiB", "MIN_CPU_MEM_LIMIT_GB"),
    }
    for key, (floor, unit, constant) in floors.items():
        value = preset.get(key)
        if value is not None and value < floor:
            raise ConfigError(
                f"config key presets.{name}.{key}: {value} {unit} is below the {floor} {unit} "
                f"that a Python process with torch needs to start (ssmbench.config.{constant})"
            )


def _run_name(config: dict, preset_name: str, preset: dict) -> str:
    """The run's name: config key ``run``, else the preset's ``run``, else the preset's
    name; none of RESERVED_RUNS, whose folders hold other runs (the schema bounds its
    characters and length)."""
    if config.get("run"):
        key, run = "run", config["run"]
    elif preset.get("run"):
        key, run = f"presets.{preset_name}.run", preset["run"]
    else:
        key, run = "preset", preset_name
    if run.lower() in RESERVED_RUNS:
        raise ConfigError(
            f"config key {key}: run name {run!r} is reserved: results/{run}/ and "
            f"figures/{run}/ hold other runs' data (reserved: {', '.join(RESERVED_RUNS)})"
        )
    return run


def _ssm_scope_clone(path: str | None) -> str | None:
    """Config key ``import_ssm_scope``: None, or a folder that exists (a clone of
    sapmitra/SSM-Scope), relative to the working directory, holding the files an import
    reads (``ssmbench.importers.layout.required_files``)."""
    from ssmbench.importers.layout import required_files

    if path is None:
        return None
    if not path or not Path(path).is_dir():
        raise ConfigError(
            f"config key import_ssm_scope: {path!r} is not a folder (a clone of "
            "sapmitra/SSM-Scope is meant)"
        )
    missing = [f for f in required_files() if not (Path(path) / f).is_file()]
    if missing:
        raise ConfigError(
            f"config key import_ssm_scope: {path!r} is not a clone of sapmitra/SSM-Scope: "
            f"it has no {', '.join(missing)}"
        )
    return path


def _stop_reason(partial: bool | str) -> str:
    """Config key ``partial`` as the reason a stopped run stopped ("" when not partial)."""
    if partial is True:
        return "budget"
    return partial or ""


def _headline(name: str, selectors, cells: list[Cell]) -> tuple[frozenset[Cell], dict]:
    """The headline cells of preset ``name`` (those one of its ``headline`` selectors
    matches) and the replicates of each with more than one (a selector's ``replicates``;
    a cell two selectors match takes the larger).  A selector that matches no cell is
    refused: it would mark nothing, and say nothing of it."""
    replicates: dict[Cell, int] = {}
    for i, selector in enumerate(selectors):
        chosen = [c for c in cells if _selects(selector, c)]
        if not chosen:
            axes = {k: v for k, v in selector.items() if k in _SELECTOR_AXES}
            raise ConfigError(
                f"config key presets.{name}.headline[{i}]: selects no cell of the preset's "
                f"sweeps ({axes}); a headline cell must be one the preset measures"
            )
        for c in chosen:
            replicates[c] = max(replicates.get(c, 1), selector.get("replicates", 1))
    headline = frozenset(replicates)
    return headline, {c: k for c, k in replicates.items() if k > 1}


# a headline selector's keys -> the cell's axis they filter (`replicates` is not an axis)
_SELECTOR_AXES = {
    "models": "model",
    "backends": "backend",
    "phases": "phase",
    "batch": "batch",
    "seq_len": "seq_len",
    "dtype": "dtype",
}


def _selects(selector: dict, cell: Cell) -> bool:
    """Whether ``cell`` matches every axis that ``selector`` (a preset's headline entry)
    names."""
    return all(
        getattr(cell, _SELECTOR_AXES[key]) in values
        for key, values in selector.items()
        if key in _SELECTOR_AXES
    )


def _check_figure(preset: str, spec: FigureSpec, cells: list[Cell]) -> None:
    """A figure must be drawable from the preset's cells: every model, backend and phase it
    names is measured, together, at least once."""
    for key in ("phase", "models", "backends"):
        wanted = getattr(spec, key)
        if wanted is None:
            continue
        axis = key.rstrip("s")
        have = {getattr(c, axis) for c in cells}
        for value in [wanted] if isinstance(wanted, str) else wanted:
            if value not in have:
                raise ConfigError(
                    f"config key figures.{spec.name}.{key}: {value!r} is not measured by "
                    f"preset {preset!r} (it has {key}: {sorted(have)})"
                )
    if not any(spec.selects(c) for c in cells):
        profiled = " with profile: true" if spec.table == "ops" else ""
        raise ConfigError(
            f"config key figures.{spec.name}: no cell{profiled} of preset {preset!r} matches "
            f"phase={spec.phase!r}, models={spec.models}, backends={spec.backends}"
        )


def shipped_figures(
    run_dir: str | os.PathLike, blocks: dict[str, FigureSpec]
) -> dict[str, FigureSpec]:
    """The figures a shipped run draws, by the tables it has: a run with tasks its task
    figures, a whole-model run lm_figures (op_breakdown where it has profiles), a block
    run ``blocks`` (the config's figures)."""
    tables = Path(run_dir) / "tables"
    if (tables / "tasks.csv").is_file():
        return {name: FigureSpec(name) for name in figures_of("tasks")}
    if shipped_kind(run_dir) == "lm":
        ops = tables / "lm_ops.csv"
        return lm_figures(profiled=ops.is_file() and len(ops.read_text().splitlines()) > 1)
    return blocks
