"""Correctness before timing: one (model, backend) against the NumPy float64 reference.

:func:`verify_backend` runs the operator of a model family on small random inputs with
awkward shapes (lengths that are not chunk multiples, non-power-of-two widths, a random
initial state), on the run's device and dtype, and compares every output and final
state with :func:`ssmbench.numerics.compare`.  It also checks the block: a small model
built with the backend must give the same outputs and caches when decoded one token at
a time with ``step`` as its ``forward`` over the whole sequence.

The operator checks of a family live in ``ssmbench.verify.<family>`` as
``op_checks(backend, inputs, dtype, guard) -> (checks, shapes)``; this module finds them by
name.  Fused backends (mamba_ssm's and fla's kernels) run the shapes every one of their
kernels accepts (``op_shapes(backend)`` of each family, :data:`FUSED_BLOCK_SIZE`); the
others keep the awkward ones.

Checks are per phase (:func:`check_phases`): a sequence operator's checks count for
``prefill`` and ``train`` (those of a form it runs only under autograd, for ``train``), a
one-token step's for ``decode``, the block's for all three.  A
kernel that is unavailable for one phase (Mamba-1's CUDA prefill kernel where only its Triton
decode step is built) skips that phase's checks only: the family's ``guard`` records why,
and the other phases' checks still run and count.

Inputs are drawn in float32 on the CPU from ``seed`` (the same numbers on every device),
rounded to the dtype under test and moved to the device; the reference sees the rounded
inputs, so only the arithmetic is judged, under that dtype's tolerance.

One verify job (the workflow's verify rule, ``python -m ssmbench verify``) runs this in
each of the run's dtypes and sums the checks up into a verdict per phase: its record is
:func:`ssmbench.verify.run.run_verify`'s.
"""

from __future__ import annotations

import contextlib
import importlib
import math
from collections.abc import Iterator

import torch

from ssmbench.matrix import Size
from ssmbench.models import DTYPES, build_model
from ssmbench.models.attention import valid_cache
from ssmbench.models.common import BackendUnavailable, RandomDraws
from ssmbench.numerics import compare
from ssmbench.registry import FUSED_BACKENDS, PHASES, SEQUENCE_PHASES, STEP_PHASES

# Backends whose kernels are Triton or CUDA code of their own (mamba_ssm, fla, FlashAttention)
FUSED = FUSED_BACKENDS
# Backends whose chunk size is a free parameter of PyTorch code: checked at several
CHUNKED = ("torch", "torch-mixed")
# PHASES, SEQUENCE_PHASES (the sequence operator; train: its backward too), STEP_PHASES


def tolerance_row(
    dtype: str, backend: str, device: str | torch.device, model: str | None = None
) -> str:
    """The row of :data:`ssmbench.numerics.TOLERANCES` a check is judged by: the dtype's,
    except

    - fp32 through a fused backend on CUDA, judged as "tf32": Triton's ``tl.dot`` takes
      fp32 operands in TF32 on tensor cores unless a kernel asks for IEEE products, and the
      benchmark times the kernels as they ship.  (PyTorch's own fp32 matmuls stay IEEE:
      ``torch.backends.cuda.matmul.allow_tf32`` is False by default.)  The Triton
      interpreter on CPU computes in true fp32, so CPU checks keep the fp32 row;
    - bf16 Mamba-3 through a fused backend, judged as "bf16-mamba3" (its source is beside
      the row in :data:`ssmbench.numerics.TOLERANCES`): mamba_ssm's kernels round their
      intermediates (rotated B and C, the chunk states, C.B) to bf16 as well."""
    fused = backend in FUSED
    if dtype == "fp32" and fused and torch.device(device).type == "cuda":
        return "tf32"
    if dtype == "bf16" and fused and model == "mamba3":
        return "bf16-mamba3"
    return dtype


