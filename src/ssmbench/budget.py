"""What a run will cost, by arithmetic: a plan of its jobs with estimated seconds.

A rented GPU is lent by the minute, often one command of about ten minutes at a time, so
a preset meant for such a lease (``lease``) is sized before it runs, from a cost model
written down here, and ``scripts/gpu_check.sh`` prints the plan before it starts.  The
jobs of one device run one after another (each GPU job holds the card's one ``gpu``
resource; each CPU cell takes every core), so the run's time is the sum of its jobs'
times, plus the local jobs at the end (tables and figures), which run side by side.

One job costs (:class:`Costs`, seconds):

- every job: ``start_s``, Snakemake starting a Python process that imports torch and
  the package, plus ``cuda_init_s`` for the first CUDA call (the context) on a GPU;
- ``calibrate``: ``calibrate_s`` (copy and GEMM repeats, ssmbench.measure.ceilings);
- ``verify``: ``verify_s`` (small shapes, eager), plus ``jit_s`` for a backend whose
  kernels Triton compiles in that process (the first process to compile them; later
  processes load them from the run's Triton cache);
- ``prewarm``: ``build_s`` and ``shape_s`` per shape it runs (autotuning at the cell's
  shape: the configurations are compiled already, each is timed);
- a bench cell: ``build_s`` (the model and its input; for decode also the prefill that
  fills the cache), the timing budget itself: ``warmup_s`` and at most ``max_time_s`` of
  samples (the sampler stops there whatever the spread), the energy window where the
  samples take less than it (ssmbench.measure.energy), ``compile_s`` for a compile cell.
  This is an upper bound where a preset lets the sampler stop early (``min_time_s`` below
  ``max_time_s``): a whole ci run took 266 s on the idle VM against 394 s estimated; the lease
  preset samples for exactly its ``max_time_s``;
- a profile job: ``build_s`` and ``profile_s`` (warm-up, three profiled calls, the trace);
- ``aggregate_s`` once, and ``figure_s`` per figure over ``parallel`` figures at a time.

The CPU figures were measured on this project's 2-core development VM (see
``CPU_COSTS``); the CUDA figures are estimates for a 16-core H200 host, stated with their
reasons beside them, until a lease measures them: ``scripts/summary.py`` prints the
estimate beside the time measured inside every job class after a run (:func:`compare`), so
the first real run corrects them.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ssmbench import paths
from ssmbench.config import Plan
from ssmbench.matrix import Cell
from ssmbench.prewarm import prewarm_groups
from ssmbench.registry import JIT_FAMILIES, base_family

# JIT_FAMILIES (ssmbench.registry): the families whose fused kernels Triton compiles in the
# process that first runs them (the hybrid's are Mamba-2's; attention's FlashAttention
# kernels ship compiled; S4D has none)

# the energy reading needs a loop at least this long (NVML's counter updates every
# 20-100 ms; ssmbench.measure.energy keeps calling until its window is this long)
ENERGY_WINDOW_S = 1.0


@dataclass(frozen=True)
class Costs:
    """Seconds per job class (see the module docstring)."""

    start_s: float
    cuda_init_s: float
    calibrate_s: float
    verify_s: float
    jit_s: float
    build_s: float
    shape_s: float
    compile_s: float
    profile_s: float
    aggregate_s: float
    figure_s: float
    parallel: int  # local jobs (figures) side by side


# Measured on the 2-core development VM (a whole ci run through scripts/gpu_check.sh,
# 2026-12-01, job walls from Snakemake's log at 1 s resolution): a bench job's wall time
# less the cell's own measure_s is 3.0 s (median of 56; IQR 2.98-3.00): process start,
# python and torch imports, the model, the memory call and the record with its sidecar;
# a verify job 2 s, a profile job 4 s, a figure 4 s and its figure table 2 s (two at a
# time on two cores), aggregate and verdict 2 s each, the quick calibration 1 s.
CPU_COSTS = Costs(
    start_s=2.5,
    cuda_init_s=0.0,
    calibrate_s=1.0,
    verify_s=0.5,
    jit_s=0.0,
    build_s=0.5,
    shape_s=0.5,
    compile_s=30.0,
    profile_s=1.0,
    aggregate_s=4.0,
    figure_s=6.0,
    parallel=2,
)

# Estimates for one H200 on a 16-core host (not yet measured; replace with a lease's
# numbers): process start as the VM's less the slower disk and cores (2.5 s); CUDA context
# creation on an H200 with a recent driver about 1 s; calibration's 51 GEMMs of 8192^3 per
# dtype and 51 copies of 1 GiB take under 2 s of device time, plus warm-up (1 s per
# measurement); verify's eager checks run small shapes, a few seconds of Python; Triton
# compiles one kernel configuration in about 0.5-1 s, and an autotuned kernel family
# (mamba_ssm's SSD, fla's gated delta rule: 5-10 kernels, several configurations each)
# in 20-40 s the first time (30 s taken); autotuning at a new shape times each cached
# configuration (about 2 s a shape); a cold torch.compile of a block 20-60 s (40 s).
CUDA_COSTS = Costs(
    start_s=2.5,
    cuda_init_s=1.0,
    calibrate_s=8.0,
    verify_s=3.0,
    jit_s=30.0,
    build_s=0.7,
    shape_s=2.0,
    compile_s=40.0,
    profile_s=2.0,
    aggregate_s=8.0,
    figure_s=5.0,
    parallel=8,
)


@dataclass(frozen=True)
class Job:
    rule: str
    name: str
    seconds: float


def costs_for(device: str) -> Costs:
    return CUDA_COSTS if device == "cuda" else CPU_COSTS


def cell_seconds(plan: Plan, c: Cell, costs: Costs) -> float:
    """A bench cell's estimate: start-up, build, warm-up, the sampling budget, the energy
    window where the sampling is shorter, and a compile's first call."""
    t = plan.timing
    sampling_s = t.max_time_s
    if plan.device == "cuda":
        sampling_s = max(sampling_s, ENERGY_WINDOW_S)
    seconds = costs.start_s + costs.cuda_init_s + costs.build_s + t.warmup_s + sampling_s
    if c.backend == "compile":
        seconds += costs.compile_s
    if t.timeout_s is not None:  # a cell never outlasts its timeout (start-up aside)
        seconds = min(seconds, costs.start_s + costs.cuda_init_s + t.timeout_s)
    return seconds


