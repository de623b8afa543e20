"""Pieces the model families share: the numeric floor of log-decays, the dt-bias init,
the short causal conv and its decode state, RMSNorm, the residual stack, and the one
backend lookup with its error message.  The size preset is :class:`ssmbench.config.Size`."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ssmbench.errors import CellTimeout
from ssmbench.registry import PROFILER_RANGES


def widen(*tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """The tensors in float32 at least (None stays None): a state sums over many tokens,
    which half precision cannot hold (mamba_ssm's references and kernels widen to float32
    as well)."""
    return tuple(
        x.float() if x is not None and x.dtype in (torch.float16, torch.bfloat16) else x
        for x in tensors
    )


# Log-decays below this are raised to it before the exp, and the two factors a chunked
# form splits a decay into are kept within e^+-(-LOG_DECAY_FLOOR).  exp(-60) = 8.7e-27 is
# nothing next to the O(1) terms it is added to in float32 (or float64), yet far from
# float32's subnormal range (below exp(-87.3)): subnormal or -inf arguments and results
# send torch's CPU exp and MKL's matmul down slow scalar paths (20-160x slower), which a
# realistic decay (dt A = -1.6 per token, so -100 within one 64-token chunk) would hit all
# the time.  A factor within e^+-60 stays in float32's (and bf16's) normal range, and so
# does its product with an O(1) input; fp16's (largest 65504, about e^11) does not hold it.
LOG_DECAY_FLOOR = -60.0


def inverse_softplus(y: torch.Tensor) -> torch.Tensor:
    """x with softplus(x) = y, for y > 0: log(exp(y) - 1) = y + log(1 - exp(-y)).
    Stores a positive step size (dt) as the bias that softplus maps back to it."""
    return y + torch.log(-torch.expm1(-y))


# The initial step sizes of every family, mamba_ssm's defaults (dt_min, dt_max and
# dt_init_floor of its Mamba, Mamba2 and Mamba3 modules; S4D's log_dt range is the same)
DT_INIT_RANGE = (1e-3, 1e-1)
DT_INIT_FLOOR = 1e-4
# -A uniform in this range per head (mamba_ssm's Mamba2 ``A_init_range``; Mamba-3 and
# Gated DeltaNet take it too)
A_INIT_RANGE = (1.0, 16.0)


def dt_bias_init(n: int, dt_range: tuple[float, float] = DT_INIT_RANGE) -> torch.Tensor:
    """``(n,)`` biases of the step size, as mamba_ssm initialises them (Mamba, Mamba-2,
    Mamba-3, and Gated DeltaNet's decay gate): dt log-uniform in ``dt_range`` (mamba_ssm's
    ``dt_min``, ``dt_max``; DT_INIT_RANGE by default), at least DT_INIT_FLOOR, stored as
    its inverse softplus, so that ``softplus(0 + bias)`` is dt.  Draws ``n`` numbers from
    torch's global generator."""
    dt_min, dt_max = dt_range
    log_dt = torch.rand(n) * (math.log(dt_max) - math.log(dt_min))
    dt = torch.exp(log_dt + math.log(dt_min)).clamp(min=DT_INIT_FLOOR)  # (n)
    return inverse_softplus(dt)