def check_phases(name: str) -> tuple[str, ...]:
    """The phases a check counts for, from its name: ``block.step_vs_forward...`` all three
    (the block runs its forward and its step), ``block.step_vs_torch_forward...`` decode
    (the step against the torch forward, where this backend's forward is unavailable), an
    op ending in ``_step`` decode, ``<op>.train...`` train (the form an op runs under
    autograd, where it has one of its own: Mamba-1's torch backend), any other op (the
    sequence form) prefill and train."""
    op = name.split(".", 1)[0].split("[", 1)[0]
    if op == "block":
        return STEP_PHASES if name.startswith("block.step_vs_torch_forward") else PHASES
    if op.endswith("_step"):
        return STEP_PHASES
    return ("train",) if name.startswith(f"{op}.train.") else SEQUENCE_PHASES


class PhaseGuard:
    """Where a kernel is unavailable for some phases only: ``with guard(*phases):`` around
    the checks of those phases records a :class:`BackendUnavailable` raised inside as the
    reason of each phase (``guard.unavailable``) and goes on after the block."""

    def __init__(self) -> None:
        self.unavailable: dict[str, str] = {}

    @contextlib.contextmanager
    def __call__(self, *phases: str) -> Iterator[None]:
        try:
            yield
        except BackendUnavailable as error:
            for phase in phases:
                self.unavailable.setdefault(phase, str(error))


def compare_phase(name: str, ref, out, dtype: str):
    """:func:`compare` of two rotation angles modulo 2 pi: ``out`` is moved by whole turns
    to the one nearest ``ref`` (mamba_ssm reduces the phase mod 2 pi, our forms do not; the
    rotation is the same)."""
    from ssmbench.numerics import to_numpy

    ref_np, out_np = to_numpy(ref), to_numpy(out)
    turn = 2 * math.pi
    nearest = ref_np + (out_np - ref_np + math.pi) % turn - math.pi
    return compare(name, ref_np, nearest, dtype)


# the block check: a two-layer model of awkward width, decoded for BLOCK_T tokens
BLOCK_SIZE = Size(d_model=40, n_layers=2, n_heads=3, head_dim=16, expand=2, d_conv=4, chunk=16)
BLOCK_D_STATE = 5
BLOCK_T = 37
# ... and for the fused backends, a block every fused kernel takes (still an awkward width,
# five Mamba-2/3 heads): Mamba-3 needs p and n powers of two and an even number of angles
# r = rotation_pairs(n) (n = 16: r = 4), mamba_ssm's kernels default to chunks of 64
# (T = 37 is still no multiple of it)
FUSED_BLOCK_SIZE = Size(
    d_model=40, n_layers=2, n_heads=3, head_dim=16, expand=2, d_conv=4, chunk=64
)
FUSED_BLOCK_D_STATE = 16


def block_setting(backend: str) -> tuple[Size, int]:
    """The block check's (size, d_state) for ``backend``."""
    if backend in FUSED:
        return FUSED_BLOCK_SIZE, FUSED_BLOCK_D_STATE
    return BLOCK_SIZE, BLOCK_D_STATE


class Inputs(RandomDraws):
    """:class:`~ssmbench.models.common.RandomDraws` from a fresh generator seeded with
    ``seed``: the operator checks take their inputs from each family's
    ``random_inputs(draws, ...)``."""

    def __init__(self, seed: int, device: torch.device, dtype: torch.dtype):
        super().__init__(torch.Generator().manual_seed(seed), device, dtype)