def paired_seconds(plan: Plan, costs: Costs) -> float:
    """A paired cell's estimate: start-up, two builds, the warm-up of both, and the pair's
    sampling budget (``paired_timing.max_time_s`` holds both sides' rounds)."""
    t = plan.paired_timing
    seconds = costs.start_s + costs.cuda_init_s + 2 * costs.build_s + 2 * t.warmup_s
    seconds += t.max_time_s
    if t.timeout_s is not None:
        seconds = min(seconds, costs.start_s + costs.cuda_init_s + t.timeout_s)
    return seconds


# A whole-model job (ssmbench.lm) also imports transformers (about 3 s on the 2-core VM)
# and builds the model with random weights: seconds per billion parameters initialised,
# about 20 s/B on the VM's two cores (Qwen2.5-0.5B in ~10 s), far less on a GPU.
LM_IMPORT_S = 3.0
LM_BUILD_S_PER_B = {"cpu": 20.0, "cuda": 2.0}


def lm_jobs(plan: Plan, costs: Costs) -> list[Job]:
    """The jobs of a whole-model plan, each cell priced at its whole sampling budget
    (``max_time_s``): high where calls are short (the sampler stops once ``min_samples``
    and ``min_time_s`` are met), low where ``warmup`` + ``min_samples`` calls outlast the
    budget (a full-size prefill at a long T on a CPU), since the cost of a call is not
    known before it runs."""
    from ssmbench.lm.zoo import entry

    t = plan.timing
    boot = costs.start_s + costs.cuda_init_s + LM_IMPORT_S

    def build_s(model: str) -> float:
        params = entry(model).params or 0.0
        scale = 1.0 if plan.lm.size == "full" else 0.01
        return LM_BUILD_S_PER_B[plan.device] * params / 1e9 * scale

    out = [Job("lm_verify", "/".join(k), boot + build_s(k[0])) for k in plan.lm.verified]
    for c in plan.lm.cells:
        seconds = boot + build_s(c.model) + t.warmup_s + t.max_time_s + ENERGY_WINDOW_S
        if t.timeout_s is not None:
            seconds = min(seconds, boot + t.timeout_s)
        out.append(Job("lm_bench", c.name, seconds))
    for c in sorted(plan.lm.profiled):
        out.append(Job("lm_profile", c.name, boot + build_s(c.model) + costs.profile_s))
    out.append(Job("lm_aggregate", "tables, claims", costs.aggregate_s))
    return out


