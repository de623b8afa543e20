"""The core sequence operators as pure functions, one ``backend=`` switch each.

Same names, argument order and layouts as the NumPy references in
:mod:`ssmbench.reference`; the implementations live with their model family in
:mod:`ssmbench.models`, and each op dispatches through that family's one dict of
backends.  An unknown backend raises ValueError listing the known ones.

Shapes (b batch, t time, h heads, d channels or head dim, p head dim, g groups of B and
C, n state size, r rotation angles); each op returns its output and final state, and its
``_step`` takes one token (no t axis) and a state or cache (None: empty):

- ``attention(q, k, v, causal=True)``: q, k, v ``(b, t, h, d)`` -> ``(b, t, h, d)``.
- ``selective_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state)``
  (Mamba-1): u, delta, z ``(b, t, d)``; A ``(d, n)``; B, C ``(b, t, n)``; D, delta_bias
  ``(d,)``; state ``(b, d, n)``.
- ``ssd(x, dt, A, B, C, D, chunk_size, initial_state)`` (Mamba-2): x ``(b, t, h, p)``; dt
  ``(b, t, h)``; A, D ``(h,)``; B, C ``(b, t, g, n)``; state ``(b, h, p, n)``.
- ``mamba3(x, dt, A, B, C, theta, lam, D, chunk_size, initial_state)``: as ``ssd`` but A
  ``(b, t, h)`` (a decay rate per token and head), plus theta ``(b, t, h, r)`` and lam
  ``(b, t, h)``; the state a ``Mamba3State``.
- ``delta_rule(q, k, v, beta, g, chunk_size, initial_state, scale)`` ((Gated) DeltaNet): q,
  k ``(b, t, h, k)``; v ``(b, t, h, v)``; beta, g ``(b, t, h)``; state ``(b, h, k, v)``;
  scale multiplies the queries.
- ``s4d(u, log_dt, A, C, D, initial_state)``: u ``(b, t, h)``; log_dt, D ``(h,)``; A, C
  complex ``(h, n)``; state ``(b, h, n)`` complex.
"""

from __future__ import annotations

import torch

from ssmbench.models.attention import ATTENTION_BACKENDS, KVCache
from ssmbench.models.attention import attention_step as _attention_step
from ssmbench.models.common import pick_backend
from ssmbench.models.mamba import SCAN_BACKENDS, SCAN_STEP_BACKENDS


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True, backend: str = "torch"
) -> torch.Tensor:
    """Softmax attention, scale ``1 / sqrt(d)``: q, k, v ``(b, t, h, d)`` -> ``(b, t, h, d)``."""
    return pick_backend(ATTENTION_BACKENDS, backend, "attention")(q, k, v, causal=causal)


def attention_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cache: KVCache | None = None,
    backend: str = "torch",
) -> tuple[torch.Tensor, KVCache]:
    """One decode token: q, k, v ``(b, h, d)``, cache ``(k, v)`` each ``(b, s, h, d)`` or
    None -> y ``(b, h, d)`` and the cache grown to ``s + 1`` tokens."""
    return _attention_step(q, k, v, cache, backend=backend)


