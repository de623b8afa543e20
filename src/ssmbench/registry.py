"""The one place that names the benchmark's families, backends, phases and statuses.

Everything that needs a list asks here (the config and its schema test, the model
builder, the command line, the records, the analysis, the profiler's scopes, the
scripts); nothing else types one out.  Imports no torch and no pandas: the workflow and
``python -m ssmbench --help`` read it on machines without either.

Families (``ssmbench.models.<name>``; operators and steps as in :mod:`ssmbench.ops`):

=========  ==============  ===================  =====  =========  ==========
family     operator        step                 state  scope      fused
=========  ==============  ===================  =====  =========  ==========
attention  attention       attention_step       no     attention  flash_attn
s4d        s4d             s4d_step             yes    ssm_scan   (none)
mamba      selective_scan  selective_scan_step  yes    ssm_scan   mamba_ssm
mamba2     ssd             ssd_step             yes    ssm_scan   mamba_ssm
mamba3     mamba3          mamba3_step          yes    ssm_scan   mamba_ssm
deltanet   delta_rule      delta_rule_step      no     ssm_scan   fla
hybrid     (its parts: attention and mamba2 layers, each in its own scope)
=========  ==============  ===================  =====  =========  ==========

Each module holds the operator's and the step's ``{backend: function}`` dicts under the
names :class:`Family` gives (``SSD_BACKENDS``, ``SSD_STEP_BACKENDS``, ...), its fused
wrappers among them.  "fused" names the kernels' package; :class:`Family` also says the
packages those kernels import (``fused_packages``), the dtypes they take
(``fused_dtypes``: Mamba-3's bf16 only, FlashAttention's fp16 and bf16) and whose Triton
kernels a process compiles on first use (``jit``, :data:`JIT_FAMILIES`).
"state: no" pins a cell's ``d_state`` to 0 (n0): attention has none, and the delta
rule's is fixed by its head dims.  The scope is the profiler bucket
(:mod:`ssmbench.measure.profile`) that everything inside the operator's or the step's
``record_function`` range counts as (:data:`PROFILER_RANGES`).

Backends:

===========  ====  ==================  ==========================================
backend      tier  phases              what
===========  ====  ==================  ==========================================
naive        0     all                 a plain loop over time, the slow truth
torch        1     all                 chunked / parallel PyTorch
torch-mixed  1     all                 torch with its matmuls in the cell's bf16
compile      1     prefill, train      torch.compile of torch (no decode step)
fused        2     all                 the ecosystem's kernels (ssmbench.models.kernels)
torch-graph  1     decode              torch's decode step replayed in a CUDA graph
fused-graph  2     decode              fused's decode step replayed in a CUDA graph
===========  ====  ==================  ==========================================

The tier says how tuned a backend is: the go/no-go compares sides at the highest tier
both reached (:mod:`ssmbench.analysis`).  A graph backend builds its model with its base
backend and reuses its verification (:func:`verified_backend`).
"""

from __future__ import annotations

from dataclasses import dataclass

# --- phases, statuses, dtypes ----------------------------------------------------------

PHASES = ("prefill", "decode", "train")
SEQUENCE_PHASES = ("prefill", "train")  # the sequence operator (train: its backward too)
STEP_PHASES = ("decode",)  # the one-token step
# Cell statuses (docs/ARCHITECTURE.md, "The contract": status is data)
STATUSES = ("ok", "oom", "unavailable", "timeout", "failed", "not_run")
# dtypes a sweep may list; verification also knows fp64 (the references' precision)
SWEEP_DTYPES = ("fp32", "fp16", "bf16")
DTYPES = ("fp64", *SWEEP_DTYPES)


