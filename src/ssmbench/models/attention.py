"""Softmax attention (Vaswani et al. 2017): the operator, its decode step, the block mixer.

Two backends of the same operator, side by side:

- ``attention_naive``: as the seed studies wrote it, matmul, causal mask with -inf,
  softmax, matmul; materialises the ``(b, h, t, s)`` score matrix.
- ``attention_torch``: ``torch.nn.functional.scaled_dot_product_attention``, which picks
  a fused (flash or memory-efficient) kernel where one exists.

Layout ``(b, t, h, d)`` in and out; heads-first ``(b, h, t, d)`` only inside a function,
because that is what matmul and SDPA batch over.  Scale ``1 / sqrt(d)`` in both.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ssmbench.config import Size
from ssmbench.models import fused
from ssmbench.models.common import pick_backend

KVCache = tuple[torch.Tensor, torch.Tensor]  # (k_cache, v_cache), each (b, t, h, d)


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


ATTENTION_BACKENDS = {
    "naive": attention_naive,
    "torch": attention_torch,
    "fused": fused.attention_fused,  # FlashAttention-2 (flash_attn, else SDPA's flash kernel)
}


def attention_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cache: KVCache | None = None,
    backend: str = "torch",
) -> tuple[torch.Tensor, KVCache]:
    """One decode step: append this token's key and value, attend to every cached token.

    Args:
        q, k, v: ``(b, h, d)`` for one token.
        cache: ``(k_cache, v_cache)`` each ``(b, s, h, d)``, or None for an empty cache.
        backend: which attention computes the single query (no mask needed: the one
            query is the newest token and may see every cached one).

    Returns:
        y: ``(b, h, d)`` and the cache grown to ``(b, s + 1, h, d)``.  The cache is a
        new tensor each step (torch.cat), which is what simple decode loops do.
    """
    attend = pick_backend(ATTENTION_BACKENDS, backend, "attention_step")
    k, v = k.unsqueeze(1), v.unsqueeze(1)  # (b 1 h d)
    if cache is not None:
        k = torch.cat([cache[0], k], dim=1)  # (b s+1 h d)
        v = torch.cat([cache[1], v], dim=1)  # (b s+1 h d)
    y = attend(q.unsqueeze(1), k, v, causal=False)  # (b 1 h d)
    return y.squeeze(1), (k, v)  # (b h d)


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
        self, x_t: torch.Tensor, cache: KVCache | None, backend: str
    ) -> tuple[torch.Tensor, KVCache]:
        """x_t: ``(b, d_model)``, cache from :meth:`forward` or the last step (or None)
        -> y_t ``(b, d_model)`` and the cache grown by one token."""
        batch = x_t.shape[0]
        qkv = self.qkv_proj(x_t).view(batch, 3, self.n_heads, self.head_dim)  # (b 3 h d)
        q, k, v = qkv.unbind(dim=1)  # 3 x (b h d)
        y_t, cache = attention_step(q, k, v, cache, backend=backend)  # (b h d)
        y_t = self.out_proj(y_t.reshape(batch, self.n_heads * self.head_dim))  # (b d_model)
        return y_t, cache


def build_mixer(size: Size, d_state: int, layer: int) -> AttentionMixer:
    """The attention mixer of a run's size preset (``d_state`` and ``layer`` unused)."""
    return AttentionMixer(size.d_model, size.n_heads, size.head_dim)
