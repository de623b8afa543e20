"""Softmax attention (Vaswani et al. 2017): the operator, its decode step, the block mixer.

Two backends of the same operator, side by side:

- ``attention_naive``: as the seed studies wrote it, matmul, causal mask with -inf,
  softmax, matmul; materialises the ``(b, h, t, s)`` score matrix.
- ``attention_torch``: ``torch.nn.functional.scaled_dot_product_attention``, which picks
  a fused (flash or memory-efficient) kernel where one exists.

and the ``fused`` backend, FlashAttention-2: ``attention_fused`` (``flash_attn_func``,
else SDPA restricted to its flash kernel) and ``attention_step_fused``
(``flash_attn_with_kvcache`` on the preallocated cache, else the torch step), CUDA and
fp16 / bf16 only; :func:`attention_shape_reason` and :func:`fused_unavailable` say where
they cannot run (:mod:`ssmbench.models.kernels` holds what every family's fused wrappers
share).

Layout ``(b, t, h, d)`` in and out; heads-first ``(b, h, t, d)`` only inside a function,
because that is what matmul and SDPA batch over.  Scale ``1 / sqrt(d)`` in both.

Decode keeps a KV cache, in one of two forms:

- ``naive``: a ``(k, v)`` pair that each step concatenates into a new pair one token
  longer (``torch.cat``), as the seed studies' decode loops do: every token copies the
  whole cache, a cost that grows with T and is no part of attention;
- every other backend: a :class:`KVBuffer`, preallocated to a capacity of at least the
  tokens it will hold, into which each step writes its key and value in place, with the
  valid length as data, as serving engines do (transformers' ``StaticCache``,
  FlashAttention's ``flash_attn_with_kvcache``, vLLM's paged cache).  A step reads the
  cache once and writes one token, which is what ``ssmbench.counts`` counts.
"""

from __future__ import annotations

import importlib.metadata
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ssmbench.matrix import Size
from ssmbench.models import kernels
from ssmbench.models.common import BackendUnavailable, RandomDraws, not_offered, pick_backend
from ssmbench.registry import FAMILY

KVCache = tuple[torch.Tensor, torch.Tensor]  # (k_cache, v_cache), each (b, t, h, d)
# backends whose decode step concatenates a new cache each token (the seeds' loop)
CONCAT_BACKENDS = ("naive",)
MIN_CAPACITY = 16  # a buffer started from nothing; it doubles when full


class KVBuffer(NamedTuple):
    """A preallocated KV cache: ``k``, ``v`` each ``(b, capacity, h, d)``, of which the
    first ``length`` tokens are valid.  ``length`` is kept twice: as a Python int, for
    the host's bookkeeping (growing a full buffer, the valid views), and as ``position``,
    a ``(1,)`` int64 tensor on the buffers' device that the step's kernels read, so the
    step launches the same kernels at every length (and a CUDA graph of it replays)."""

    k: torch.Tensor
    v: torch.Tensor
    length: int
    position: torch.Tensor

    @property
    def capacity(self) -> int:
        return self.k.shape[1]

    def valid(self) -> KVCache:
        """The cached tokens, as views ``(b, length, h, d)``."""
        return self.k[:, : self.length], self.v[:, : self.length]


def valid_cache(cache):
    """A layer's cache as comparable tensors: a :class:`KVBuffer`'s valid ``(k, v)``,
    anything else (a ``(k, v)`` pair, an SSM state) as it is."""
    return cache.valid() if isinstance(cache, KVBuffer) else cache


def kv_buffer(cache: KVCache | KVBuffer | None, capacity: int, like: torch.Tensor) -> KVBuffer:
    """``cache`` (a ``(k, v)`` pair, a buffer, or None for an empty cache) in a buffer of
    at least ``capacity`` tokens: one copy, made outside any timed step.  ``like`` is a
    ``(b, h, d)`` token, for an empty cache's shape, dtype and device."""
    if isinstance(cache, KVBuffer):
        if cache.capacity >= capacity:
            return cache
        cache = cache.valid()
    length = 0 if cache is None else cache[0].shape[1]
    b, h, d = like.shape
    # zeros, not empty: a masked slot's weight is 0, and 0 x NaN of uninitialised memory
    # would still be NaN (transformers' StaticCache starts from zeros too)
    k = like.new_zeros(b, max(capacity, length), h, d)  # (b cap h d)
    v = like.new_zeros(b, max(capacity, length), h, d)
    if cache is not None:
        k[:, :length], v[:, :length] = cache
    position = torch.full((1,), length, dtype=torch.int64, device=like.device)
    return KVBuffer(k, v, length, position)


