"""S4D (Gu, Gupta, Goel & Ré 2022, "On the Parameterization and Initialization of Diagonal
State Space Models", arXiv 2206.11893): the diagonal SSM in three forms, and the S4D layer.

Glossary (axis letter -> paper symbol):

    b  batch                  B in the paper
    t  time                   L in the paper (sequence length T here)
    h  channels               H, one independent SSM per channel (d_model here)
    n  complex modes          N/2: the paper's real state size N = d_state is held as
                              n = d_state // 2 complex modes whose conjugates are implied

The operator (B fixed to 1 and folded into C, as the paper's S4D kernel does; dt = exp(log_dt)):

    dA = exp(dt A)                                   (ZOH, S4D §2 "Discretization")
    dB = (exp(dt A) - 1) / A                         (ZOH with B = 1)
    h_t = dA h_{t-1} + dB u_t                        (REC)
    y_t = 2 Re(sum_n C_n h_t[n]) + D u_t             (OUT; 2 Re: the conjugate pairs)
    K_l = 2 Re(sum_n C_n dB_n dA_n^l)                (VAN, the Vandermonde kernel, S4D §3)
    y = K * u + D u  (causal convolution)            (CONV)

and with an initial state h_init, (REC) unrolled adds ``2 Re(sum_n C_n dA_n^(t+1) h_init[n])``
to y_t and ``dA^T h_init`` to the final state.

Three forms that must agree (tests pin them to the NumPy reference):

- ``s4d_naive``: a Python loop over time, one small update per token (REC, OUT).
- ``s4d_fft``: the convolution form (VAN, CONV) with no loop over time: the kernel as a
  Vandermonde product, the convolution by FFT, the initial state's response and the final
  state as batched matmuls against the same powers of dA.
- ``s4d_step``: one token, for decode.

All three compute in float32 / complex64 at least (float64 / complex128 when given
float64), return y in the dtype of u and the state as a complex tensor ``(b, h, n)``.

What this file leaves out: S4D-Inv and the other initialisations, the bilinear
discretisation, dropout, the bidirectional and multi-channel variants of the S4 repo, and
any fused kernel (the S4 repo's Vandermonde kernels in CUDA/KeOps): the FFT convolution is
S4D's fast path, and its ``fused`` backend is unavailable (:func:`fused_unavailable`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ssmbench.matrix import Size
from ssmbench.models.common import DT_INIT_RANGE, RandomDraws, not_offered, pick_backend, widen
from ssmbench.registry import FAMILY

S4DCache = tuple[torch.Tensor]  # (ssm_state (b, h, n) complex,)

# below this |z|, (e^z - 1) / z comes from its Taylor series (first dropped term z^4 / 120,
# under 1e-18 there); above it from expm1, which keeps the digits e^z - 1 would cancel
SERIES_BELOW = 1e-4


def _compute_dtypes(u: torch.Tensor, log_dt: torch.Tensor) -> tuple[torch.dtype, torch.dtype]:
    """(real, complex) dtypes of the computation: float32 at least (the state sums over
    many tokens, which half precision cannot hold), float64 when u or log_dt is."""
    real = torch.promote_types(torch.promote_types(u.dtype, log_dt.dtype), torch.float32)
    return real, real.to_complex()


def _check_shapes(u, log_dt, A, C, D, state, token: bool) -> None:
    """ValueError naming the first argument whose shape does not fit u's."""
    want_u = 2 if token else 3
    if u.dim() != want_u:
        layout = "(b, h)" if token else "(b, t, h)"
        raise ValueError(f"u must be {layout}, got shape {tuple(u.shape)}")
    b, h = u.shape[0], u.shape[-1]
    n = A.shape[-1]
    expected = {"log_dt": (h,), "A": (h, n), "C": (h, n), "D": (h,)}
    if state is not None:
        expected["state"] = (b, h, n)
    given = {"log_dt": log_dt, "A": A, "C": C, "D": D, "state": state}
    for name, shape in expected.items():
        if tuple(given[name].shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(given[name].shape)}")