# A training step (forward, backward, AdamW) of each family at the case study's parity
# size (batch 64, L = 128, d_model 64, 2 layers), one thread on the 2-core VM (median of
# 15 steps, 2026-12-01, tasks/train.py, at a load average of 1.4-1.8 from other runs, so
# the SSM families' spread was wide: Mamba-2 250-325 ms); a job's steps scale with
# batch x L x d_model x layers.  Mamba-1 re-measured 2026-12-02 once its torch backend
# trained through chunked_scan: 0.452 and 0.487 s in two runs at a load average of 3.7-4.0,
# where the code before took 1.72 and 1.81 s (it was 1.934).  On a GPU every family is far
# faster and launch-bound at these sizes: a rough 20 ms a step until a lease measures it.
TASK_STEP_S = {
    "attention": 0.069,
    "s4d": 0.074,
    "mamba": 0.470,
    "mamba2": 0.270,
    "mamba3": 0.317,
    "deltanet": 0.355,
    "hybrid": 0.226,
}
TASK_STEP_WORK = 64 * 128 * 64 * 2
TASK_STEP_S_CUDA = 0.02
EVAL_STEP_FRACTION = 1 / 3  # a forward without backward or update


def _train_len(data: dict) -> int:
    """A split's sequence length, from its generator's parameters."""
    if "seq_len" in data:
        return data["seq_len"]
    if "max_len" in data and "max_features" in data:  # IMDb: reviews truncated to it
        return data["max_len"]
    if "length" in data or "max_len" in data:  # exact copying: bos s sep s eos
        return 2 * data.get("length", data.get("max_len")) + 2
    return 128


def task_jobs(plan: Plan, costs: Costs) -> list[Job]:
    """The training jobs of a plan with tasks, each priced by its steps (and evaluations)
    at the family's measured step time, scaled by its size; one thread per job, so
    ``costs.parallel`` run side by side and each costs its share of the wall time.  Rough:
    the step times were measured at one size and scale by arithmetic."""
    import math

    from ssmbench.tasks.imdb import has_data

    imdb_here = has_data(plan.tasks.imdb_dir)
    out = []
    for c in plan.tasks.cells:
        if c.task == "imdb" and not imdb_here:  # unavailable: the job only says so
            out.append(Job("task_train", c.name, costs.start_s / costs.parallel))
            continue
        spec = plan.tasks.spec(c.task)
        family = base_family(c.family)  # a variant trains at its family's cost
        train, model = spec["train"], spec["models"][family]
        data = spec["data"]["train"]
        n = data.get("n") or data.get("subset") or 25000  # IMDb without a subset: all
        length = _train_len(data)
        work = train["batch_size"] * length * model["d_model"] * model["n_layers"]
        step = (
            TASK_STEP_S_CUDA
            if plan.device == "cuda"
            else TASK_STEP_S[family] * work / TASK_STEP_WORK
        )
        steps = train["epochs"] * math.ceil(n / train["batch_size"])
        evals = sum(
            (e.get("n") or e.get("subset") or 25000)
            * _train_len(e)
            / (train["batch_size"] * length)
            for e in spec["data"]["evals"].values()
        )
        rounds = train["epochs"] if train.get("eval_every_epoch", True) else 1
        seconds = costs.start_s + step * (steps + evals * rounds * EVAL_STEP_FRACTION)
        out.append(Job("task_train", c.name, seconds / costs.parallel))
    return out


def jobs(plan: Plan) -> list[Job]:
    """Every job of ``plan`` with its estimated seconds, in the order the run schedules
    them (calibration, then verification, prewarming and cells, headline first)."""
    costs = costs_for(plan.device)
    if plan.kind == "lm":
        figures = [Job("figure", n, costs.figure_s / costs.parallel) for n in plan.figures]
        return lm_jobs(plan, costs) + figures
    boot = costs.start_s + costs.cuda_init_s
    out = [Job("calibrate", "calibrate", boot + costs.calibrate_s)]
    jit_seen: set[str] = set()
    for model, backend in sorted(plan.pairs, key=lambda p: (p not in plan.headline_pairs, p)):
        seconds = boot + costs.verify_s
        family = JIT_FAMILIES.get(model)
        if backend == "fused" and plan.device == "cuda" and family and family not in jit_seen:
            jit_seen.add(family)  # compiled once per kernel family, then cached
            seconds += costs.jit_s
        out.append(Job("verify", f"{model}/{backend}", seconds))
    if plan.device == "cuda":
        for (model, backend, dtype), cells in prewarm_groups(plan.cells).items():
            seconds = boot + len(cells) * (costs.build_s + costs.shape_s)
            if backend == "compile":
                seconds += costs.compile_s
            out.append(Job("prewarm", f"{model}/{backend}-{dtype}", seconds))
    for c in sorted(plan.cells, key=lambda c: (c not in plan.headline, c)):
        name = f"{c.model}/{c.backend}/{c.phase}/b{c.batch}-t{c.seq_len}-{c.dtype}"
        out.append(Job("bench", name, cell_seconds(plan, c, costs)))
        for r in range(1, plan.cell_replicates_of(c)):  # a headline cell's other processes
            out.append(Job("bench_replicate", f"{name}-r{r}", cell_seconds(plan, c, costs)))
    for c, r in plan.paired_jobs:
        name = f"{c.model}~attention/{c.backend}/{c.phase}/b{c.batch}-t{c.seq_len}-{c.dtype}"
        out.append(Job("paired", f"{name}-r{r}", paired_seconds(plan, costs)))
    for c in sorted(plan.profiled):
        name = f"{c.model}/{c.backend}/{c.phase}/b{c.batch}-t{c.seq_len}-{c.dtype}"
        seconds = boot + costs.build_s + costs.profile_s
        out.append(Job("profile", name, seconds))
    if plan.tasks:
        out += task_jobs(plan, costs)
    out.append(Job("aggregate", "tables, claims", costs.aggregate_s))
    # figures run side by side (local jobs): each costs its share of the wall time
    for name in plan.figures:
        out.append(Job("figure", name, costs.figure_s / costs.parallel))
    return out