def attention_naive(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
) -> torch.Tensor:
    """Matmul-softmax-matmul attention.

    Args:
        q: ``(b, t, h, d)`` queries; k, v: ``(b, s, h, d)`` keys and values; any float dtype.
        causal: mask key ``s > t`` (aligned at the start; used with t == s).

    Returns:
        y: ``(b, t, h, d)`` in the dtype of q.
    """
    q, k, v = (x.permute(0, 2, 1, 3) for x in (q, k, v))  # (b h t d)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (b h t s)
    if causal:
        T, S = scores.shape[-2:]
        future = torch.ones(T, S, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    y = weights @ v  # (b h t d)
    return y.permute(0, 2, 1, 3)  # (b t h d)


def attention_torch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
) -> torch.Tensor:
    """PyTorch's ``scaled_dot_product_attention``; the same contract as
    :func:`attention_naive`."""
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))  # (b h t d)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (b h t d)
    return y.transpose(1, 2)  # (b t h d)


# --- the fused backend: FlashAttention-2 ------------------------------------------------

FLASH_NEEDS_CUDA = "FlashAttention-2 needs a CUDA device"
FLASH_DTYPES = FAMILY["attention"].fused_dtypes_why  # fp16 and bf16 only


def attention_impl() -> str:
    """Which kernel :func:`attention_fused` runs here: ``"flash_attn <version>"`` where
    the flash-attn package imports, else ``"sdpa-flash"`` (PyTorch's SDPA restricted to its
    FlashAttention-2 backend)."""
    if kernels.installed("flash_attn"):
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
    if q.dtype not in kernels.HALF_DTYPES:
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
    if kernels.installed("flash_attn"):
        flash_attn = kernels.kernel_module("flash_attn", "flash_attn")
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
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: KVBuffer
) -> torch.Tensor:
    """One decode query against a preallocated KV cache (a :class:`KVBuffer`), writing the
    token in place: q, k, v ``(b, h, d)`` -> y ``(b, h, d)``.

    ``flash_attn.flash_attn_with_kvcache`` writes k and v at ``cache_seqlens`` and attends
    to the valid tokens only (the position as an int32 per sequence).  Without flash-attn,
    :func:`attention_step_torch` runs (the same write, then SDPA over the buffer with the
    later slots masked; SDPA's flash kernel takes no mask, so PyTorch picks its
    memory-efficient one).  CUDA, fp16 and bf16 only, as :func:`attention_fused`.
    """
    _flash_check(q, k, v, cache.k)
    if not kernels.installed("flash_attn"):
        return attention_step_torch(q, k, v, cache)
    flash_attn = kernels.kernel_module("flash_attn", "flash_attn")
    seqlens = cache.position.to(torch.int32).expand(q.shape[0]).contiguous()  # (b,)
    tokens = [x.unsqueeze(1) for x in (q, k, v)]  # (b 1 h d)
    y = flash_attn.flash_attn_with_kvcache(
        tokens[0], cache.k, cache.v, k=tokens[1], v=tokens[2], cache_seqlens=seqlens
    )  # (b 1 h d)
    return y.squeeze(1)


def fused_block_reason(head_dim: int, d_state: int) -> str:
    """Why an attention block of ``head_dim`` cannot run FlashAttention-2 ("" when it
    can): d = head_dim (attention has no state)."""
    return attention_shape_reason(head_dim)


# op of a verify shape -> why the kernel cannot take its dims (ssmbench.models.kernels)
FUSED_SHAPE_REASONS = {
    "attention": lambda d, **_: attention_shape_reason(d),
    "attention_step": lambda d, **_: attention_shape_reason(d),
}


def fused_unavailable(device: str | torch.device, phase: str | None = None) -> str:
    """Why FlashAttention-2 cannot run on ``device`` ("" when it can; every phase alike):
    a CUDA device; no package is needed (without flash-attn, SDPA's flash kernel)."""
    return "" if kernels.device_type(device) == "cuda" else FLASH_NEEDS_CUDA