def _check_block(
    model: str, backend: str, inputs: Inputs, dtype: str, seed: int, guard: PhaseGuard
) -> tuple[list, list]:
    """forward over BLOCK_T tokens == step() token by token, outputs and caches.  Where the
    backend's forward is unavailable but its step is not (Mamba-1's fused kernels without
    the CUDA extension), the step is checked against the torch backend's forward of the
    same weights instead, for decode only."""
    size, d_state = block_setting(backend)
    torch_dtype = inputs.dtype
    net = build_model(model, size, d_state, backend, inputs.device, torch_dtype, seed=seed)
    x = inputs.randn(2, BLOCK_T, size.d_model)
    label = f"{model}-b2-t{BLOCK_T}-D{size.d_model}-L{size.n_layers}-n{d_state}"
    kind = "step_vs_forward"
    with torch.no_grad():
        try:
            y, caches = net(x)
        except BackendUnavailable as error:
            for phase in SEQUENCE_PHASES:
                guard.unavailable.setdefault(phase, str(error))
            kind = "step_vs_torch_forward"
            net.backend = "torch"
            try:
                y, caches = net(x)
            finally:
                net.backend = backend
        step_caches, ys = [None] * size.n_layers, []
        with guard(*STEP_PHASES):
            for i in range(BLOCK_T):
                y_t, step_caches = net.step(x[:, i], step_caches)
                ys.append(y_t)
    shape = {"op": "block", "b": 2, "t": BLOCK_T, "d_state": d_state, **vars(size)}
    if len(ys) < BLOCK_T:
        return [], [shape]
    checks = [compare(f"block.{kind}.y[{label}]", y, torch.stack(ys, 1), dtype)]
    for layer, (cache, step_cache) in enumerate(zip(caches, step_caches, strict=True)):
        step_cache = valid_cache(step_cache)  # a preallocated KV cache: its valid tokens
        fields = getattr(cache, "_fields", None) or [str(i) for i in range(len(cache))]
        for part, full, stepped in zip(fields, cache, step_cache, strict=True):
            name = f"block.{kind}.cache{layer}.{part}[{label}]"
            same = compare_phase if part == "phase" else compare
            checks.append(same(name, full, stepped, dtype))
    return checks, [shape]


def verify_backend(
    model: str, backend: str, device: str = "cpu", dtype: str = "fp32", seed: int = 0
) -> dict:
    """Check ``backend`` of ``model``'s operator and block against the float64 reference.

    Args:
        model: a family of :data:`ssmbench.models.FAMILIES`.
        backend: one of :data:`ssmbench.models.ALL_BACKENDS` or of
            :data:`ssmbench.models.GRAPH_BACKENDS`.
        device: where to run ("cpu", "cuda", "cuda:1", ...).
        dtype: "fp32", "fp16", "bf16" or "fp64"; the inputs are made in it and the
            tolerance is that dtype's row of :data:`ssmbench.numerics.TOLERANCES`, or
            "tf32" for fp32 through a fused backend on CUDA (:func:`tolerance_row`).
        seed: draws the inputs and the block's weights.

    Returns:
        A JSON-serialisable dict: model, backend, device, dtype, seed, ``passed``
        (every check ok and no phase unavailable), ``checks`` (one
        :meth:`Comparison.as_dict` each, with the ``phases`` it counts for), ``shapes``
        (the shapes run) and ``unavailable`` ({phase: reason} for the phases whose kernels
        could not run).
    """
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {list(DTYPES)}")
    inputs = Inputs(seed, torch.device(device), DTYPES[dtype])
    row = tolerance_row(dtype, backend, device, model)
    guard = PhaseGuard()
    checks, shapes = _check_block(model, backend, inputs, row, seed, guard)  # validates names
    family = importlib.import_module(f"ssmbench.verify.{model}")
    op_checks, op_shapes = family.op_checks(backend, inputs, row, guard)
    checks, shapes = op_checks + checks, op_shapes + shapes
    rows = []
    for check in checks:
        row_ = check.as_dict()
        row_["phases"] = list(check_phases(check.name))
        rows.append(row_)
    return {
        "model": model,
        "backend": backend,
        "device": str(device),
        "dtype": dtype,
        "seed": seed,
        "passed": all(check.ok for check in checks) and not guard.unavailable,
        "checks": rows,
        "shapes": shapes,
        "unavailable": dict(guard.unavailable),
    }