# --- families --------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """One model family: a module ``ssmbench.models.<name>`` and its operator."""

    name: str
    operator: str | None  # the sequence operator's name in ssmbench.ops (None: hybrid)
    step: str | None  # its one-token step's name in ssmbench.ops
    backends: str | None  # name of the operator's {backend: function} dict in the module
    step_backends: str | None  # ... and of the step's
    mixer: str | None  # the block mixer class, whose forward and step pick a backend
    has_state: bool  # False: d_state is pinned to 0 (n0)
    scope: str | None  # profiler bucket of the operator and step: attention or ssm_scan
    fused: str | None  # the package of the fused kernels (None: no fused kernel)
    fused_unavailable: str  # when the fused backend is unavailable, in words
    parts: tuple[str, ...] = ()  # the families whose layers make up a hybrid
    # the packages the fused kernels import, in the order a missing one is named (the
    # family module's fused_unavailable checks them; Mamba-1's prefill also needs its
    # CUDA extension, selective_scan_cuda)
    fused_packages: tuple[str, ...] = ()
    fused_dtypes: tuple[str, ...] = SWEEP_DTYPES  # the sweep dtypes its kernels take
    fused_dtypes_why: str = ""  # why not the others, in words
    # the family whose Triton kernels the first process to run them compiles (and caches
    # for the rest), None where nothing is compiled per process (ssmbench.budget)
    jit: str | None = None

    @property
    def module(self) -> str:
        """The family's model module, e.g. ``ssmbench.models.mamba2``."""
        return f"ssmbench.models.{self.name}"


_FLASH_DTYPES = "FlashAttention-2 takes fp16 and bf16 only"
_FAMILIES = (
    Family(
        "attention",
        "attention",
        "attention_step",
        "ATTENTION_BACKENDS",
        "ATTENTION_STEP_BACKENDS",
        "AttentionMixer",
        has_state=False,
        scope="attention",
        fused="flash_attn",
        fused_unavailable="FlashAttention-2 (else SDPA's flash kernel) needs CUDA and fp16/bf16",
        fused_dtypes=("fp16", "bf16"),
        fused_dtypes_why=_FLASH_DTYPES,
    ),
    Family(
        "s4d",
        "s4d",
        "s4d_step",
        "S4D_BACKENDS",
        "S4D_STEP_BACKENDS",
        "S4DMixer",
        has_state=True,
        scope="ssm_scan",
        fused=None,
        fused_unavailable="no fused S4D kernel: the FFT convolution (torch backend) is its "
        "fast path",
        fused_dtypes=(),
    ),
    Family(
        "mamba",
        "selective_scan",
        "selective_scan_step",
        "SCAN_BACKENDS",
        "SCAN_STEP_BACKENDS",
        "MambaMixer",
        has_state=True,
        scope="ssm_scan",
        fused="mamba_ssm",
        fused_unavailable="prefill and train need mamba_ssm's selective_scan_cuda (a CUDA "
        "extension) on CUDA; the decode step is Triton",
        fused_packages=("mamba_ssm", "triton"),
        jit="mamba",
    ),
    Family(
        "mamba2",
        "ssd",
        "ssd_step",
        "SSD_BACKENDS",
        "SSD_STEP_BACKENDS",
        "Mamba2Mixer",
        has_state=True,
        scope="ssm_scan",
        fused="mamba_ssm",
        fused_unavailable="mamba_ssm's Triton kernels need triton and CUDA (or the Triton "
        "interpreter)",
        fused_packages=("triton", "mamba_ssm"),
        jit="mamba2",
    ),
    Family(
        "mamba3",
        "mamba3",
        "mamba3_step",
        "MAMBA3_BACKENDS",
        "MAMBA3_STEP_BACKENDS",
        "Mamba3Mixer",
        has_state=True,
        scope="ssm_scan",
        fused="mamba_ssm",
        fused_unavailable="mamba_ssm's Mamba-3 kernels need CUDA (PTX, TMA: no interpreter) "
        "and compute in bf16",
        fused_packages=("triton", "mamba_ssm"),
        fused_dtypes=("bf16",),
        fused_dtypes_why="mamba_ssm's Mamba-3 SISO kernel computes in bf16 only (it casts x, B, "
        "C to bf16)",
        jit="mamba3",
    ),
    Family(
        "deltanet",
        "delta_rule",
        "delta_rule_step",
        "DELTA_RULE_BACKENDS",
        "DELTA_RULE_STEP_BACKENDS",
        "DeltaNetMixer",
        has_state=False,
        scope="ssm_scan",
        fused="fla",
        fused_unavailable="fla's Triton kernels need triton and CUDA (or the Triton "
        "interpreter), head dims up to 256",
        fused_packages=("triton", "fla"),
        jit="deltanet",
    ),
    Family(
        "hybrid",
        None,
        None,
        None,
        None,
        None,
        has_state=True,
        scope=None,
        fused=None,
        fused_unavailable="as its parts': attention's and mamba2's",
        parts=("attention", "mamba2"),
        fused_dtypes=("fp16", "bf16"),  # its attention layers'
        fused_dtypes_why=_FLASH_DTYPES,
        jit="mamba2",  # its Mamba-2 layers' (FlashAttention's kernels ship compiled)
    ),
)

