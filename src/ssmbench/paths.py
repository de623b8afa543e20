"""Every path the workflow reads or writes, defined once (docs/ARCHITECTURE.md, "The contract").

Patterns use Snakemake's ``{wildcard}`` syntax so the rules and the Python code agree;
the functions fill them in.  Paths are relative to the workflow's working directory.
"""

from __future__ import annotations

import functools
import string
from pathlib import Path

# the checkout this package is used from (src/ssmbench/paths.py: two folders up)
REPO = Path(__file__).resolve().parents[2]

PRECOLLECTED = "results/precollected"

_AXES = "{model}/{backend}/{phase}/b{batch}-t{seq_len}-n{d_state}-{dtype}"
VERIFY = "results/{run}/verify/{model}/{backend}.json"
CELL = "results/{run}/cells/" + _AXES + ".json"
# a headline cell measured in k processes (a headline selector's `replicates`): the first
# is CELL, replicates r = 1..k-1 beside it
CELL_REPLICATE = "results/{run}/cells/" + _AXES + "-r{replicate}.json"
PROFILE = "results/{run}/profile/" + _AXES
OPS = PROFILE + ".ops.csv"
TRACE = PROFILE + ".trace.json.gz"
# Every job's log (rule log:), beside the outputs it writes
BENCH_LOG = "logs/{run}/bench/" + _AXES + ".log"
BENCH_LOG_REPLICATE = "logs/{run}/bench/" + _AXES + "-r{replicate}.log"
PROFILE_LOG = "logs/{run}/profile/" + _AXES + ".log"
VERIFY_LOG = "logs/{run}/verify/{model}/{backend}.log"
PREWARM_LOG = "logs/{run}/prewarm/{model}/{backend}-{dtype}.log"
CALIBRATE_LOG = "logs/{run}/calibrate.log"
CALIBRATE_GPU_LOG = "logs/{run}/calibrate/{gpu}.log"
AGGREGATE_LOG = "logs/{run}/aggregate.log"
VERDICT_LOG = "logs/{run}/verdict.log"
FIGURE_TABLE_LOG = "logs/{run}/figure_table/{figure}.log"
# a figure's log, by where its tables come from (FIGURES_BY_ORIGIN)
FIGURE_LOGS = {
    "live": "logs/{run}/figure/{figure}.log",
    "precollected": "logs/precollected/{run}/figure/{figure}.log",
    "imported": "logs/imported/{run}/figure/{figure}.log",
    "compare": "logs/compare/{run}/figure/{figure}.log",
}
COMPARE_TABLE_LOG = "logs/compare/{run}/compare_table.log"
VERIFY_PROVENANCE_LOG = "logs/precollected/{run}/verify_provenance.log"
IMPORT_LOG = "logs/imported/ssm_scope.log"
# a paired cell (ssmbench.paired): its SSM side's axes; attention is the other side; one
# record per replicate process r = 0..k-1 (preset key paired.replicates)
PAIRED = "results/{run}/paired/" + _AXES + "-r{replicate}.json"
PAIRED_LOG = "logs/{run}/paired/" + _AXES + "-r{replicate}.log"
# the run's calibration (rule calibrate): one record on a CPU, in a shipped run, and where
# the plan cannot name the GPUs (SLURM chose them); on a node whose GPUs the jobs lease,
# one per GPU, named by its Gpu.key (UUID, else PCI bus id: rule calibrate_gpu)
DEVICE = "results/{run}/device.json"
DEVICE_GPU = "results/{run}/devices/{gpu}.json"
PREWARM = "results/{run}/prewarm/{model}/{backend}-{dtype}.json"
# the mark of a run stopped because an output could not be saved (ssmbench.outcome)
STOPPED = "results/{run}/STOPPED"
# caches a run's jobs share (Triton's kernels and autotuning results): not results
CACHE = ".cache/{run}/{name}"
TABLE = "results/{run}/tables/{table}"
FIGURE_TABLE = "results/{run}/tables/figures/{figure}.csv"
FIGURE = "figures/{run}/{figure}.{ext}"
# A shipped or imported run draws into a folder of its own, so that a live run of the same
# name (run=cpu beside the shipped cpu run) never overwrites its figures, nor they the live
# run's; hence no run is named precollected, imported or provenance
# (ssmbench.config.RESERVED_RUNS).
PRECOLLECTED_FIGURE = "figures/precollected/{run}/{figure}.{ext}"
IMPORTED_FIGURE = "figures/imported/{run}/{figure}.{ext}"
# Runs side by side (ssmbench.compare): {run} names the comparison, COMPARISON the one the
# workflow draws (every shipped block run beside every imported run); no run is named
# compare (ssmbench.config.RESERVED_RUNS).
COMPARE_FIGURE = "figures/compare/{run}/{figure}.{ext}"
COMPARE_TABLE = "results/compare/{run}/compare.csv"
COMPARISON = "devices"
# where the figures of a run come from (the config's ``source``, or an importer) -> pattern
FIGURES_BY_ORIGIN = {
    "live": FIGURE,
    "precollected": PRECOLLECTED_FIGURE,
    "imported": IMPORTED_FIGURE,
    "compare": COMPARE_FIGURE,
}
PRECOLLECTED_TABLE = "{precollected}/{run}/tables/{table}"
IMPORTED_TABLE = "results/imported/{run}/tables/{table}"
# a shipped run checked against its sidecars and manifest (ssmbench.provenance.verify_run)
VERIFIED = "results/provenance/{run}.verified.json"

