"""What the ``fused`` backends share: finding and loading the kernel packages, the checks
every wrapper makes, and the questions asked of all families at once.

Each family's fused wrappers live in its own module, beside its other backends
(``ssmbench.models.mamba2.ssd_fused``, ...), as flash-linear-attention keeps an operator's
kernels in its folder.  They take and return exactly what the ``torch`` backend of their
operator does (:mod:`ssmbench.ops`: same argument names and order, layouts ``(b, t, h, p)``
for activations and ``(b, h, p, n)`` for states), convert to the kernel's layout where it
differs, and raise :class:`~ssmbench.models.common.BackendUnavailable` with a precise
reason where the kernel cannot run.  The kernels come from three packages, all optional
(``make fused`` installs them; see its comment in the Makefile):

===============================  =====================================================  ==========
wrapper                          kernel                                                 kind
===============================  =====================================================  ==========
mamba.selective_scan_fused       mamba_ssm ``selective_scan_fn``                        CUDA C++
mamba.selective_scan_step_fused  mamba_ssm ``selective_state_update``                   Triton
mamba2.ssd_fused                 mamba_ssm ``mamba_chunk_scan_combined``                Triton
mamba2.ssd_step_fused            mamba_ssm ``selective_state_update`` (per-head form)   Triton
mamba3.mamba3_fused              mamba_ssm ``mamba3_siso_combined``                     Triton+PTX
mamba3.mamba3_step_fused         mamba_ssm ``mamba3_siso_step``                         Triton+PTX
deltanet.delta_rule_fused        fla ``chunk_gated_delta_rule`` / ``chunk_delta_rule``  Triton
deltanet.delta_rule_step_fused   fla ``fused_recurrent_(gated_)delta_rule``             Triton
attention.attention_fused        ``flash_attn_func``, else SDPA's flash kernel          CUDA
attention.attention_step_fused   ``flash_attn_with_kvcache``, else the torch step       CUDA
===============================  =====================================================  ==========

S4D has no fused kernel: its FFT convolution (the ``torch`` backend) is its fast path.
Which family has which kernels, the packages they need and the dtypes they take are the
registry's (:class:`ssmbench.registry.Family`).

Triton kernels run on CPU tensors under the Triton interpreter (``TRITON_INTERPRET=1``,
set before the kernel packages are imported): slow, but it lets the tests check the
wrappers' layouts against the float64 references without a GPU.  CUDA C++, FlashAttention
and mamba_ssm's Mamba-3 kernels (PTX inline assembly, TMA descriptors) need a CUDA device.

mamba_ssm's package ``__init__`` imports its CUDA extension and ``transformers``; the
wrappers never run it: :func:`mamba_ssm_module` registers ``mamba_ssm`` as a bare package
and imports the kernel modules under it, so the Triton kernels load where the extension
was not built (``MAMBA_SKIP_CUDA_BUILD=TRUE``).

What the wrappers add to the kernels (each is also said in its docstring):

- the decode steps copy the state before the in-place kernel updates it, so a step is a
  pure function like the ``torch`` one (one extra read and write of the state,
  :func:`state_copy`);
- ``selective_scan_fused`` adds a given initial state by superposition in PyTorch (the
  CUDA kernel has no initial-state input);
- DeltaNet without a gate runs in float32 through the gated kernel with a zero log-decay
  (fla's ``chunk_delta_rule`` refuses float32); ``deltanet.delta_rule_impl`` says which ran.

Every family module answers for its own fused backend: ``fused_unavailable(device,
phase=None)`` (every family), and where its kernels limit shapes, ``fused_block_reason
(head_dim, d_state)`` and ``FUSED_SHAPE_REASONS`` (op -> why that op's kernel cannot take
a verify shape's dims).  :func:`unavailable_reason`, :func:`shape_reason` and
:func:`block_shape_reason` ask them by family; the family modules import this one, so it
imports them only when asked (:func:`family_module`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
import types

import torch

from ssmbench.models.common import BackendUnavailable
from ssmbench.registry import FAMILY, OPERATOR_FAMILIES, PHASES, SWEEP_DTYPES

__all__ = [
    "HALF_DTYPES",
    "NEEDS_CUDA",
    "NO_FLOAT64",
    "block_shape_reason",
    "check_tensors",
    "device_type",
    "family_module",
    "installed",
    "interpreting",
    "kernel_module",
    "mamba_ssm_module",
    "missing",
    "package_reason",
    "shape_reason",
    "state_copy",
    "triton_reason",
    "unavailable_reason",
]

NEEDS_CUDA = (
    "fused kernels need a CUDA device (set TRITON_INTERPRET=1 to run Triton kernels on CPU tensors)"
)
NO_FLOAT64 = "fused kernels have no float64 path (they compute in float32 at most)"
HALF_DTYPES = (torch.float16, torch.bfloat16)

# distribution name (for pip) of each importable package
_DISTRIBUTIONS = {"mamba_ssm": "mamba-ssm", "fla": "fla-core", "triton": "triton"}


# --- availability ----------------------------------------------------------------------


def interpreting() -> bool:
    """Whether ``TRITON_INTERPRET`` is on (Triton's own truthy spellings)."""
    value = os.environ.get("TRITON_INTERPRET", "0").strip().lower()
    return value in ("1", "true", "yes", "on", "y")


def installed(package: str) -> bool:
    """Whether ``package`` can be imported here (looked up, not imported)."""
    try:
        return importlib.util.find_spec(package) is not None
    except ValueError:  # in sys.modules without a spec (a stub module): present
        return package in sys.modules


def missing(package: str) -> str:
    """The reason for a package that is not installed."""
    return f"{package} is not installed (`make fused` installs {_DISTRIBUTIONS[package]})"


def package_reason(*packages: str) -> str:
    """The reason for the first of ``packages`` not installed, or ""."""
    for package in packages:
        if not installed(package):
            return missing(package)
    return ""


def device_type(device: str | torch.device) -> str:
    return torch.device(device).type


def triton_reason(device: str | torch.device) -> str:
    """Why a Triton kernel cannot run on ``device`` ("" when it can)."""
    if device_type(device) == "cuda" or interpreting():
        return ""
    return NEEDS_CUDA


def check_tensors(*tensors: torch.Tensor | None) -> None:
    """BackendUnavailable unless every tensor is on CUDA (or, for Triton kernels, the
    interpreter is on) and none is float64."""
    present = [x for x in tensors if x is not None]
    if not all(x.is_cuda for x in present) and not interpreting():
        raise BackendUnavailable(NEEDS_CUDA)
    if any(x.dtype == torch.float64 for x in present):
        raise BackendUnavailable(NO_FLOAT64)


# --- loading ---------------------------------------------------------------------------


def mamba_ssm_module(module: str) -> types.ModuleType:
    """``mamba_ssm.<module>``, imported without running ``mamba_ssm/__init__.py`` (which
    needs the CUDA extension and transformers): ``mamba_ssm`` is registered as a bare
    package whose ``__path__`` is the installed one, unless it is imported already."""
    if not installed("mamba_ssm"):
        raise BackendUnavailable(missing("mamba_ssm"))
    if "mamba_ssm" not in sys.modules:
        spec = importlib.util.find_spec("mamba_ssm")
        package = types.ModuleType("mamba_ssm")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        package.__version__ = importlib.metadata.version("mamba-ssm")
        sys.modules["mamba_ssm"] = package
    return kernel_module(f"mamba_ssm.{module}", "mamba_ssm")


def kernel_module(module: str, package: str) -> types.ModuleType:
    """``import module``, a missing or broken package as BackendUnavailable."""
    if not installed(package):
        raise BackendUnavailable(missing(package))
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise BackendUnavailable(f"{module} failed to import: {type(e).__name__}: {e}") from e


def state_copy(
    state: torch.Tensor | None, shape: tuple[int, ...], device: torch.device
) -> torch.Tensor:
    """A float32 copy of ``state`` (zeros for None) for a kernel to update in place."""
    if state is None:
        return torch.zeros(shape, device=device, dtype=torch.float32)
    return state.to(torch.float32, copy=True).contiguous()


# --- every family at once --------------------------------------------------------------


def family_module(family: str) -> types.ModuleType:
    """The model module of ``family`` (``ssmbench.models.<family>``), imported now: the
    family modules import this one, so it cannot import them at its top."""
    return importlib.import_module(FAMILY[family].module)


def shape_reason(shape: dict) -> str:
    """Why the fused kernel of ``shape["op"]`` cannot take ``shape`` (a verify shape: the
    op and its dims by letter, e.g. ``{"op": "mamba3", "p": 16, "n": 16, "r": 4, ...}``),
    or "" when it can.  The same functions the wrappers raise BackendUnavailable with, from
    each family's ``FUSED_SHAPE_REASONS``; ops no family lists take any shape."""
    for family in OPERATOR_FAMILIES:
        check = getattr(family_module(family), "FUSED_SHAPE_REASONS", {}).get(shape["op"])
        if check is not None:
            return check(**{k: v for k, v in shape.items() if k != "op"})
    return ""


def block_shape_reason(family: str, head_dim: int, d_state: int) -> str:
    """Why a block of ``family`` with this size preset's ``head_dim`` and ``d_state``
    cannot run its fused kernels ("" when it can): the family's ``fused_block_reason``
    (Mamba-3's p = head_dim, n = d_state and r = :func:`ssmbench.counts.rotation_pairs`
    (n); attention's and the hybrid's d = head_dim; DeltaNet's k = v = head_dim); a family
    without one takes any size."""
    check = getattr(family_module(family), "fused_block_reason", None)
    return "" if check is None else check(head_dim, d_state)


def unavailable_reason(
    family: str,
    device: str | torch.device,
    dtype: str | None = None,
    phase: str | None = None,
) -> str:
    """Why the ``fused`` backend of ``family`` cannot run ``phase`` (prefill, decode or
    train; None: every phase) on ``device`` in ``dtype`` (a config name: fp64, fp32, fp16,
    bf16; None skips the dtype check), or "" when it can: the family module's
    ``fused_unavailable(device, phase)``, then the dtypes its kernels take
    (:attr:`ssmbench.registry.Family.fused_dtypes`).  Mamba-1's decode step is Triton and
    runs where its CUDA prefill kernel was not built.  Cheap: no kernel is imported or
    built, packages are only looked up."""
    if family not in FAMILY:
        raise ValueError(f"unknown family {family!r}; known: {sorted(FAMILY)}")
    if phase is not None and phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; known: {list(PHASES)}")
    reason = family_module(family).fused_unavailable(device, phase)
    if reason or dtype is None:
        return reason
    if dtype == "fp64":
        return NO_FLOAT64
    entry = FAMILY[family]
    if dtype in SWEEP_DTYPES and dtype not in entry.fused_dtypes:
        return f"{entry.fused_dtypes_why}, not {dtype}"
    return ""