FAMILY: dict[str, Family] = {f.name: f for f in _FAMILIES}
FAMILIES = tuple(FAMILY)
# the families with an operator of their own (every one but the hybrid)
OPERATOR_FAMILIES = tuple(f.name for f in _FAMILIES if f.operator is not None)
# the families a go/no-go row sets against attention
SSM_FAMILIES = tuple(f for f in FAMILIES if f != "attention")
# the families whose decode step is a recurrence of their own (the hybrid's are its
# parts'): their TTFT and TPOT lines cross attention's (ssmbench.analysis.crossovers)
RECURRENT_FAMILIES = tuple(f for f in OPERATOR_FAMILIES if f != "attention")
# family -> the family whose fused Triton kernels its first process compiles
JIT_FAMILIES = {f.name: f.jit for f in _FAMILIES if f.jit is not None}
# axes a family does not have are pinned to a placeholder (docs/ARCHITECTURE.md, "The contract")
NO_STATE = frozenset(f.name for f in _FAMILIES if not f.has_state)


# The SSM operators whose sequence form runs its matmuls in half precision, by backend
# (fp32 accumulation, fp32 decays and state): mamba_ssm's and fla's chunked kernels, and
# the torch-mixed forms (ssmbench.models: mamba2, mamba3, deltanet; the other families
# raise BackendUnavailable).  Mamba-1's fused scan has no matmul: mamba_ssm's
# selective_scan_cuda loads half inputs and scans in float32 registers.
HALF_MATMULS = {
    "fused": ("mamba2", "mamba3", "deltanet"),
    "torch-mixed": ("mamba2", "mamba3", "deltanet"),
}


# --- named variants of a family's block (the quality axis only) -----------------------


@dataclass(frozen=True)
class Variant:
    """A family's block with some of its options changed, trained beside the family on
    the case study's tasks (``ssmbench.tasks``) under a name of its own; the benchmark
    times the families' blocks as published, so a variant has no cells: its speed is its
    family's (the options change an initialisation or a bound, not the work)."""

    name: str
    family: str  # whose mixer, operator and colour it takes
    mixer_options: tuple[tuple[str, object], ...]  # the block's keyword arguments
    what: str  # what it changes, in words

    @property
    def options(self) -> dict:
        return dict(self.mixer_options)


_VARIANTS = (
    # Mamba-3 that tracks parity at the case study's budget (scripts/bench_mamba3_parity.py,
    # docs/ARCHITECTURE.md "Task models"): parity wants a half turn of the state per 1
    # bit, dt theta = pi, which mamba_ssm's |theta| < pi reaches only at dt > 1, ten times
    # its largest initial dt
    Variant(
        "mamba3-wide-dt-free-angle",
        "mamba3",
        (("dt_range", (0.1, 1.0)), ("angle_bound", None)),
        "Mamba-3 with dt initialised in [0.1, 1] (mamba_ssm: [0.001, 0.1]) and the rotation "
        "rate theta unbounded (mamba_ssm: pi tanh)",
    ),
)
VARIANTS: dict[str, Variant] = {v.name: v for v in _VARIANTS}
# what a task job may train: a family's block or a named variant of one
TASK_FAMILIES = (*FAMILIES, *VARIANTS)


