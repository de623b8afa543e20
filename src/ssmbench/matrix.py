"""The block matrix's vocabulary: a cell's axes, the blocks' size, the sampling budget,
and the rules that follow from a cell alone (its paired attention side, the precision its
operator computes in, the cells of a sweep).

The twin of :mod:`ssmbench.lm.matrix` (whole models) and :mod:`ssmbench.tasks.matrix`
(training jobs); :mod:`ssmbench.config` plans a preset over the three.  Imports no torch,
no schema and no YAML: every family module and every record reads it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ssmbench.registry import FAMILY, HALF_MATMULS, NO_STATE, verified_backend

DTYPE_BYTES = {"fp64": 8, "fp32": 4, "fp16": 2, "bf16": 2}
HALF_DTYPES = ("fp16", "bf16")


@dataclass(frozen=True)
class Size:
    """Block size shared by every family of a run (the preset's ``size``).

    Attention uses ``n_heads * head_dim`` as its inner width; Mamba-1 uses
    ``expand * d_model`` (the paper's E * D) and ignores the head fields.
    """

    d_model: int  # model width (the paper's D)
    n_layers: int  # residual blocks
    n_heads: int  # heads of attention and of the delta rule
    head_dim: int  # their head dim (and Mamba-2/3's head dim P)
    expand: int  # Mamba block expansion factor (the paper's E, 2 in all its models)
    d_conv: int  # Mamba causal depthwise conv width (4 in the paper)
    chunk: int  # chunk size of the chunked / parallel forms
    # The hybrid's layers, cycled over n_layers: M = Mamba-2, A = attention (Jamba: MMMAMMMM)
    hybrid_pattern: str = "MA"

    @property
    def d_inner(self) -> int:
        """The Mamba-1 inner width, E * D."""
        return self.expand * self.d_model

    def layer_kind(self, index: int) -> str:
        """``"M"`` (Mamba-2) or ``"A"`` (attention): layer ``index`` of the hybrid."""
        pattern = self.hybrid_pattern
        if not pattern or set(pattern) - {"M", "A"}:
            raise ValueError(f"hybrid_pattern must be a string of M and A, got {pattern!r}")
        return pattern[index % len(pattern)]


@dataclass(frozen=True)
class Timing:
    """Sampling budget of a cell (see :func:`ssmbench.measure.timing.measure`).

    Warm-up: ``warmup`` calls and at least ``warmup_s`` seconds (Triton autotuning and GPU
    clocks settle in it).  Then samples until ``min_samples`` and ``min_time_s`` are both
    reached and the relative spread of the samples (interquartile range over median) is at
    most ``target_spread`` (0: no spread target), or until ``max_samples`` or
    ``max_time_s``.  ``timeout_s`` bounds the whole cell: a cell that has not taken
    ``min_samples`` samples by then is a ``timeout`` and keeps the samples it took.
    ``host_allocator`` is the measuring process's malloc policy: ``retain`` (freed memory
    kept, as on GPUs) or ``system`` (:mod:`ssmbench.measure.allocator`).
    """

    warmup: int
    min_samples: int
    max_samples: int
    min_time_s: float
    max_time_s: float
    warmup_s: float = 0.0
    target_spread: float = 0.0
    timeout_s: float | None = None
    host_allocator: str = "retain"  # ssmbench.measure.allocator


@dataclass(frozen=True, order=True)
class Cell:
    """The axes of one measurement (the run and its size preset come from the :class:`Plan`)."""

    model: str
    backend: str
    phase: str
    batch: int
    seq_len: int
    d_state: int
    dtype: str


def paired_attention(cell: Cell) -> Cell:
    """The attention side of the paired cell whose SSM side is ``cell``: the same backend,
    phase, batch, T and dtype (attention has no state size: n0)."""
    return Cell("attention", cell.backend, cell.phase, cell.batch, cell.seq_len, 0, cell.dtype)


def compute_dtype(model: str, backend: str, phase: str, dtype: str) -> str:
    """The precision a cell's sequence operator (its matmuls and state updates) runs in,
    which its utilization is measured against (``ceiling_tflops``, ``compute_util``).

    Projections (nn.Linear) always run in the cell's ``dtype``; what differs is the
    operator.  For half-precision cells (fp16, bf16):

    ========================  ===================  =========  =================================
    model                     backend              phase      compute_dtype
    ========================  ===================  =========  =================================
    attention                 every one            every one  the cell's: matmuls, SDPA or
                                                              FlashAttention in it (fp32
                                                              accumulation)
    mamba2, mamba3, deltanet  fused, fused-graph,  prefill,   the cell's: matmul operands in
                              torch-mixed          train      half, fp32 accumulation, fp32
                                                              decays and state (HALF_MATMULS)
    s4d, mamba, mamba2,       naive, torch,        every one  fp32: the operator widens its
    mamba3, deltanet          compile, torch-graph            inputs (models.common.widen)
    mamba                     fused, fused-graph   every one  fp32: a float32 scan, no matmul
    any SSM                   every one            decode     fp32: a one-token step updates
                                                              an fp32 state elementwise
                                                              (torch-mixed runs torch's step)
    hybrid                    as its parts         as parts   fp32 if any part runs in fp32,
                                                              else the cell's
    ========================  ===================  =========  =================================

    A lower precision is never claimed: a hybrid cell is reported at the widest precision
    any of its operators runs in (its attention layers run half in every backend, so its
    Mamba-2 layers decide).  A backend a family does not offer (torch-mixed of s4d and
    mamba, fused of s4d) counts as widened; its cells are ``unavailable`` anyway, as are
    torch-mixed's fp16 cells (ssmbench.models.common.mixed_matmul_dtype).  An fp32
    or fp64 cell computes in its own dtype throughout.  (fp32 through a fused Triton kernel
    on CUDA multiplies in TF32, which this device-free rule does not say.)

    Returns:
        "fp64", "fp32", "fp16" or "bf16".
    """
    if dtype not in HALF_DTYPES:
        return dtype
    parts = FAMILY["hybrid"].parts if model == "hybrid" else (model,)
    if any(_widened(part, verified_backend(backend), phase) for part in parts):
        return "fp32"
    return dtype


def _widened(family: str, backend: str, phase: str) -> bool:
    """Whether ``family``'s operator computes a half-precision cell in float32."""
    if family == "attention":
        return False
    if phase == "decode":
        return True
    return family not in HALF_MATMULS.get(backend, ())


def expand_sweep(sweep: dict) -> list[Cell]:
    """The cells of one sweep: the product of its axes, with placeholders for absent axes."""
    cells = []
    for model, backend, phase, batch, seq_len, d_state, dtype in itertools.product(
        sweep["models"],
        sweep["backends"],
        sweep["phases"],
        sweep["batch"],
        sweep["seq_len"],
        sweep["d_state"],
        sweep["dtype"],
    ):
        d_state = 0 if model in NO_STATE else d_state
        cells.append(Cell(model, backend, phase, batch, seq_len, d_state, dtype))
    return cells