# The tables `aggregate` writes (docs/ARCHITECTURE.md, "The contract").
TABLES = (
    "cells.csv",
    "cells.parquet",
    "samples.parquet",
    "paired.csv",
    "pairs.csv",
    "verify.csv",
    "ops.csv",
    "claims.csv",
    "workload.csv",
    "workload.parquet",
)
FIGURE_EXTS = ("pdf", "png", "ipynb")

PROV_SUFFIX = ".prov.json"


def prov(path: str) -> str:
    """The provenance sidecar of ``path``."""
    return f"{path}{PROV_SUFFIX}"


def verify_record(run: str, model: str, backend: str) -> str:
    return VERIFY.format(run=run, model=model, backend=backend)


def cell_record(run: str, cell, replicate: int = 0) -> str:
    """``cell`` is anything with the cell's axes as attributes (``ssmbench.config.Cell``);
    ``replicate`` r >= 1 is the record of its (r+1)-th process (CELL_REPLICATE)."""
    if replicate:
        return _cell_path(CELL_REPLICATE, run, cell, replicate=replicate)
    return _cell_path(CELL, run, cell)


@functools.cache
def _axes(pattern: str) -> tuple[str, ...]:
    """The wildcards of ``pattern`` other than ``run``: the cell's axes it names."""
    return tuple(f for _, f, _, _ in string.Formatter().parse(pattern) if f and f != "run")


def _cell_path(pattern: str, run: str, cell, **given) -> str:
    """``pattern`` filled in with ``run``, the ``given`` wildcards and the other axes it
    names, read off ``cell`` (a block cell's d_state, a whole-model cell's new_tokens)."""
    axes = {axis: getattr(cell, axis) for axis in _axes(pattern) if axis not in given}
    return pattern.format(run=run, **axes, **given)


def paired_record(run: str, cell, replicate: int = 0) -> str:
    """The record of replicate ``replicate`` of the paired cell whose SSM side is ``cell``."""
    return _cell_path(PAIRED, run, cell, replicate=replicate)


def paired_log(run: str, cell, replicate: int = 0) -> str:
    return _cell_path(PAIRED_LOG, run, cell, replicate=replicate)


def bench_log(run: str, cell, replicate: int = 0) -> str:
    """The log of a cell's bench job (of its replicate ``replicate``): it exists once the
    job has started."""
    if replicate:
        return _cell_path(BENCH_LOG_REPLICATE, run, cell, replicate=replicate)
    return _cell_path(BENCH_LOG, run, cell)


def ops(run: str, cell) -> str:
    """The operator profile (ops.csv rows) of a profiled cell."""
    return _cell_path(OPS, run, cell)


def trace(run: str, cell) -> str:
    """The gzipped Chrome trace of a profiled cell."""
    return _cell_path(TRACE, run, cell)


def prewarm(run: str, model: str, backend: str, dtype: str) -> str:
    """What the prewarm job of (model, backend, dtype) ran before the run's cells."""
    return PREWARM.format(run=run, model=model, backend=backend, dtype=dtype)


def stopped(run: str) -> str:
    """Why the run stopped early (a disk full), while it stays stopped: jobs refuse to start."""
    return STOPPED.format(run=run)


def cache(run: str, name: str) -> str:
    return CACHE.format(run=run, name=name)