# torch-mixed is not offered: attention's torch backend is mixed precision already
NO_MIXED_FORM = not_offered(
    "torch-mixed",
    "attention's torch backend already runs SDPA in the cell's dtype (fp32 accumulation): "
    "torch-mixed would time the same code; see its torch cells",
)
ATTENTION_BACKENDS = {
    "naive": attention_naive,
    "torch": attention_torch,
    "torch-mixed": NO_MIXED_FORM,
    "fused": attention_fused,  # FlashAttention-2 (flash_attn, else SDPA's flash kernel)
}


def attention_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cache: KVCache | KVBuffer | None = None,
    backend: str = "torch",
) -> tuple[torch.Tensor, KVCache | KVBuffer]:
    """One decode step: add this token's key and value, attend to every cached token.

    Args:
        q, k, v: ``(b, h, d)`` for one token.
        cache: the tokens so far: a :class:`KVBuffer`, a ``(k_cache, v_cache)`` pair each
            ``(b, s, h, d)``, or None for an empty cache.
        backend: which attention computes the single query (no causal mask: the one query
            is the newest token and may see every cached one).

    Returns:
        y: ``(b, h, d)`` and the cache holding ``s + 1`` tokens.  ``naive`` concatenates a
        new ``(k, v)`` pair (a copy of the whole cache each token); every other backend
        writes the token in place into a :class:`KVBuffer` (a pair or None given is put in
        one first; a full buffer doubles) and returns the buffer with its length advanced:
        the returned cache shares the buffers of the one given, so step on from the newest.
    """
    if backend in CONCAT_BACKENDS:
        attend = pick_backend(ATTENTION_BACKENDS, backend, "attention_step")
        k, v = k.unsqueeze(1), v.unsqueeze(1)  # (b 1 h d)
        if cache is not None:
            k_cache, v_cache = cache.valid() if isinstance(cache, KVBuffer) else cache
            k = torch.cat([k_cache, k], dim=1)  # (b s+1 h d)
            v = torch.cat([v_cache, v], dim=1)  # (b s+1 h d)
        y = attend(q.unsqueeze(1), k, v, causal=False)  # (b 1 h d)
        return y.squeeze(1), (k, v)  # (b h d)
    if backend not in ATTENTION_STEP_BACKENDS and backend != "compile":
        pick_backend(ATTENTION_BACKENDS, backend, "attention_step")  # raises, naming them all
    step = pick_backend(ATTENTION_STEP_BACKENDS, backend, "attention_step")
    length = (
        0 if cache is None else (cache.length if isinstance(cache, KVBuffer) else cache[0].shape[1])
    )
    if not isinstance(cache, KVBuffer) or cache.capacity <= length:
        cache = kv_buffer(cache, max(2 * length, MIN_CAPACITY, length + 1), like=k)
    y = step(q, k, v, cache)  # (b h d), writes k, v at cache.position
    return y, KVBuffer(cache.k, cache.v, cache.length + 1, cache.position + 1)


def attention_step_torch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: KVBuffer
) -> torch.Tensor:
    """Write the token at ``cache.position`` in place, then one query against the buffer
    by SDPA with the positions past it masked out: q, k, v ``(b, h, d)`` -> y ``(b, h, d)``.
    The mask is made from ``position`` on the device, so the kernels are the same at every
    length; the buffer is read once, to its capacity (the cells size it to T + 1)."""
    cache.k.index_copy_(1, cache.position, k.unsqueeze(1))  # (b cap h d), one token written
    cache.v.index_copy_(1, cache.position, v.unsqueeze(1))
    slots = torch.arange(cache.capacity, device=k.device)
    visible = (slots <= cache.position)[None]  # (1 cap): the cached tokens and this one
    q_, k_, v_ = q.unsqueeze(2), cache.k.transpose(1, 2), cache.v.transpose(1, 2)  # (b h . d)
    y = F.scaled_dot_product_attention(q_, k_, v_, attn_mask=visible)  # (b h 1 d)
    return y.squeeze(2)  # (b h d)


