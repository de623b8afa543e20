"""The ``fused`` backend: the ecosystem's tuned kernels behind our operators' signatures.

Each wrapper takes and returns exactly what the ``torch`` backend of its operator does
(:mod:`ssmbench.ops`: same argument names and order, layouts ``(b, t, h, p)`` for
activations and ``(b, h, p, n)`` for states), converts to the kernel's layout where it
differs, and raises :class:`~ssmbench.models.common.BackendUnavailable` with a precise
reason where the kernel cannot run.  The kernels come from three packages, all optional
(``make fused`` installs them; see its comment in the Makefile):

==========================  ======================================================  =======
wrapper                     kernel                                                  kind
==========================  ======================================================  =======
selective_scan_fused        mamba_ssm ``selective_scan_fn``                         CUDA C++
selective_scan_step_fused   mamba_ssm ``selective_state_update``                    Triton
ssd_fused                   mamba_ssm ``mamba_chunk_scan_combined``                 Triton
ssd_step_fused              mamba_ssm ``selective_state_update`` (per-head layout)  Triton
mamba3_fused                mamba_ssm ``mamba3_siso_combined``                      Triton+PTX
mamba3_step_fused           mamba_ssm ``mamba3_siso_step``                          Triton+PTX
delta_rule_fused            fla ``chunk_gated_delta_rule`` / ``chunk_delta_rule``   Triton
delta_rule_step_fused       fla ``fused_recurrent_(gated_)delta_rule``              Triton
attention_fused             ``flash_attn_func``, else SDPA's flash kernel           CUDA
==========================  ======================================================  =======

S4D has no fused kernel: its FFT convolution (the ``torch`` backend) is its fast path.

Triton kernels run on CPU tensors under the Triton interpreter (``TRITON_INTERPRET=1``,
set before the kernel packages are imported): slow, but it lets the tests check the
wrappers' layouts against the float64 references without a GPU.  CUDA C++, FlashAttention
and mamba_ssm's Mamba-3 kernels (PTX inline assembly, TMA descriptors) need a CUDA device.

mamba_ssm's package ``__init__`` imports its CUDA extension and ``transformers``; the
wrappers never run it: :func:`_mamba_ssm` registers ``mamba_ssm`` as a bare package and
imports the kernel modules under it, so the Triton kernels load where the extension was
not built (``MAMBA_SKIP_CUDA_BUILD=TRUE``).

What the wrappers add to the kernels (each is also said in its docstring):

- the decode steps copy the state before the in-place kernel updates it, so a step is a
  pure function like the ``torch`` one (one extra read and write of the state);
- ``selective_scan_fused`` adds a given initial state by superposition in PyTorch (the
  CUDA kernel has no initial-state input);
- DeltaNet without a gate runs in float32 through the gated kernel with a zero log-decay
  (fla's ``chunk_delta_rule`` refuses float32); :func:`delta_rule_impl` says which ran.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import math
import os
import sys
import types
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ssmbench.models.common import BackendUnavailable
from ssmbench.reference.mamba3 import Mamba3State
from ssmbench.registry import FAMILY, PHASES

__all__ = [
    "FUSED_AVAILABILITY",
    "SHAPE_REASONS",
    "attention_fused",
    "attention_step_fused",
    "attention_impl",
    "attention_shape_reason",
    "block_shape_reason",
    "delta_rule_fused",
    "delta_rule_impl",
    "delta_rule_shape_reason",
    "delta_rule_step_fused",
    "mamba3_fused",
    "mamba3_shape_reason",
    "mamba3_step_fused",
    "selective_scan_fused",
    "selective_scan_step_fused",
    "ssd_fused",
    "shape_reason",
    "ssd_step_fused",
    "unavailable_reason",
]

NEEDS_CUDA = (
    "fused kernels need a CUDA device (set TRITON_INTERPRET=1 to run Triton kernels on CPU tensors)"
)
SELECTIVE_SCAN_CUDA_MISSING = (
    "selective_scan_cuda not built: mamba_ssm's Mamba-1 prefill kernel is a CUDA extension, "
    "built by `make fused` where nvcc is found (MAMBA_SKIP_CUDA_BUILD=FALSE)"
)
SELECTIVE_SCAN_NEEDS_CUDA = "mamba_ssm's selective_scan_fn (a CUDA extension) needs a CUDA device"
FLASH_NEEDS_CUDA = "FlashAttention-2 needs a CUDA device"
FLASH_DTYPES = "FlashAttention-2 takes fp16 and bf16 only"
MAMBA3_NEEDS_CUDA = (
    "mamba_ssm's Mamba-3 kernels need a CUDA device "
    "(PTX inline assembly and TMA descriptors: the Triton interpreter cannot run them)"
)
MAMBA3_DTYPES = "mamba_ssm's Mamba-3 SISO kernel computes in bf16 only (it casts x, B, C to bf16)"
NO_FLOAT64 = "fused kernels have no float64 path (they compute in float32 at most)"
S4D_REASON = FAMILY["s4d"].fused_unavailable

# distribution name (for pip) of each importable package
_DISTRIBUTIONS = {"mamba_ssm": "mamba-ssm", "fla": "fla-core", "triton": "triton"}


# --- availability ----------------------------------------------------------------------


def _interpreting() -> bool:
    """Whether ``TRITON_INTERPRET`` is on (Triton's own truthy spellings)."""
    value = os.environ.get("TRITON_INTERPRET", "0").strip().lower()
    return value in ("1", "true", "yes", "on", "y")


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except ValueError:  # in sys.modules without a spec (a stub module): present
        return package in sys.modules


def _missing(package: str) -> str:
    """The reason for a package that is not installed."""
    return f"{package} is not installed (`make fused` installs {_DISTRIBUTIONS[package]})"


def _package_reason(*packages: str) -> str:
    """The reason for the first of ``packages`` not installed, or ""."""
    for package in packages:
        if not _installed(package):
            return _missing(package)
    return ""


def _device_type(device: str | torch.device) -> str:
    return torch.device(device).type


def _triton_reason(device: str | torch.device) -> str:
    """Why a Triton kernel cannot run on ``device`` ("" when it can)."""
    if _device_type(device) == "cuda" or _interpreting():
        return ""
    return NEEDS_CUDA


def _check_tensors(*tensors: torch.Tensor | None) -> None:
    """BackendUnavailable unless every tensor is on CUDA (or, for Triton kernels, the
    interpreter is on) and none is float64."""
    present = [x for x in tensors if x is not None]
    if not all(x.is_cuda for x in present) and not _interpreting():
        raise BackendUnavailable(NEEDS_CUDA)
    if any(x.dtype == torch.float64 for x in present):
        raise BackendUnavailable(NO_FLOAT64)


def _mamba_ssm(module: str) -> types.ModuleType:
    """``mamba_ssm.<module>``, imported without running ``mamba_ssm/__init__.py`` (which
    needs the CUDA extension and transformers): ``mamba_ssm`` is registered as a bare
    package whose ``__path__`` is the installed one, unless it is imported already."""
    if not _installed("mamba_ssm"):
        raise BackendUnavailable(_missing("mamba_ssm"))
    if "mamba_ssm" not in sys.modules:
        spec = importlib.util.find_spec("mamba_ssm")
        package = types.ModuleType("mamba_ssm")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        package.__version__ = importlib.metadata.version("mamba-ssm")
        sys.modules["mamba_ssm"] = package
    return _import(f"mamba_ssm.{module}", "mamba_ssm")


def _import(module: str, package: str) -> types.ModuleType:
    """``import module``, a missing or broken package as BackendUnavailable."""
    if not _installed(package):
        raise BackendUnavailable(_missing(package))
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise BackendUnavailable(f"{module} failed to import: {type(e).__name__}: {e}") from e


# --- Mamba-1 ---------------------------------------------------------------------------


def selective_scan_fused(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    initial_state: torch.Tensor | None = None,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mamba-1 selective scan by mamba_ssm's CUDA kernel ``selective_scan_fn``.

    Args:
        as :func:`ssmbench.ops.selective_scan`: u, delta, z ``(b, t, d)``; A ``(d, n)``;
            B, C ``(b, t, n)``; D, delta_bias ``(d,)``; initial_state ``(b, d, n)`` or None.
            chunk_size: ignored (the kernel's own blocking).

    Returns:
        y ``(b, t, d)`` in the dtype of u and the final state ``(b, d, n)`` float32.

    The kernel has no Triton form, so neither the Triton interpreter nor a build without
    nvcc can run it.
    """
    if not _installed("mamba_ssm"):
        raise BackendUnavailable(_missing("mamba_ssm"))
    if not _installed("selective_scan_cuda"):
        raise BackendUnavailable(SELECTIVE_SCAN_CUDA_MISSING)
    if not all(x.is_cuda for x in (u, delta, A, B, C)):
        raise BackendUnavailable(SELECTIVE_SCAN_NEEDS_CUDA)
    _check_tensors(u, delta, A, B, C, D, z, delta_bias, initial_state)
    kernel = _mamba_ssm("ops.selective_scan_interface").selective_scan_fn
    return selective_scan_via(
        kernel, u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state
    )


def selective_scan_via(
    kernel: Callable,
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    delta_softplus: bool,
    initial_state: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Our selective scan through ``kernel``, a function with mamba_ssm's
    ``selective_scan_fn`` contract (``selective_scan_fn`` itself, or its
    ``selective_scan_ref``, which the tests use on CPU).

    Layouts: the kernel takes u, delta, z ``(b, d, t)`` and B, C ``(b, n, t)`` (time
    last), A, D and delta_bias in float32, and returns the final state ``(b, d, n)``.
    It has no initial-state input; the scan is linear in its state, so a given state h0
    enters by superposition: y_t += C_t . (exp(sum_{s<=t} delta_s A) * h0) and the final
    state gains exp(sum_s delta_s A) * h0, computed here in float32 with a ``(b, t, d, n)``
    intermediate (prefill cells start from zero and never take this path), and the output
    gate silu(z) is applied after the sum.
    """
    dtype = u.dtype
    u_, delta_, B_, C_ = (x.transpose(1, 2).to(dtype) for x in (u, delta, B, C))  # (b . t)
    A32, D32, bias32 = (None if x is None else x.float() for x in (A, D, delta_bias))
    z_ = None if z is None or initial_state is not None else z.transpose(1, 2).to(dtype)
    y, last_state = kernel(
        u_,
        delta_,
        A32,
        B_,
        C_,
        D=D32,
        z=z_,
        delta_bias=bias32,
        delta_softplus=delta_softplus,
        return_last_state=True,
    )  # (b d t), (b d n)
    y = y.transpose(1, 2)  # (b t d)
    if initial_state is None:
        return y, last_state.float()
    step = delta.float() + (0 if bias32 is None else bias32)  # (b t d)
    if delta_softplus:
        step = F.softplus(step)
    decay = torch.exp(torch.cumsum(torch.einsum("btd,dn->btdn", step, A32), dim=1))  # (b t d n)
    h0 = initial_state.float()  # (b d n)
    y = y.float() + torch.einsum("btdn,bdn,btn->btd", decay, h0, C.float())  # (b t d)
    if z is not None:
        y = y * F.silu(z.float())
    return y.to(dtype), last_state.float() + decay[:, -1] * h0


def selective_scan_step_fused(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the selective scan by mamba_ssm's Triton ``selective_state_update``.

    Args:
        as :func:`ssmbench.ops.selective_scan_step`: u, delta, z ``(b, d)``; A ``(d, n)``;
            B, C ``(b, n)``; D, delta_bias ``(d,)``; state ``(b, d, n)`` or None (zeros).

    Returns:
        y ``(b, d)`` in the dtype of u and the new state ``(b, d, n)`` float32.

    The kernel's layout is ours (its per-channel form); it updates the state in place, so
    the state is copied first (float32, as the ``torch`` step returns it).
    """
    _check_tensors(u, delta, A, B, C, D, z, delta_bias, state)
    kernel = _mamba_ssm("ops.triton.selective_state_update").selective_state_update
    b, d = u.shape
    new_state = _state_copy(state, (b, d, A.shape[-1]), u.device)  # (b d n)
    y = kernel(
        new_state,
        u,
        delta,
        A,
        B,
        C,
        D=D,
        z=z,
        dt_bias=delta_bias,
        dt_softplus=delta_softplus,
    )
    return y, new_state


def _state_copy(
    state: torch.Tensor | None, shape: tuple[int, ...], device: torch.device
) -> torch.Tensor:
    """A float32 copy of ``state`` (zeros for None) for a kernel to update in place."""
    if state is None:
        return torch.zeros(shape, device=device, dtype=torch.float32)
    return state.to(torch.float32, copy=True).contiguous()


# --- Mamba-2 ---------------------------------------------------------------------------


def ssd_fused(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    chunk_size: int = 64,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mamba-2 SSD by mamba_ssm's Triton ``mamba_chunk_scan_combined``.

    Args:
        as :func:`ssmbench.ops.ssd`: x ``(b, t, h, p)``; dt ``(b, t, h)`` already positive;
            A ``(h,)``; B, C ``(b, t, g, n)``; D ``(h,)``; initial_state ``(b, h, p, n)``;
            chunk_size: the kernel's chunk length.

    Returns:
        y ``(b, t, h, p)`` in the dtype of x and the final state ``(b, h, p, n)`` float32.

    The kernel's layouts are ours.  dt goes in as given: no ``dt_bias``, no softplus
    (``dt_softplus=False``), no clamp (the default ``dt_limit`` of (0, inf) is not applied).
    """
    _check_tensors(x, dt, A, B, C, D, initial_state)
    kernel = _mamba_ssm("ops.triton.ssd_combined").mamba_chunk_scan_combined
    h0 = None if initial_state is None else initial_state.float().contiguous()
    y, final_state = kernel(
        x,
        dt,
        A.float(),
        B,
        C,
        chunk_size,
        D=D,
        initial_states=h0,
        dt_softplus=False,
        return_final_states=True,
    )
    return y, final_state.float()


def ssd_step_fused(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of SSD by mamba_ssm's Triton ``selective_state_update`` (per-head form).

    Args:
        as :func:`ssmbench.ops.ssd_step`: x ``(b, h, p)``; dt ``(b, h)``; A ``(h,)``;
            B, C ``(b, g, n)``; D ``(h,)``; state ``(b, h, p, n)`` or None (zeros).

    Returns:
        y ``(b, h, p)`` in the dtype of x and the new state ``(b, h, p, n)`` float32.

    The kernel takes dt ``(b, h, p)``, A ``(h, p, n)``, D and dt_bias ``(h, p)``: they are
    broadcast as stride-0 views, which is also what selects its tied-head-dim path (one dt
    and one exp(dt A) per head, as mamba_ssm's Mamba2 decode does).  That path reads
    dt_bias, so a zero one is passed.  The state is copied first (the kernel updates it in
    place).
    """
    _check_tensors(x, dt, A, B, C, D, state)
    kernel = _mamba_ssm("ops.triton.selective_state_update").selective_state_update
    b, h, p = x.shape
    n = B.shape[-1]
    new_state = _state_copy(state, (b, h, p, n), x.device)  # (b h p n)
    y = kernel(
        new_state,
        x,
        dt[..., None].expand(b, h, p),  # (b h p), stride 0 over p
        A.float()[:, None, None].expand(h, p, n),  # (h p n), stride 0 over p n
        B,
        C,
        D=None if D is None else D[:, None].expand(h, p),  # (h p)
        dt_bias=dt.new_zeros(()).expand(h, p),  # (h p), zeros
        dt_softplus=False,
    )
    return y, new_state


# --- Mamba-3 ---------------------------------------------------------------------------


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def mamba3_shape_reason(p: int, n: int, r: int) -> str:
    """Why mamba_ssm's Mamba-3 SISO kernels cannot take head dim ``p``, state size ``n``
    and ``r`` rotation angles ("" when they can): p and n powers of two (the step kernel
    loads whole ``tl.arange(0, p)`` and ``(0, n)`` blocks unmasked, the chunked one builds
    TMA descriptors of them), r even and at most n / 2 (both kernels assert
    ``headdim_angles <= headdim_qk // 2 and headdim_angles % 2 == 0``)."""
    if not (_is_power_of_two(p) and _is_power_of_two(n)):
        return (
            f"mamba_ssm's Mamba-3 kernels need power-of-two head dim and state size "
            f"(TMA blocks), got p={p}, n={n}"
        )
    if r % 2 or r > n // 2:
        return f"mamba_ssm's Mamba-3 kernels need an even number of angles r <= n/2, r={r}, n={n}"
    return ""


def _mamba3_check(x: torch.Tensor, B: torch.Tensor, theta: torch.Tensor) -> None:
    """BackendUnavailable where mamba_ssm's Mamba-3 SISO kernels cannot take these inputs."""
    tensors = (x, B, theta)
    if not all(t.is_cuda for t in tensors):
        raise BackendUnavailable(MAMBA3_NEEDS_CUDA)
    if x.dtype != torch.bfloat16:
        raise BackendUnavailable(f"{MAMBA3_DTYPES}, not {x.dtype}")
    reason = mamba3_shape_reason(x.shape[-1], B.shape[-1], theta.shape[-1])
    if reason:
        raise BackendUnavailable(reason)


def _mamba3_inputs(dt, A, lam, theta, h: int, n: int):
    """Our (dt, A, lam, theta) as mamba_ssm's (ADT, DT, Trap, Angles) and a zero bias.

    - ADT = dt A per token and head and DT = dt, float32, time last: ``(b, h, t)`` (or
      ``(b, h)`` for a step), from dt and A ``(b, t, h)`` (or ``(b, h)``);
    - Trap: the kernel applies a sigmoid to it, so Trap = logit(lam), clamped to +-30
      (sigmoid(30) = 1 in float32) so that lam = 0 and 1 stay finite;
    - Angles: the kernel turns them into the rate pi tanh(angle), so Angles = atanh(theta
      / pi); theta must lie in (-pi, pi) (mamba_ssm's blocks produce only such rates).
    """
    dt32 = dt.float()
    adt = dt32 * A.float()  # dt_t A_t, (b t h) or (b h)
    trap = torch.logit(lam.float()).clamp(-30.0, 30.0)
    angles = torch.atanh(theta.float() / math.pi)  # (b t h r) or (b h r)
    bias = torch.zeros(h, n, device=dt.device, dtype=torch.float32)  # (h n)
    if dt.dim() == 3:  # (b t h) -> (b h t)
        adt, dt32, trap = (v.transpose(1, 2) for v in (adt, dt32, trap))
    return adt, dt32, trap, angles, bias


def _mamba3_state(state, b: int, h: int, p: int, n: int, r: int, like: torch.Tensor):
    """Our state (a Mamba3State, a bare ``(b, h, p, n)`` SSM state, or None) as the
    kernels' (angle, ssm, k, v) tuple in float32: the phase, the SSM state, B~ and x of
    the last token (mamba_ssm's K state is also taken after bias and rotation)."""
    if state is None:
        return None
    if not isinstance(state, tuple):
        zeros = like.new_zeros
        state = Mamba3State(state, zeros(b, h, r), zeros(b, h, n), zeros(b, h, p))
    ssm, phase, B_prev, x_prev = state
    return tuple(v.float().contiguous() for v in (phase, ssm, B_prev, x_prev))


def mamba3_fused(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    theta: torch.Tensor,
    lam: torch.Tensor,
    D: torch.Tensor | None = None,
    chunk_size: int = 64,
    initial_state: Mamba3State | torch.Tensor | None = None,
) -> tuple[torch.Tensor, Mamba3State]:
    """Mamba-3 SISO by mamba_ssm's Triton ``mamba3_siso_combined`` (CUDA only, bf16).

    Args:
        as :func:`ssmbench.ops.mamba3`: x ``(b, t, h, p)``; dt, A, lam ``(b, t, h)``; D
            ``(h,)``; B, C ``(b, t, g, n)``; theta ``(b, t, h, r)`` with |theta| < pi;
            initial_state a :class:`Mamba3State`, a bare ``(b, h, p, n)`` state or None.

    Returns:
        y ``(b, t, h, p)`` in the dtype of x and the final :class:`Mamba3State` float32;
        its phase is reduced mod 2 pi (the rotation is the same).

    The kernel's names: Q = C, K = B, V = x (same layouts), Q_bias = K_bias = 0; ADT, DT,
    Trap time last; see :func:`_mamba3_inputs` for Trap and Angles.
    """
    _mamba3_check(x, B, theta)
    module = _mamba_ssm("ops.triton.mamba3.mamba3_siso_combined")
    b, _, h, p = x.shape
    n, r = B.shape[-1], theta.shape[-1]
    adt, dt32, trap, angles, bias = _mamba3_inputs(dt, A, lam, theta, h, n)
    out, phase, ssm, B_last, x_last = module.mamba3_siso_combined(
        C,
        B,
        x,
        adt,
        dt32,
        trap,
        bias,
        bias,
        angles,
        D=None if D is None else D.float(),
        Input_States=_mamba3_state(initial_state, b, h, p, n, r, x),
        chunk_size=chunk_size,
        return_final_states=True,
    )
    state = Mamba3State(ssm.float(), phase.float(), B_last.float(), x_last.float())
    return out.to(x.dtype), state


def mamba3_step_fused(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    theta: torch.Tensor,
    lam: torch.Tensor,
    D: torch.Tensor | None = None,
    state: Mamba3State | torch.Tensor | None = None,
) -> tuple[torch.Tensor, Mamba3State]:
    """One token of Mamba-3 by mamba_ssm's Triton ``mamba3_siso_step`` (CUDA only, bf16).

    Args:
        as :func:`ssmbench.ops.mamba3_step`: x ``(b, h, p)``; dt, A, lam ``(b, h)``; D
            ``(h,)``; B, C ``(b, g, n)``; theta ``(b, h, r)``; state as :func:`mamba3_fused`.

    Returns:
        y ``(b, h, p)`` in the dtype of x and the new :class:`Mamba3State` float32.
    """
    _mamba3_check(x, B, theta)
    module = _mamba_ssm("ops.triton.mamba3.mamba3_siso_step")
    b, h, p = x.shape
    n, r = B.shape[-1], theta.shape[-1]
    adt, dt32, trap, angles, bias = _mamba3_inputs(dt, A, lam, theta, h, n)
    if state is None:
        state = x.new_zeros(b, h, p, n, dtype=torch.float32)  # the step needs a state
    y, (phase, ssm, B_last, x_last) = module.mamba3_siso_step(
        C,
        B,
        x,
        adt,
        dt32,
        trap,
        bias,
        bias,
        angles,
        D=None if D is None else D.float(),
        Input_States=_mamba3_state(state, b, h, p, n, r, x),
    )
    return y.to(x.dtype), Mamba3State(ssm.float(), phase.float(), B_last.float(), x_last.float())


# --- DeltaNet --------------------------------------------------------------------------

_HALF = (torch.float16, torch.bfloat16)


def delta_rule_impl(dtype: torch.dtype, gated: bool) -> str:
    """The fla kernel :func:`delta_rule_fused` runs for inputs of ``dtype``."""
    if gated or dtype not in _HALF:
        return "fla.chunk_gated_delta_rule"
    return "fla.chunk_delta_rule"


FLA_MAX_HEAD_DIM = 256  # fla/ops/common/chunk_delta_h.py asserts K <= 256


def delta_rule_shape_reason(k: int, v: int) -> str:
    """Why fla's chunked delta-rule kernels cannot take key width ``k`` ("" when they
    can): their state kernel asserts ``K <= 256``; ``v`` is blocked and has no limit."""
    if k > FLA_MAX_HEAD_DIM:
        return f"fla's chunked delta-rule kernels take key widths up to {FLA_MAX_HEAD_DIM}, k={k}"
    return ""


def delta_rule_fused(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    chunk_size: int = 64,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(Gated) DeltaNet by fla's chunked Triton kernels.

    Args:
        as :func:`ssmbench.ops.delta_rule`: q, k ``(b, t, h, k)`` (already L2-normalized);
            v ``(b, t, h, v)``; beta ``(b, t, h)``; g ``(b, t, h)`` log-decay or None;
            initial_state ``(b, h, k, v)``; chunk_size: fla's chunk (16, 32 or 64; any
            other value runs 64, which gives the same result).

    Returns:
        o ``(b, t, h, v)`` in the dtype of q and the final state ``(b, h, k, v)`` float32.

    fla's layouts are ours (its default state layout is ``[N, H, K, V]``).  It scales q
    by ``K ** -0.5`` unless told otherwise: ``scale=1.0`` here, since our operator does not
    scale.  g is passed in float32 (fla's own layers compute it so).  Without g, half
    precision runs ``chunk_delta_rule``; float32, which that kernel refuses, runs the gated
    kernel with g = 0, the same recurrence (:func:`delta_rule_impl` names the kernel).
    """
    _check_tensors(q, k, v, beta, g, initial_state)
    reason = delta_rule_shape_reason(k.shape[-1], v.shape[-1])
    if reason:
        raise BackendUnavailable(reason)
    h0 = None if initial_state is None else initial_state.float().contiguous()
    chunk = chunk_size if chunk_size in (16, 32, 64) else 64
    common = dict(scale=1.0, initial_state=h0, output_final_state=True, chunk_size=chunk)
    if delta_rule_impl(q.dtype, g is not None) == "fla.chunk_delta_rule":
        kernel = _import("fla.ops.delta_rule", "fla").chunk_delta_rule
        o, final_state = kernel(q, k, v, beta, **common)
    else:
        kernel = _import("fla.ops.gated_delta_rule", "fla").chunk_gated_delta_rule
        log_decay = q.new_zeros(beta.shape, dtype=torch.float32) if g is None else g.float()
        o, final_state = kernel(q, k, v, log_decay, beta, **common)
    return o, final_state.float()


def delta_rule_step_fused(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the (gated) delta rule by fla's fused recurrent Triton kernels.

    Args:
        as :func:`ssmbench.ops.delta_rule_step`: q, k ``(b, h, k)``; v ``(b, h, v)``;
            beta, g ``(b, h)``; state ``(b, h, k, v)`` or None (zeros).

    Returns:
        o ``(b, h, v)`` in the dtype of q and the new state ``(b, h, k, v)`` float32.

    The token gets a length-1 time axis (fla's ``(b, t, h, .)`` layout); scale=1.0 as in
    :func:`delta_rule_fused`.  fla writes the new state to a fresh tensor.
    """
    _check_tensors(q, k, v, beta, g, state)
    h0 = None if state is None else state.float().contiguous()
    tokens = [x[:, None] for x in (q, k, v, beta)]  # (b 1 h .)
    common = dict(scale=1.0, initial_state=h0, output_final_state=True)
    if g is None:
        kernel = _import("fla.ops.delta_rule", "fla").fused_recurrent_delta_rule
        o, new_state = kernel(*tokens[:3], beta=tokens[3], **common)
    else:
        kernel = _import("fla.ops.gated_delta_rule", "fla").fused_recurrent_gated_delta_rule
        o, new_state = kernel(*tokens[:3], g=g[:, None].float(), beta=tokens[3], **common)
    return o[:, 0], new_state.float()  # (b h v), (b h k v)


# --- attention -------------------------------------------------------------------------


def attention_impl() -> str:
    """Which kernel :func:`attention_fused` runs here: ``"flash_attn <version>"`` where
    the flash-attn package imports, else ``"sdpa-flash"`` (PyTorch's SDPA restricted to its
    FlashAttention-2 backend)."""
    if _installed("flash_attn"):
        return f"flash_attn {importlib.metadata.version('flash-attn')}"
    return "sdpa-flash"


FLASH_MAX_HEAD_DIM = 256  # FlashAttention-2 (and SDPA's flash backend) take d <= 256


def attention_shape_reason(d: int) -> str:
    """Why FlashAttention-2 cannot take head dim ``d`` ("" when it can): d <= 256 (both
    flash_attn and SDPA pad d to a multiple of 8 themselves)."""
    if d > FLASH_MAX_HEAD_DIM:
        return f"FlashAttention-2 takes head dims up to {FLASH_MAX_HEAD_DIM}, d={d}"
    return ""


def _flash_check(q: torch.Tensor, *others: torch.Tensor) -> None:
    """BackendUnavailable unless FlashAttention-2 can take these: CUDA tensors, fp16 or
    bf16, a head dim it supports."""
    if not all(x.is_cuda for x in (q, *others)):
        raise BackendUnavailable(FLASH_NEEDS_CUDA)
    if q.dtype not in _HALF:
        raise BackendUnavailable(f"{FLASH_DTYPES}, not {q.dtype}")
    reason = attention_shape_reason(q.shape[-1])
    if reason:
        raise BackendUnavailable(reason)


def attention_fused(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
) -> torch.Tensor:
    """Softmax attention, scale ``1 / sqrt(d)``, by FlashAttention-2:
    q, k, v ``(b, t, h, d)`` -> ``(b, t, h, d)``.

    ``flash_attn.flash_attn_func`` takes our layout as is; PyTorch's SDPA takes
    ``(b, h, t, d)`` and is restricted to its flash backend (a RuntimeError there, e.g. an
    unsupported head dim or GPU, becomes BackendUnavailable).  Both take fp16 and bf16 only.
    With equal lengths of q and k (prefill) both causal masks are the same.
    """
    _flash_check(q, k, v)
    if _installed("flash_attn"):
        flash_attn = _import("flash_attn", "flash_attn")
        return flash_attn.flash_attn_func(q, k, v, causal=causal)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q_, k_, v_ = (x.transpose(1, 2) for x in (q, k, v))  # (b h t d)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            y = F.scaled_dot_product_attention(q_, k_, v_, is_causal=causal)  # (b h t d)
    except RuntimeError as e:
        message = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise BackendUnavailable(f"SDPA's flash backend cannot run: {message}") from e
    return y.transpose(1, 2)  # (b t h d)


def attention_step_fused(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache, without_flash: Callable
) -> torch.Tensor:
    """One decode query against a preallocated KV cache (an
    :class:`ssmbench.models.attention.KVBuffer`), writing the token in place:
    q, k, v ``(b, h, d)`` -> y ``(b, h, d)``.

    ``flash_attn.flash_attn_with_kvcache`` writes k and v at ``cache_seqlens`` and attends
    to the valid tokens only (the position as an int32 per sequence).  Without flash-attn,
    ``without_flash(q, k, v, cache)`` runs: the ``torch`` step (the same write, then SDPA
    over the buffer with the later slots masked; SDPA's flash kernel takes no mask, so
    PyTorch picks its memory-efficient one).  CUDA, fp16 and bf16 only, as
    :func:`attention_fused`.
    """
    _flash_check(q, k, v, cache.k)
    if not _installed("flash_attn"):
        return without_flash(q, k, v, cache)
    flash_attn = _import("flash_attn", "flash_attn")
    seqlens = cache.position.to(torch.int32).expand(q.shape[0]).contiguous()  # (b,)
    tokens = [x.unsqueeze(1) for x in (q, k, v)]  # (b 1 h d)
    y = flash_attn.flash_attn_with_kvcache(
        tokens[0], cache.k, cache.v, k=tokens[1], v=tokens[2], cache_seqlens=seqlens
    )  # (b 1 h d)
    return y.squeeze(1)


# --- tables ----------------------------------------------------------------------------

# op name (as in ssmbench.ops, and the "op" of a verify shape) -> why the fused kernel
# cannot take that shape, from the shape's dims; ops not listed take any shape
SHAPE_REASONS: dict[str, Callable[..., str]] = {
    "attention": lambda d, **_: attention_shape_reason(d),
    "attention_step": lambda d, **_: attention_shape_reason(d),
    "mamba3": lambda p, n, r, **_: mamba3_shape_reason(p, n, r),
    "mamba3_step": lambda p, n, r, **_: mamba3_shape_reason(p, n, r),
    "mamba3_as_ssd": lambda p, n, r, **_: mamba3_shape_reason(p, n, r),
    "delta_rule": lambda k, v, **_: delta_rule_shape_reason(k, v),
}


def shape_reason(shape: dict) -> str:
    """Why the fused kernel of ``shape["op"]`` cannot take ``shape`` (a verify shape: the
    op and its dims by letter, e.g. ``{"op": "mamba3", "p": 16, "n": 16, "r": 4, ...}``),
    or "" when it can.  The same functions the wrappers raise BackendUnavailable with."""
    check = SHAPE_REASONS.get(shape["op"])
    return "" if check is None else check(**{k: v for k, v in shape.items() if k != "op"})


def block_shape_reason(family: str, head_dim: int, d_state: int) -> str:
    """Why a block of ``family`` with this size preset's ``head_dim`` and ``d_state``
    cannot run its fused kernels ("" when it can): Mamba-3's p = head_dim, n = d_state and
    r = :func:`ssmbench.counts.rotation_pairs` (n); attention's d = head_dim; DeltaNet's
    k = v = head_dim."""
    from ssmbench.counts import rotation_pairs

    if family == "mamba3":
        return mamba3_shape_reason(head_dim, d_state, rotation_pairs(d_state))
    if family in ("attention", "hybrid"):
        return attention_shape_reason(head_dim)
    if family == "deltanet":
        return delta_rule_shape_reason(head_dim, head_dim)
    return ""


# PHASES (ssmbench.registry): prefill and train run the sequence operator (train's backward
# is that operator's), decode the one-token step


def _attention_reason(device: str | torch.device, phase: str | None = None) -> str:
    return "" if _device_type(device) == "cuda" else FLASH_NEEDS_CUDA


def _mamba_reason(device: str | torch.device, phase: str | None = None) -> str:
    """Mamba-1: the prefill kernel (and so train) is CUDA C++, the decode step Triton;
    phase None asks for every phase."""
    if not _installed("mamba_ssm"):
        return _missing("mamba_ssm")
    if phase == "decode":
        return _triton_reason(device) or _package_reason("triton")
    if not _installed("selective_scan_cuda"):
        return SELECTIVE_SCAN_CUDA_MISSING
    if _device_type(device) != "cuda":
        return SELECTIVE_SCAN_NEEDS_CUDA
    return _package_reason("triton")


def _mamba2_reason(device: str | torch.device, phase: str | None = None) -> str:
    return _triton_reason(device) or _package_reason("triton", "mamba_ssm")


def _mamba3_reason(device: str | torch.device, phase: str | None = None) -> str:
    if _device_type(device) != "cuda":
        return MAMBA3_NEEDS_CUDA
    return _package_reason("triton", "mamba_ssm")


def _deltanet_reason(device: str | torch.device, phase: str | None = None) -> str:
    return _triton_reason(device) or _package_reason("triton", "fla")


def _s4d_reason(device: str | torch.device, phase: str | None = None) -> str:
    return S4D_REASON


def _hybrid_reason(device: str | torch.device, phase: str | None = None) -> str:
    return _attention_reason(device, phase) or _mamba2_reason(device, phase)


# family -> reason(device, phase=None) ("" when the family's fused kernels of that phase, or
# of every phase for None, can run on that device)
FUSED_AVAILABILITY: dict[str, Callable[..., str]] = {
    "attention": _attention_reason,
    "s4d": _s4d_reason,
    "mamba": _mamba_reason,
    "mamba2": _mamba2_reason,
    "mamba3": _mamba3_reason,
    "deltanet": _deltanet_reason,
    "hybrid": _hybrid_reason,
}

# dtype names as in the config (ssmbench.models.DTYPES)
_DTYPE_REASONS = {
    "attention": {"fp32": f"{FLASH_DTYPES}, not fp32"},
    "hybrid": {"fp32": f"{FLASH_DTYPES}, not fp32"},
    "mamba3": {
        "fp32": f"{MAMBA3_DTYPES}, not fp32",
        "fp16": f"{MAMBA3_DTYPES}, not fp16",
    },
}


def unavailable_reason(
    family: str,
    device: str | torch.device,
    dtype: str | None = None,
    phase: str | None = None,
) -> str:
    """Why the ``fused`` backend of ``family`` cannot run ``phase`` (prefill, decode or
    train; None: every phase) on ``device`` in ``dtype`` (a config name: fp64, fp32, fp16,
    bf16; None skips the dtype check), or "" when it can.  Mamba-1's decode step is Triton
    and runs where its CUDA prefill kernel was not built.  Cheap: nothing is imported or
    built, packages are only looked up."""
    if family not in FUSED_AVAILABILITY:
        raise ValueError(f"unknown family {family!r}; known: {sorted(FUSED_AVAILABILITY)}")
    if phase is not None and phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; known: {list(PHASES)}")
    reason = FUSED_AVAILABILITY[family](device, phase)
    if reason or dtype is None:
        return reason
    if dtype == "fp64":
        return NO_FLOAT64
    return _DTYPE_REASONS.get(family, {}).get(dtype, "")