def device(run: str) -> str:
    """The run's calibration: measured ceilings and datasheet peaks."""
    return DEVICE.format(run=run)


def device_gpu(run: str, gpu: str) -> str:
    """The calibration of one GPU, named by its key (``ssmbench.devices.Gpu.key``)."""
    return DEVICE_GPU.format(run=run, gpu=gpu)


def table(run: str, name: str) -> str:
    return TABLE.format(run=run, table=name)


def figure_table(run: str, figure: str) -> str:
    return FIGURE_TABLE.format(run=run, figure=figure)


def figure(run: str, name: str, ext: str = "pdf", origin: str = "live") -> str:
    """A figure of ``run``, whose tables are ``origin``'s: "live" (measured here),
    "precollected" (shipped) or "imported" (another study's)."""
    return FIGURES_BY_ORIGIN[origin].format(run=run, figure=name, ext=ext)


def imported_table(run: str, name: str) -> str:
    """A table another study's data was imported into (ssmbench.importers)."""
    return IMPORTED_TABLE.format(run=run, table=name)


def precollected_table(run: str, name: str, precollected: str = PRECOLLECTED) -> str:
    return PRECOLLECTED_TABLE.format(precollected=precollected, run=run, table=name)


def verified(run: str) -> str:
    """The stamp saying that precollected run ``run`` matched its manifest and sidecars."""
    return VERIFIED.format(run=run)


# Whole-model cells (ssmbench.lm.cell): a record per (model, backend, phase, batch, T,
# new tokens N, dtype), and the run's table of them (ssmbench.lm.table)
_LM_AXES = "{model}/{backend}/{phase}/b{batch}-t{seq_len}-g{new_tokens}-{dtype}"
LM_CELL = "results/{run}/lm/" + _LM_AXES + ".json"
LM_LOG = "logs/{run}/lm/" + _LM_AXES + ".log"
LM_PROFILE_LOG = "logs/{run}/lm/" + _LM_AXES + ".profile.log"
LM_VERIFY_LOG = "logs/{run}/lm-verify/{model}/{backend}-{dtype}.log"
LM_AGGREGATE_LOG = "logs/{run}/lm_aggregate.log"
# the gate of one (model, backend, dtype), run once before its cells (ssmbench.lm.verify)
LM_VERIFY = "results/{run}/lm-verify/{model}/{backend}-{dtype}.json"
# a profiled cell's operators (ops.csv's columns) and its Chrome trace
LM_PROFILE = "results/{run}/lm-profile/" + _LM_AXES
LM_OPS = LM_PROFILE + ".ops.csv"
LM_TRACE = LM_PROFILE + ".trace.json.gz"
# the tables rule lm_aggregate writes (claims.csv: config/claims.yaml on the lm cells)
LM_TABLES = ("lm.csv", "lm.parquet", "lm_ops.csv", "claims.csv")


def lm_cell_record(run: str, cell) -> str:
    """``cell`` has the axes of ``ssmbench.lm.cell.LMCellSpec`` as attributes."""
    return _cell_path(LM_CELL, run, cell)


def lm_verify(run: str, model: str, backend: str, dtype: str) -> str:
    return LM_VERIFY.format(run=run, model=model, backend=backend, dtype=dtype)


def lm_ops(run: str, cell) -> str:
    return _cell_path(LM_OPS, run, cell)


def lm_trace(run: str, cell) -> str:
    return _cell_path(LM_TRACE, run, cell)


# The quality axis (ssmbench.tasks): a record per (task, family, seed), with its loss curve,
# and the run's table of them
TASK = "results/{run}/tasks/{task}/{family}/s{seed}.json"
TASK_LOG = "logs/{run}/tasks/{task}/{family}/s{seed}.log"
TASK_TABLE_LOG = "logs/{run}/task_table.log"
TASK_FIGURE_TABLES_LOG = "logs/{run}/task_figure_tables.log"
TASKS_TABLE = "tasks.csv"
# the two task figures' tables (ssmbench.tasks.table), beside the run's other tables
TASK_FIGURE_TABLES = ("task_accuracy.csv", "quality_vs_speed.csv")


def task_record(run: str, cell) -> str:
    """``cell`` is an ``ssmbench.tasks.matrix.TaskCell``."""
    return TASK.format(run=run, task=cell.task, family=cell.family, seed=cell.seed)