def selective_scan(
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
    backend: str = "torch",
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mamba-1 selective scan -> ``(y (b, t, d), final_state (b, d, n))``; see
    :func:`ssmbench.reference.selective_scan` for the semantics.  ``chunk_size`` is used
    by the ``torch`` backend only."""
    scan = pick_backend(SCAN_BACKENDS, backend, "selective_scan")
    return scan(
        u,
        delta,
        A,
        B,
        C,
        D=D,
        z=z,
        delta_bias=delta_bias,
        delta_softplus=delta_softplus,
        initial_state=initial_state,
        chunk_size=chunk_size,
    )


def selective_scan_step(
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
    backend: str = "torch",
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the selective scan: u, delta, z ``(b, d)``; B, C ``(b, n)``; state
    ``(b, d, n)`` or None -> ``(y (b, d), state (b, d, n))``."""
    step = pick_backend(SCAN_STEP_BACKENDS, backend, "selective_scan_step")
    return step(
        u,
        delta,
        A,
        B,
        C,
        D=D,
        z=z,
        delta_bias=delta_bias,
        delta_softplus=delta_softplus,
        state=state,
    )


# The families below live in their own modules, imported on first use.


def _family(name: str):
    import importlib

    return importlib.import_module(f"ssmbench.models.{name}")


def ssd(x, dt, A, B, C, D=None, chunk_size=64, initial_state=None, backend="torch"):
    """Mamba-2 SSD: x ``(b, t, h, p)``; dt ``(b, t, h)`` positive; A ``(h,)`` negative;
    B, C ``(b, t, g, n)``; D ``(h,)``; state ``(b, h, p, n)`` -> ``(y (b, t, h, p), state)``.
    See :func:`ssmbench.reference.ssd`."""
    fn = pick_backend(_family("mamba2").SSD_BACKENDS, backend, "ssd")
    return fn(x, dt, A, B, C, D=D, chunk_size=chunk_size, initial_state=initial_state)


def ssd_step(x, dt, A, B, C, D=None, state=None, backend="torch"):
    """One token of SSD: x ``(b, h, p)``; dt ``(b, h)``; B, C ``(b, g, n)``; state
    ``(b, h, p, n)`` or None -> ``(y (b, h, p), state)``."""
    fn = pick_backend(_family("mamba2").SSD_STEP_BACKENDS, backend, "ssd_step")
    return fn(x, dt, A, B, C, D=D, state=state)


def mamba3(x, dt, A, B, C, theta, lam, D=None, chunk_size=64, initial_state=None, backend="torch"):
    """Mamba-3 SISO: x ``(b, t, h, p)``; dt ``(b, t, h)`` positive; A ``(b, t, h)``
    negative, per token and head (not per head as :func:`ssd`'s); B, C ``(b, t, g, n)``;
    theta ``(b, t, h, r)`` angle rates, ``2 r <= n``; lam ``(b, t, h)`` in [0, 1]
    (trapezoidal weight); D ``(h,)``; state a ``Mamba3State`` (or a bare ``(b, h, p, n)``
    SSM state) -> ``(y (b, t, h, p), Mamba3State)``.  See
    :func:`ssmbench.reference.mamba3`."""
    fn = pick_backend(_family("mamba3").MAMBA3_BACKENDS, backend, "mamba3")
    return fn(x, dt, A, B, C, theta, lam, D=D, chunk_size=chunk_size, initial_state=initial_state)


def mamba3_step(x, dt, A, B, C, theta, lam, D=None, state=None, backend="torch"):
    """One token of Mamba-3: x ``(b, h, p)``; dt, A, lam ``(b, h)``; B, C ``(b, g, n)``;
    theta ``(b, h, r)``; D ``(h,)``; state a ``Mamba3State`` or None -> ``(y (b, h, p),
    Mamba3State)`` (the state also carries what the trapezoidal rule needs from the
    previous token; see :mod:`ssmbench.models.mamba3`)."""
    fn = pick_backend(_family("mamba3").MAMBA3_STEP_BACKENDS, backend, "mamba3_step")
    return fn(x, dt, A, B, C, theta, lam, D=D, state=state)


def delta_rule(
    q, k, v, beta, g=None, chunk_size=64, initial_state=None, scale=1.0, backend="torch"
):
    """(Gated) DeltaNet: q, k ``(b, t, h, k)``; v ``(b, t, h, v)``; beta ``(b, t, h)``;
    g ``(b, t, h)`` log-decay or None; state ``(b, h, k, v)`` -> ``(o (b, t, h, v), state)``;
    the queries scaled by ``scale``.  See :func:`ssmbench.reference.delta_rule` (of the
    scaled queries)."""
    fn = pick_backend(_family("deltanet").DELTA_RULE_BACKENDS, backend, "delta_rule")
    return fn(q, k, v, beta, g=g, chunk_size=chunk_size, initial_state=initial_state, scale=scale)


def delta_rule_step(q, k, v, beta, g=None, state=None, scale=1.0, backend="torch"):
    """One token of the delta rule: q, k ``(b, h, k)``; v ``(b, h, v)``; beta, g ``(b, h)``;
    the query scaled by ``scale``."""
    fn = pick_backend(_family("deltanet").DELTA_RULE_STEP_BACKENDS, backend, "delta_rule_step")
    return fn(q, k, v, beta, g=g, state=state, scale=scale)


def s4d(u, log_dt, A, C, D, initial_state=None, backend="torch"):
    """S4D: u ``(b, t, h)``; log_dt ``(h,)``; A, C complex ``(h, n)``; D ``(h,)``; state
    ``(b, h, n)`` complex -> ``(y (b, t, h), state)``.  See :func:`ssmbench.reference.s4d`."""
    fn = pick_backend(_family("s4d").S4D_BACKENDS, backend, "s4d")
    return fn(u, log_dt, A, C, D, initial_state=initial_state)


def s4d_step(u, log_dt, A, C, D, state=None, backend="torch"):
    """One token of S4D: u ``(b, h)``; state ``(b, h, n)`` complex or None."""
    fn = pick_backend(_family("s4d").S4D_STEP_BACKENDS, backend, "s4d_step")
    return fn(u, log_dt, A, C, D, state=state)