def total_seconds(plan: Plan) -> float:
    return sum(j.seconds for j in jobs(plan))


def describe(plan: Plan) -> str:
    """The plan as printed before a run: jobs and seconds per rule, and the total."""
    plan_jobs = jobs(plan)
    count, seconds = Counter(), Counter()
    for j in plan_jobs:
        count[j.rule] += 1
        seconds[j.rule] += j.seconds
    lines = [
        f"plan of run {plan.run!r} (preset {plan.preset}, device {plan.device}): "
        f"{len(plan.cells)} cells, {len(plan.headline)} of them headline"
        if plan.kind == "blocks"
        else f"{len(plan.lm.cells)} whole-model cells ({plan.lm.size} size), each at its "
        "sampling budget (ssmbench.budget.lm_jobs)"
    ]
    width = max(len(rule) for rule in count)
    lines.append(f"  {'rule':{width}s} {'jobs':>5s} {'estimated s':>12s}")
    for rule in dict.fromkeys(j.rule for j in plan_jobs):
        lines.append(f"  {rule:{width}s} {count[rule]:5d} {seconds[rule]:12.0f}")
    total = sum(seconds.values())
    lines.append(f"  {'total':{width}s} {len(plan_jobs):5d} {total:12.0f}  (~{total / 60:.1f} min)")
    return "\n".join(lines)


def measured(root: str | os.PathLike, run: str) -> dict[str, tuple[int, float]]:
    """rule -> (jobs, seconds) a finished or stopped run spent inside its jobs, read from
    the provenance sidecars under ``root``'s results/<run> and figures/<run> (each job's
    start and end; one job may write several).  The process start before a job's script
    begins is not in it."""
    spans: dict[tuple[str, str], float] = {}
    sidecars = [
        p
        for top in ("results", "figures")
        for p in Path(root, top, run).rglob(f"*{paths.PROV_SUFFIX}")
    ]
    for sidecar in sidecars:
        try:
            prov = json.loads(sidecar.read_text())
            start, end = (datetime.fromisoformat(prov[k]) for k in ("started", "ended"))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        spans[(prov.get("rule", "?"), prov["started"])] = (end - start).total_seconds()
    out: dict[str, tuple[int, float]] = {}
    for (rule, _), seconds in spans.items():
        jobs, total = out.get(rule, (0, 0.0))
        out[rule] = (jobs + 1, total + seconds)
    return out


def compare(plan: Plan, root: str | os.PathLike = ".") -> str:
    """The plan's estimate beside what the run measured, per rule: the first run on a new
    device is how the cost model learns its numbers."""
    estimate: dict[str, list[float]] = {}
    for j in jobs(plan):
        estimate.setdefault(j.rule, []).append(j.seconds)
    got = measured(root, plan.run)
    lines = [f"  {'rule':10s} {'planned':>8s} {'est. s':>8s} {'ran':>5s} {'in-job s':>9s}"]
    for rule in dict.fromkeys([*estimate, *got]):
        planned = estimate.get(rule, [])
        ran, seconds = got.get(rule, (0, 0.0))
        lines.append(f"  {rule:10s} {len(planned):8d} {sum(planned):8.0f} {ran:5d} {seconds:9.1f}")
    return "\n".join(lines)