def expm1_over_z(z: torch.Tensor) -> torch.Tensor:
    """(e^z - 1) / z elementwise for complex z, never dividing by a tiny z: the series
    1 + z/2 + z^2/6 + z^3/24 where |z| < SERIES_BELOW (1 at z = 0), else expm1(z) / z.
    Both branches are finite everywhere, so autograd through the where is too."""
    small = z.abs() < SERIES_BELOW
    safe_z = torch.where(small, torch.ones_like(z), z)
    series = 1 + z / 2 * (1 + z / 3 * (1 + z / 4))
    return torch.where(small, series, torch.expm1(safe_z) / safe_z)


def _exp(z: torch.Tensor) -> torch.Tensor:
    """exp of a complex tensor as |e^z| e^{i Im z}: the same numbers as torch.exp, but
    from real exp, cos and sin, which are vectorised on CPU (complex exp is ~4x slower)."""
    return torch.polar(torch.exp(z.real), z.imag)


def discretise(log_dt: torch.Tensor, A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-order hold with B = 1: ``dt A`` and ``dB = (exp(dt A) - 1) / A``, each ``(h, n)``.

    Args:
        log_dt: ``(h,)`` real; A: ``(h, n)`` complex, in the compute dtypes.
    """
    dt = torch.exp(log_dt)[:, None]  # (h 1)
    dtA = dt * A  # (h n)
    dB = dt * expm1_over_z(dtA)  # (h n), ZOH: (dt A)^-1 (exp(dt A) - 1) dt
    return dtA, dB


def _prepare(u, log_dt, A, C, D, state):
    """Every argument in the compute dtypes (see :func:`_compute_dtypes`)."""
    real, cplx = _compute_dtypes(u, log_dt)
    state = None if state is None else state.to(cplx)
    return u.to(real), log_dt.to(real), A.to(cplx), C.to(cplx), D.to(real), state


def s4d_naive(
    u: torch.Tensor,
    log_dt: torch.Tensor,
    A: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """S4D as the seeds wrote it: discretise once, then a Python loop over time with one
    small state update per token (REC, OUT).

    Args:
        u: ``(b, t, h)`` real; log_dt: ``(h,)``; A, C: ``(h, n)`` complex; D: ``(h,)``;
            initial_state: ``(b, h, n)`` complex or None for zeros.

    Returns:
        y: ``(b, t, h)`` in the dtype of u, and the final state ``(b, h, n)`` complex64
        or complex128.
    """
    _check_shapes(u, log_dt, A, C, D, initial_state, token=False)
    out_dtype = u.dtype
    u, log_dt, A, C, D, h = _prepare(u, log_dt, A, C, D, initial_state)
    batch, T, H = u.shape
    dtA, dB = discretise(log_dt, A)
    dA = torch.exp(dtA)  # (h n), ZOH
    dB_u = torch.einsum("bth,hn->bthn", u.to(dB.dtype), dB)  # (b t h n)
    if h is None:
        h = torch.zeros(batch, H, A.shape[1], dtype=dB.dtype, device=u.device)  # (b h n)
    ys = []
    for dB_u_t in dB_u.unbind(1):  # unbind, not [:, t]: see ssmbench.models.mamba2.ssd_naive
        h = dA * h + dB_u_t  # (REC)
        ys.append(2 * torch.einsum("bhn,hn->bh", h, C).real)  # (OUT), (b h)
    y = torch.stack(ys, dim=1) + u * D  # (b t h)
    return y.to(out_dtype), h


def _real_of_matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Re(x @ y) for complex x ``(..., i, k)`` and y ``(..., k, j)`` as ONE real matmul:
    Re(x y) = Re x Re y - Im x Im y = [Re x, Im x] @ [Re y; -Im y]."""
    return torch.cat([x.real, x.imag], dim=-1) @ torch.cat([y.real, -y.imag], dim=-2)


def s4d_fft(
    u: torch.Tensor,
    log_dt: torch.Tensor,
    A: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """S4D as a convolution (VAN, CONV), with no loop over time.

    1. the powers dA^l for l = 0..T (a Vandermonde matrix), factored: l = c i + j with
       c = ceil(sqrt(T + 1)), i < m, j < c, so that dA^l = dA^(c i) dA^j comes from two
       small tables of exps (each power is two exps and one product away from exact;
       repeated multiplication would compound l roundings);
    2. the kernel K_l = 2 Re(sum_n C'_n dA_n^l), C' = C dB, as one batched matmul
       (i, n) x (n, j) per channel; the initial state's response
       2 Re(sum_n C_n h_init[n] dA_n^(t+1)) rides along as extra rows of the same matmul;
    3. the causal convolution y = K * u by rfft / irfft over 2T points: u sits in the
       second half after T zeros, K in the first half before T zeros, so y_t is output
       T + t and nothing wraps around; plus D u;
    4. the final state h_T = dA^T h_init + dB sum_s dA^(T-1-s) u_s.  The last c m points
       of the padded u are u after c m - T zeros; their point k = c i + j enters with
       dA^(c m - 1 - k) = dA^(c (m-1-i)) dA^(c-1-j): the same two tables reversed, and the
       sum is again a batched matmul, (i, j) x (j, n) per channel.

    Args and returns: as :func:`s4d_naive`.
    """
    _check_shapes(u, log_dt, A, C, D, initial_state, token=False)
    out_dtype = u.dtype
    u, log_dt, A, C, D, h0 = _prepare(u, log_dt, A, C, D, initial_state)
    batch, T, H = u.shape
    dtA, dB = discretise(log_dt, A)

    # 1. Vandermonde powers dA^l, l = c i + j (i < m, j < c, c m >= T + 1)
    c = math.ceil(math.sqrt(T + 1))
    m = math.ceil((T + 1) / c)
    steps = torch.arange(max(c, m), dtype=u.dtype, device=u.device)
    pow_inner = _exp(dtA[..., None] * steps[:c])  # (h n c): dA^j
    pow_outer = _exp(dtA[..., None] * (c * steps[:m]))  # (h n m): dA^(c i)

    # 2. kernel (VAN), plus one row per batch element for the initial state's response
    weights = (2 * C * dB)[:, None]  # (h 1 n): 2 C', C' = C dB (the 2 of 2 Re)
    if h0 is not None:
        weights = torch.cat([weights, (2 * C * h0).transpose(0, 1)], dim=1)  # (h r n), r = 1+b
    rows = weights[:, :, None, :] * pow_outer.transpose(1, 2)[:, None]  # (h r m n)
    powers = _real_of_matmul(rows.flatten(1, 2), pow_inner)  # (h r*m c)
    powers = powers.view(H, -1, m * c)[..., : T + 1]  # (h r T+1): Re(w_r dA^l)
    K = powers[:, 0, :T]  # (h t)

    # 3. causal convolution by FFT (CONV): u after T zeros, K before T zeros
    n_fft = 2 * T
    u_pad = u.new_empty(batch, H, n_fft)  # (b h 2T)
    u_pad[..., :T] = 0
    u_pad[..., T:] = u.transpose(1, 2)
    u_f = torch.fft.rfft(u_pad)  # (b h T+1)
    K_f = torch.fft.rfft(K, n=n_fft)  # (h T+1)
    y = torch.fft.irfft(u_f * K_f, n=n_fft)[..., T:]  # (b h t)
    if h0 is not None:
        y = y + powers[:, 1:, 1:].transpose(0, 1)  # (b h t): 2 Re(C dA^(t+1) h_init)
    y = (u * D).add_(y.transpose(1, 2))  # (b t h), contiguous like u

    # 4. final state: the last c m points of u_pad in blocks of c, against reversed tables
    u_blocks = u_pad[..., n_fft - m * c :].unflatten(-1, (m, c))  # (b h m c)
    u_blocks = u_blocks.transpose(0, 1).reshape(H, batch * m, c)  # (h b*m c), a view if b = 1
    pow_inner_rev = pow_inner.flip(-1)  # (h n c): dA^(c-1-j)
    pow_inner_rev = torch.cat([pow_inner_rev.real, pow_inner_rev.imag], 1)  # (h 2n c)
    inner = u_blocks @ pow_inner_rev.transpose(1, 2)  # (h b*m 2n), real u: Re, Im apart
    inner = torch.complex(*inner.view(H, batch, m, 2, -1).unbind(3))  # (h b m n)
    state = dB * torch.einsum("hbmn,hnm->bhn", inner, pow_outer.flip(-1))  # (b h n)
    if h0 is not None:
        state = state + _exp(T * dtA) * h0  # (b h n): dA^T h_init
    return y.to(out_dtype), state


def s4d_step(
    u: torch.Tensor,
    log_dt: torch.Tensor,
    A: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of S4D (the recurrent form, for decode; both backends share it).

    Args:
        u: ``(b, h)`` real; log_dt: ``(h,)``; A, C: ``(h, n)`` complex; D: ``(h,)``;
            state: ``(b, h, n)`` complex or None for zeros.

    Returns:
        y: ``(b, h)`` in the dtype of u and the new state ``(b, h, n)`` complex64 or
        complex128.
    """
    _check_shapes(u, log_dt, A, C, D, state, token=True)
    out_dtype = u.dtype
    u, log_dt, A, C, D, state = _prepare(u, log_dt, A, C, D, state)
    dtA, dB = discretise(log_dt, A)
    dB_u = dB * u[..., None]  # (b h n)
    state = dB_u if state is None else torch.exp(dtA) * state + dB_u  # (REC)
    y = 2 * torch.einsum("bhn,hn->bh", state, C).real + D * u  # (OUT), (b h)
    return y.to(out_dtype), state


NO_MIXED_FORM = not_offered(
    "torch-mixed",
    "S4D's torch form is an FFT convolution in fp32 (complex kernels; cuFFT has no bf16): "
    "it has no matmuls to run in half precision",
)
NO_FUSED_KERNEL = FAMILY["s4d"].fused_unavailable


def fused_unavailable(device: str | torch.device, phase: str | None = None) -> str:
    """Why the fused backend cannot run: on any device, in any phase, S4D has none."""
    return NO_FUSED_KERNEL


S4D_BACKENDS = {"naive": s4d_naive, "torch": s4d_fft, "torch-mixed": NO_MIXED_FORM}
S4D_STEP_BACKENDS = {"naive": s4d_step, "torch": s4d_step, "torch-mixed": NO_MIXED_FORM}


def random_inputs(draws: RandomDraws, b: int, t: int, h: int, n: int) -> dict[str, torch.Tensor]:
    """Random arguments of :func:`s4d_fft` (its other backends and its step alike) by
    name, drawn from ``draws`` in this order: u ``(b, t, h)`` standard normal; log_dt
    ``(h,)`` uniform in [log 1e-3, log 1e-1] (the block's init); stable modes A ``(h, n)``
    with Re A uniform in [-1, -0.1] and Im A in [0, 3 pi] (S4D-Lin: Im A_k = pi k); C
    ``(h, n)`` complex standard normal parts; D ``(h,)``; initial_state ``(b, h, n)``
    complex.  The complex ones are made from parts drawn in the dtype under test (so a
    reference sees the rounded numbers) and held in complex64 at least: there is no
    complex half."""
    wide = torch.float64 if draws.dtype == torch.float64 else torch.float32

    def complex_of(real: torch.Tensor, imag: torch.Tensor) -> torch.Tensor:
        return torch.complex(real.to(wide), imag.to(wide))

    u = draws.randn(b, t, h)
    log_dt = draws.rand(h, low=math.log(DT_INIT_RANGE[0]), high=math.log(DT_INIT_RANGE[1]))
    A = complex_of(
        -draws.rand(h, n, low=0.1, high=1.0), draws.rand(h, n, low=0.0, high=3 * math.pi)
    )
    C = complex_of(draws.randn(h, n), draws.randn(h, n))
    D = draws.randn(h)
    initial_state = complex_of(draws.randn(b, h, n), draws.randn(b, h, n))
    return {"u": u, "log_dt": log_dt, "A": A, "C": C, "D": D, "initial_state": initial_state}


class S4DMixer(nn.Module):
    """The S4D layer of the S4 repo's standalone ``s4d.py`` (its example block), in our
    ``(b, t, h)`` layout, with the residual and norm left to :class:`ResidualStack`:

        y = s4d(x, log_dt, A, C, D)             H = d_model channels, x used directly
        y = gelu(y)
        out = glu(out_proj(y))                  Linear(H -> 2H) with bias, GLU halves it

    Parameters as the S4 repo stores them, so that every one is real (``Module.to(dtype)``
    would drop the imaginary part of a complex parameter):

        log_dt      (H,)        uniform in log DT_INIT_RANGE = [log 1e-3, log 1e-1]
        log_A_real  (H, n)      A = -exp(log_A_real) + i A_imag; S4D-Lin: Re A = -1/2
        A_imag      (H, n)      S4D-Lin: Im A_k = pi k, k = 0..n-1
        C           (H, n, 2)   complex normal (variance 1/2 per part), as a real view
        D           (H,)        standard normal

    ``n = d_state // 2`` complex modes (the paper's real state size N = d_state, its modes
    in conjugate pairs; an odd d_state is rounded down).  The cache is the 1-tuple
    ``(ssm_state,)``, the complex state ``(b, H, n)`` as a complex tensor.  Dropout (the
    repo's default is 0) is left out.
    """

    def __init__(self, d_model: int, d_state: int = 64):
        super().__init__()
        if d_state < 2:
            raise ValueError(f"d_state={d_state}: S4D needs at least one complex mode (2 states)")
        H, n = d_model, d_state // 2
        self.d_model, self.n_modes = H, n
        dt_min, dt_max = DT_INIT_RANGE
        log_dt = torch.rand(H) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
        self.log_dt = nn.Parameter(log_dt)
        self.log_A_real = nn.Parameter(torch.full((H, n), math.log(0.5)))
        self.A_imag = nn.Parameter(math.pi * torch.arange(n, dtype=torch.float32).repeat(H, 1))
        self.C = nn.Parameter(torch.view_as_real(torch.randn(H, n, dtype=torch.complex64)))
        self.D = nn.Parameter(torch.randn(H))
        self.out_proj = nn.Linear(H, 2 * H)

    def _ssm_params(self) -> tuple[torch.Tensor, ...]:
        """(log_dt, A, C, D) for the operator, A and C complex in float32 at least."""
        # complex half is not supported: half-precision parameters are widened to float32
        log_A_real, A_imag, C = widen(self.log_A_real, self.A_imag, self.C)
        A = torch.complex(-torch.exp(log_A_real), A_imag)  # (H n)
        C = torch.view_as_complex(C.contiguous())  # (H n)
        return self.log_dt, A, C, self.D

    def _output(self, y: torch.Tensor) -> torch.Tensor:
        return F.glu(self.out_proj(F.gelu(y)), dim=-1)  # (... H)

    def forward(self, x: torch.Tensor, backend: str) -> tuple[torch.Tensor, S4DCache]:
        """x: ``(b, t, d_model)`` -> y ``(b, t, d_model)`` and the cache ``(ssm_state,)``,
        ssm_state ``(b, d_model, n)`` complex, that decode continues from."""
        op = pick_backend(S4D_BACKENDS, backend, "S4DMixer")
        y, state = op(x, *self._ssm_params())  # (b t H), (b H n)
        return self._output(y), (state,)

    def step(
        self, x_t: torch.Tensor, cache: S4DCache | None, backend: str
    ) -> tuple[torch.Tensor, S4DCache]:
        """x_t: ``(b, d_model)``, cache from :meth:`forward` or the last step (or None
        for an empty one) -> y_t ``(b, d_model)`` and the updated cache."""
        step = pick_backend(S4D_STEP_BACKENDS, backend, "S4DMixer.step")
        state = None if cache is None else cache[0]
        y, state = step(x_t, *self._ssm_params(), state=state)  # (b H), (b H n)
        return self._output(y), (state,)


def build_mixer(size: Size, d_state: int, layer: int) -> S4DMixer:
    """The S4D layer of a run's size preset: H = d_model channels, n = d_state // 2
    complex modes (``layer`` unused)."""
    return S4DMixer(size.d_model, d_state=d_state)