class CausalConv1d(nn.Conv1d):
    """The short depthwise causal convolution of Mamba's, Mamba-2's and DeltaNet's blocks,
    followed by SiLU (mamba_ssm's ``causal_conv1d_fn(activation="silu")``, fla's
    ``ShortConvolution``), over a sequence and one token at a time.

    An ``nn.Conv1d`` (so its parameters are ``weight (d, 1, width)`` and ``bias (d,)``,
    initialised as torch does) padded by ``width - 1`` on both sides, of which the output
    keeps the first t: each output sees its own input and the ``width - 1`` before it,
    ``y_t = bias + sum_k weight[:, 0, k] x_{t - width + 1 + k}``.  Its decode state is the
    last ``width`` inputs ``(b, d, width)``, zeros before the sequence.

    Without gradients the sequence goes through torch's conv1d; under autograd, through
    that sum as ``width`` multiply-adds over ``(b, t, d)`` (:meth:`shifted`): torch's CPU
    backward of a depthwise conv1d is slow, and the sum needs no transposes (at b 64, t 64,
    d 256 forward and backward took 19 ms against conv1d's 30, one thread)."""

    def __init__(self, channels: int, width: int, bias: bool = True):
        super().__init__(
            channels, channels, kernel_size=width, groups=channels, padding=width - 1, bias=bias
        )
        self.width = width

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: ``(b, t, d)`` -> silu(conv(x)) ``(b, t, d)`` and the decode state ``(b, d,
        width)``."""
        T = x.shape[1]
        x_t = x.transpose(1, 2)  # (b d t)
        state = F.pad(x_t, (max(self.width - T, 0), 0))[..., -self.width :].clone()  # (b d w)
        if torch.is_grad_enabled() and any(v.requires_grad for v in (x, *self.parameters())):
            y = self.shifted(x)  # (b t d)
        else:
            y = super().forward(x_t)[..., :T].transpose(1, 2)  # (b t d), causal: cut to T
        return F.silu(y), state

    def shifted(self, x: torch.Tensor) -> torch.Tensor:
        """The convolution (before SiLU) as ``width`` shifted multiply-adds: x ``(b, t, d)``
        -> ``(b, t, d)``."""
        T, w = x.shape[1], self.width
        padded = F.pad(x, (0, 0, w - 1, 0))  # (b t+w-1 d), zeros before the sequence
        taps = self.weight[:, 0]  # (d w)
        own = padded[:, w - 1 :]  # (b t d), each token itself
        if self.bias is None:
            y = own * taps[:, w - 1]
        else:
            y = torch.addcmul(self.bias, own, taps[:, w - 1])  # (b t d)
        for k in range(w - 1):
            y = torch.addcmul(y, padded[:, k : k + T], taps[:, k])  # x_{t - w + 1 + k}
        return y

    def step(
        self, x_t: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One token: x_t ``(b, d)``, the state from :meth:`forward` or the last step (or
        None for zeros) -> silu(conv) ``(b, d)`` and the new state ``(b, d, width)``."""
        if state is None:
            state = x_t.new_zeros(*x_t.shape, self.width)  # (b d w)
        state = torch.cat([state[..., 1:], x_t[..., None]], dim=-1)  # (b d w)
        y = torch.einsum("bdw,dw->bd", state, self.weight[:, 0])  # (b d)
        if self.bias is not None:
            y = y + self.bias
        return F.silu(y), state


class BackendUnavailable(RuntimeError):
    """A backend that cannot run on this machine; a cell records it as ``unavailable``."""


def not_offered(backend: str, reason: str) -> Callable:
    """The entry of a backend table for a backend the family does not offer: calling it
    raises :class:`BackendUnavailable` with ``reason``, so its cells are ``unavailable``
    and say why."""

    def unavailable(*args, **kwargs):
        raise BackendUnavailable(f"{backend}: {reason}")

    unavailable.__name__ = f"{backend.replace('-', '_')}_not_offered"
    return unavailable