def base_family(name: str) -> str:
    """The family of a family or a variant name."""
    return VARIANTS[name].family if name in VARIANTS else name


# --- backends --------------------------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    """One backend: how tuned it is, the phases it runs and, for a graph backend, its base."""

    name: str
    tier: int  # 0 naive, 1 PyTorch, 2 fused kernels
    phases: tuple[str, ...] = PHASES
    base: str | None = None  # a graph backend's eager backend (it builds the model with it)
    why_not: str = ""  # why it does not run the other phases (its cells' reason)

    def unavailable(self, phase: str) -> str:
        """Why this backend does not run ``phase`` ("" when it does)."""
        if phase in self.phases:
            return ""
        return self.why_not.format(name=self.name, phase=phase)

    @property
    def graph(self) -> str | None:
        """The graph backend that replays this backend's decode step, if any."""
        return next((b.name for b in _BACKENDS if b.base == self.name), None)


_BACKENDS = (
    Backend("naive", 0),
    Backend("torch", 1),
    Backend("torch-mixed", 1),
    Backend(
        "compile",
        1,
        SEQUENCE_PHASES,
        why_not="compile has no decode step: torch.compile covers the sequence operators; "
        "a decode step runs the eager one-token code of the torch cells",
    ),
    Backend("fused", 2),
    Backend(
        "torch-graph", 1, STEP_PHASES, "torch", "{name} times the decode step only, not {phase}"
    ),
    Backend(
        "fused-graph", 2, STEP_PHASES, "fused", "{name} times the decode step only, not {phase}"
    ),
)

BACKEND: dict[str, Backend] = {b.name: b for b in _BACKENDS}
BACKENDS = tuple(BACKEND)
# the backends a model is built with (ssmbench.models.build_model): all but the graph ones
MODEL_BACKENDS = tuple(b.name for b in _BACKENDS if b.base is None)
# the eager backends every family implements
UNIVERSAL_BACKENDS = ("naive", "torch")
# graph backend -> its base: the decode step of the base captured once in a CUDA graph
GRAPH_BACKENDS = {b.name: b.base for b in _BACKENDS if b.base is not None}
BACKEND_TIERS = {b.name: b.tier for b in _BACKENDS}


def verified_backend(backend: str) -> str:
    """The backend whose verify record a cell of ``backend`` needs: a graph backend's base."""
    return GRAPH_BACKENDS.get(backend, backend)


# backends whose kernels are Triton or CUDA code of their own (mamba_ssm, fla, FlashAttention)
FUSED_BACKENDS = tuple(b for b in BACKENDS if verified_backend(b) == "fused")
# (eager, graph): each eager decode step beside its CUDA-graph replay
GRAPH_PAIRS = tuple((base, graph) for graph, base in GRAPH_BACKENDS.items())

# A verification's statuses, per phase and in all (ssmbench.verify; the verify records
# and table): passed, failed, or unavailable with the reason
VERIFY_STATUSES = ("passed", "failed", "unavailable")


# --- profiler scopes -------------------------------------------------------------------

RANGE_PREFIX = "ssmbench::"


def _ranges() -> dict[str, str]:
    """Each name a ``pick_backend`` caller passes -> its profiler range: the operator's and
    the mixer's forward ``ssmbench::<scope>::<operator>``, the steps (``<step>`` and
    ``<Mixer>.step``) ``ssmbench::<scope>::<step>``."""
    ranges = {}
    for f in _FAMILIES:
        if f.operator is None:
            continue
        ranges[f.operator] = ranges[f.mixer] = f"{RANGE_PREFIX}{f.scope}::{f.operator}"
        ranges[f.step] = ranges[f"{f.mixer}.step"] = f"{RANGE_PREFIX}{f.scope}::{f.step}"
    return ranges