ATTENTION_STEP_BACKENDS = {
    "torch": attention_step_torch,
    "torch-mixed": NO_MIXED_FORM,
    # flash_attn_with_kvcache, else the torch step (SDPA) on CUDA in half precision
    "fused": attention_step_fused,
}


def random_inputs(draws: RandomDraws, b: int, t: int, h: int, d: int) -> dict[str, torch.Tensor]:
    """Random q, k, v ``(b, t, h, d)`` of :func:`attention_torch` (its other backends and
    its step alike), standard normal, drawn from ``draws`` in that order."""
    q, k, v = (draws.randn(b, t, h, d) for _ in range(3))
    return {"q": q, "k": k, "v": v}


class AttentionMixer(nn.Module):
    """Multi-head self-attention as a sequence mixer: fused qkv projection, the
    operator, output projection.  No positional encoding: the benchmark measures the
    mixer, and rotary embeddings would not change its cost class.

    Inner width ``n_heads * head_dim``; no biases (as in most recent LMs).
    """

    def __init__(self, d_model: int, n_heads: int, head_dim: int):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = head_dim
        self.qkv_proj = nn.Linear(d_model, 3 * n_heads * head_dim, bias=False)
        self.out_proj = nn.Linear(n_heads * head_dim, d_model, bias=False)

    def forward(self, x: torch.Tensor, backend: str) -> tuple[torch.Tensor, KVCache]:
        """x: ``(b, t, d_model)`` -> y ``(b, t, d_model)`` and the KV cache
        ``(k, v)`` each ``(b, t, h, d)``."""
        attend = pick_backend(ATTENTION_BACKENDS, backend, "AttentionMixer")
        batch, T, _ = x.shape
        qkv = self.qkv_proj(x).view(batch, T, 3, self.n_heads, self.head_dim)  # (b t 3 h d)
        q, k, v = qkv.unbind(dim=2)  # 3 x (b t h d)
        y = attend(q, k, v, causal=True)  # (b t h d)
        y = self.out_proj(y.reshape(batch, T, self.n_heads * self.head_dim))  # (b t d_model)
        return y, (k.contiguous(), v.contiguous())  # own storage, not views of qkv

    def step(
        self, x_t: torch.Tensor, cache: KVCache | KVBuffer | None, backend: str
    ) -> tuple[torch.Tensor, KVCache | KVBuffer]:
        """x_t: ``(b, d_model)``, cache from :meth:`forward` or the last step (or None)
        -> y_t ``(b, d_model)`` and the cache holding one more token
        (:func:`attention_step`)."""
        batch = x_t.shape[0]
        qkv = self.qkv_proj(x_t).view(batch, 3, self.n_heads, self.head_dim)  # (b 3 h d)
        q, k, v = qkv.unbind(dim=1)  # 3 x (b h d)
        y_t, cache = attention_step(q, k, v, cache, backend=backend)  # (b h d)
        y_t = self.out_proj(y_t.reshape(batch, self.n_heads * self.head_dim))  # (b d_model)
        return y_t, cache

    def random_cache(self, cache: KVCache, seq_len: int, generator: torch.Generator) -> KVCache:
        """Keys and values of ``seq_len`` tokens, standard normal, shaped and typed as the
        pair ``cache`` of any prefill: ``(b, seq_len, h, d)`` each."""
        k = cache[0]
        b, _, h, d = k.shape
        return tuple(
            torch.randn(b, seq_len, h, d, generator=generator, dtype=k.dtype).to(k.device)
            for _ in range(2)
        )

    def decode_cache(self, cache: KVCache, capacity: int, backend: str) -> KVCache | KVBuffer:
        """The cache :meth:`step` decodes from with ``backend``: the prefill's pair as is
        for the concatenating ``naive`` loop, else in a :class:`KVBuffer` of ``capacity``
        tokens (one copy, before any timed step)."""
        if backend in CONCAT_BACKENDS:
            return cache
        return kv_buffer(cache, capacity, like=cache[0][:, 0])


def build_mixer(size: Size, d_state: int, layer: int) -> AttentionMixer:
    """The attention mixer of a run's size preset (``d_state`` and ``layer`` unused)."""
    return AttentionMixer(size.d_model, size.n_heads, size.head_dim)