def mixed_matmul_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype of the ``torch-mixed`` backend's matmul operands for inputs like ``x``:
    x's own.  In bf16 torch multiplies bf16 operands with fp32 accumulation; in fp32 (or
    fp64) torch-mixed is the torch backend's arithmetic exactly.

    fp16 raises :class:`BackendUnavailable`: the chunked forms fold split decays of up to
    e^+-60 into their operands (:data:`LOG_DECAY_FLOOR`), which bf16 holds (fp32's
    exponent range) and fp16 (largest 65504, about e^11) does not."""
    if x.dtype == torch.float16:
        raise BackendUnavailable(
            "torch-mixed takes bf16 (or fp32, where it is torch): fp16 cannot hold the "
            "chunked forms' split decay factors (up to e^60; fp16's largest is 65504)"
        )
    return x.dtype


# The operator or step each caller of pick_backend runs -> the profiler range it runs in
# (ssmbench.registry): torch.profiler users (ssmbench.measure.profile) bucket everything
# inside an "ssm_scan" or "attention" range as such, whatever ops it is made of.
PROFILER_SCOPES = PROFILER_RANGES


def pick_backend(table: dict[str, Callable], backend: str, op: str) -> Callable:
    """``table[backend]``; for ``compile``, torch.compile of ``table["torch"]``; else a
    ValueError naming the op, the bad value and the known ones.  A backend a family does
    not offer is in its table as :func:`not_offered` (``torch-mixed``), or missing
    (``fused``): either raises :class:`BackendUnavailable`.  While torch.profiler records,
    the call runs inside a range named by ``PROFILER_SCOPES[op]``."""
    if backend == "compile" and "torch" in table:
        fn = compiled(table["torch"])
    elif backend == "fused" and "fused" not in table:
        raise BackendUnavailable(
            f"no fused kernel for {op}: none of the libraries this benchmark loads "
            "(mamba_ssm, fla, FlashAttention) has one"
        )
    elif backend not in table:
        known = sorted(table) + (["compile"] if "torch" in table else [])
        raise ValueError(f"unknown backend {backend!r} for {op}; known: {known}")
    else:
        fn = table[backend]
    scope = PROFILER_SCOPES.get(op)
    return fn if scope is None else _in_profiler_range(fn, scope)


def _in_profiler_range(fn: Callable, name: str) -> Callable:
    """``fn``, run inside ``torch.profiler.record_function(name)`` while a profiler is on
    (and called directly otherwise, at the cost of one flag check)."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        if not torch.autograd.profiler._is_profiler_enabled:
            return fn(*args, **kwargs)
        with torch.profiler.record_function(name):
            return fn(*args, **kwargs)

    return run


_COMPILED: dict[Callable, Callable] = {}


def compiled(fn: Callable) -> Callable:
    """``torch.compile(fn)``, made once per function and process.

    Compilation happens at the first call (Dynamo traces, Inductor generates and builds
    kernels; on a CPU that needs a working C++ compiler).  If that first call fails, the
    backend cannot run here: :class:`BackendUnavailable` says why.  Errors of later calls
    pass through unchanged, and so does the cell's deadline: a compilation that runs past
    the cell's budget raises :class:`~ssmbench.errors.CellTimeout` (from the alarm), which
    Dynamo may wrap in an error of its own; the timeout is re-raised, never reported as
    an unavailable backend.
    """
    if fn not in _COMPILED:
        graph = torch.compile(fn)
        state = {"ok": False}

        def run(*args, **kwargs):
            if state["ok"]:
                return graph(*args, **kwargs)
            try:
                out = graph(*args, **kwargs)
            except Exception as e:
                timeout = _cause(e, CellTimeout)
                if timeout is not None:
                    raise timeout from None
                message = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
                raise BackendUnavailable(
                    f"torch.compile of {fn.__name__} failed: {type(e).__name__}: {message}"
                ) from e
            state["ok"] = True
            return out

        _COMPILED[fn] = run
    return _COMPILED[fn]