PROFILER_RANGES: dict[str, str] = _ranges()
SCOPES = tuple(dict.fromkeys(f.scope for f in _FAMILIES if f.scope is not None))


def range_scope(name: str) -> str | None:
    """The scope of a profiler range named by :data:`PROFILER_RANGES`
    (``ssmbench::ssm_scan::ssd_step`` -> ``ssm_scan``), else None."""
    if not name.startswith(RANGE_PREFIX):
        return None
    scope = name[len(RANGE_PREFIX) :].split("::", 1)[0]
    return scope if scope in SCOPES else None


# --- figures -----------------------------------------------------------------------------

# The kinds of run a figure is drawn for: a live or shipped block run ("blocks"), a
# whole-model run ("lm", from its lm tables through ssmbench.lm.table.cells_view), a run
# with tasks ("tasks": its block cells are the families' speed), an imported run of
# another study ("imported", ssmbench.importers)
RUN_KINDS = ("blocks", "lm", "tasks", "imported")
# Not a run: two or more runs side by side (ssmbench.compare), whose figures draw from the
# comparison table.
COMPARISON = "compare"


@dataclass(frozen=True)
class Figure:
    """One figure: the function that draws it (``ssmbench.figures.<module>.<name>``), the
    table it draws from, and the runs that draw it.  Its notebook is
    ``notebooks/<name>.ipynb`` and its caption ``workflow/report/<name>.rst``."""

    name: str
    module: str  # the figures module that draws it
    table: str = "cells"  # cells, ops, a table a run's rules make (RUN_TABLES), or compare
    runs: tuple[str, ...] = ("blocks",)
    lm_phase: str | None = None  # the phase a whole-model run's draws (None: all)

    @property
    def notebook_kind(self) -> str:
        """The notebook's table parameter (``<kind>_path``): the table's own name, but
        ``tasks`` for the task figures' tables (both read as task tables)."""
        return "tasks" if self.table in TASK_TABLES else self.table


# the tables a figure copies as a run's rules made them (aggregate, verdict, task rules)
TASK_TABLES = ("task_accuracy", "quality_vs_speed")
RUN_TABLES = ("claims", "go_no_go", "speedups", *TASK_TABLES)

_BLOCKS_LM = ("blocks", "lm", "imported")  # SSM-Scope's kinds of figure, all three runs
_FIGURES = (
    Figure("latency_scaling", "latency"),
    Figure("bandwidth_utilization", "utilization"),
    Figure("compute_utilization", "utilization"),
    Figure("roofline", "utilization"),
    Figure("floors", "floors"),
    Figure("memory_footprint", "memory", runs=_BLOCKS_LM, lm_phase="prefill"),
    Figure("energy_per_token", "energy", runs=("blocks", "lm")),
    Figure("op_breakdown", "ops", table="ops", runs=_BLOCKS_LM),
    Figure("efficiency_sweep", "utilization"),
    Figure("decode_graph_speedup", "decode", table="speedups"),
    Figure("ttft_tpot_crossover", "latency", runs=_BLOCKS_LM),
    Figure("throughput", "latency", runs=_BLOCKS_LM),
    Figure("go_no_go", "verdict", table="go_no_go"),
    Figure("claims", "verdict", table="claims", runs=RUN_KINDS),
    Figure("task_accuracy", "tasks", table="task_accuracy", runs=("tasks",)),
    Figure("quality_vs_speed", "tasks", table="quality_vs_speed", runs=("tasks",)),
    Figure("latency_across_devices", "compare", table="compare", runs=(COMPARISON,)),
    Figure("go_no_go_across_devices", "compare", table="compare", runs=(COMPARISON,)),
    Figure("utilization_across_devices", "compare", table="compare", runs=(COMPARISON,)),
)
FIGURES: dict[str, Figure] = {f.name: f for f in _FIGURES}


def figures_of(kind: str) -> tuple[str, ...]:
    """The figures a run of ``kind`` (RUN_KINDS, or COMPARISON) draws, in the catalogue's order."""
    return tuple(f.name for f in _FIGURES if kind in f.runs)