def _cause(error: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``error`` or the first exception of type ``kind`` it was raised from (``__cause__``,
    ``__context__``, or Dynamo's ``inner_exception``), or None."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return error
        seen.add(id(error))
        error = (
            error.__cause__
            or getattr(error, "inner_exception", None)
            or (None if error.__suppress_context__ else error.__context__)
        )
    return None


class RMSNorm(nn.Module):
    """Root-mean-square norm (Zhang & Sennrich 2019), computed in float32 at least.

    x: ``(..., d_model)`` -> ``(..., d_model)`` in the dtype of x.
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_wide = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        x_wide = x_wide * torch.rsqrt(x_wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return x_wide.to(x.dtype) * self.weight


class ResidualStack(nn.Module):
    """``n_layers`` of ``x = x + mixer(norm(x))``, then a final norm.

    Every mixer has ``forward(x, backend) -> (y, cache)`` over a sequence
    ``(b, t, d_model)`` and ``step(x_t, cache, backend) -> (y_t, cache)`` for one token
    ``(b, d_model)``.  The backend is fixed here, at construction.
    """

    def __init__(self, mixers: list[nn.Module], d_model: int, backend: str):
        super().__init__()
        self.backend = backend
        self.mixers = nn.ModuleList(mixers)
        self.norms = nn.ModuleList(RMSNorm(d_model) for _ in mixers)
        self.norm_f = RMSNorm(d_model)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list]:
        """x: ``(b, t, d_model)`` -> y ``(b, t, d_model)`` and one cache per layer."""
        caches = []
        for norm, mixer in zip(self.norms, self.mixers, strict=True):
            y, cache = mixer(norm(x), self.backend)
            x = x + y
            caches.append(cache)
        return self.norm_f(x), caches

    def decode_caches(self, caches: list, capacity: int) -> list:
        """The caches a decode of up to ``capacity`` tokens steps from: each layer's as its
        mixer keeps it for this backend (attention: a preallocated buffer written in
        place, except the naive loop's pair; an SSM's state as it is)."""
        return [
            mixer.decode_cache(cache, capacity, self.backend)
            if hasattr(mixer, "decode_cache")
            else cache
            for mixer, cache in zip(self.mixers, caches, strict=True)
        ]

    def random_caches(self, caches: list, seq_len: int, generator: torch.Generator) -> list:
        """Caches of ``seq_len`` tokens made of random values, shaped as ``caches`` (those
        of any prefill, however short): a mixer with ``random_cache`` (attention: keys and
        values for ``seq_len`` tokens) makes its own; any other layer's state, whose shape
        does not depend on the length, gets standard normal values in every float tensor.
        A decode step's time depends on its cache's size and layout, not its values."""
        return [
            mixer.random_cache(cache, seq_len, generator)
            if hasattr(mixer, "random_cache")
            else random_like(cache, generator)
            for mixer, cache in zip(self.mixers, caches, strict=True)
        ]

    def step(self, x_t: torch.Tensor, caches: list) -> tuple[torch.Tensor, list]:
        """x_t: ``(b, d_model)``, caches from :meth:`forward` or an earlier step (or a
        list of None to start from empty) -> y_t ``(b, d_model)`` and the new caches."""
        new_caches = []
        for norm, mixer, cache in zip(self.norms, self.mixers, caches, strict=True):
            y_t, cache = mixer.step(norm(x_t), cache, self.backend)
            x_t = x_t + y_t
            new_caches.append(cache)
        return self.norm_f(x_t), new_caches


class RandomDraws:
    """Seeded random tensors for a family's ``random_inputs`` (verification, benchmark
    scripts) and a cell's block input: each drawn in float32 on the CPU from
    ``generator`` (the same numbers on every device), then rounded to ``dtype`` and moved
    to ``device``."""

    def __init__(
        self,
        generator: torch.Generator,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ):
        self.generator = generator
        self.device = torch.device(device)
        self.dtype = dtype

    def randn(self, *shape: int, scale: float = 1.0) -> torch.Tensor:
        """Normal values of standard deviation ``scale``."""
        x = torch.randn(*shape, generator=self.generator)
        if scale != 1.0:  # (x * 1.0 is x: skipping it spares a copy of a long input)
            x = x * scale
        return x.to(device=self.device, dtype=self.dtype)

    def rand(self, *shape: int, low: float, high: float) -> torch.Tensor:
        """Values uniform in [low, high)."""
        x = low + (high - low) * torch.rand(*shape, generator=self.generator)
        return x.to(device=self.device, dtype=self.dtype)


def random_like(value, generator: torch.Generator):
    """``value`` (a tensor, or tuples and lists of them, NamedTuples included) with every
    floating or complex tensor replaced by standard normal values of its shape, dtype,
    device and strides (a state kept as a transposed view stays one), drawn from
    ``generator`` (a CPU generator: the same values on every device)."""
    if isinstance(value, torch.Tensor):
        if not (value.is_floating_point() or value.is_complex()):
            return value
        drawn = torch.randn(value.shape, generator=generator, dtype=value.dtype)
        out = torch.empty_strided(
            value.shape, value.stride(), dtype=value.dtype, device=value.device
        )
        return out.copy_(drawn)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple state
        return type(value)(*(random_like(v, generator) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(random_like(v, generator) for v in value)
    return value


def cumsum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """torch.cumsum along ``dim``, run along the innermost axis of a contiguous copy and
    returned as a view in x's axis order: torch's CPU cumsum along an outer axis is several
    times slower (about 9x for a (4096, 64) cumsum over the 4096), and the copy costs less
    than the difference."""
    dim = dim % x.dim()
    if dim == x.dim() - 1:
        return torch.cumsum(x, dim=-1)
    return torch.cumsum(x.movedim(dim, -1).contiguous(), dim=-1).movedim(-1, dim)
