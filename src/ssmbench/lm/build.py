"""Build a zoo entry as a transformers model with random weights (seeded), from its config.

On the ``meta`` device nothing is allocated: a full-size model is built there to count its
parameters against the published number.  Importing this module imports neither torch nor
transformers; :func:`build` does, so a cell process can block the kernel packages first
(:func:`ssmbench.lm.backends.prepare`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ssmbench.lm.zoo import ModelEntry, entry

if TYPE_CHECKING:
    import torch

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
ATTENTION = "sdpa"


def make_config(model: ModelEntry | str, preset: str = "full"):
    """The transformers config object of ``model`` at ``preset``."""
    import transformers

    model = entry(model) if isinstance(model, str) else model
    kwargs = model.config_kwargs(preset)
    config = getattr(transformers, model.config_class)(**kwargs)
    # Attention through torch's scaled_dot_product_attention (transformers' default where
    # a class supports it): PyTorch's own fused attention, no kernel package, the strong
    # baseline the SSM layers are measured against.  "eager" would materialise the
    # (T x T) scores of every head: 62 s for Qwen2.5-0.5B's prefill at T = 4096 on the
    # 2-core VM, three times Mamba2-130m's, a comparison of bad attention code.
    # Classes without attention layers (Mamba, Mamba-2) refuse it and keep eager, which for
    # them names no attention at all.
    supports_sdpa = getattr(getattr(transformers, model.model_class), "_supports_sdpa", False)
    config._attn_implementation = ATTENTION if supports_sdpa else "eager"
    return config


def build(
    model: ModelEntry | str,
    preset: str = "full",
    device: str | torch.device = "cpu",
    dtype: str = "fp32",
    seed: int = 0,
):
    """The causal LM of ``model`` at ``preset`` on ``device`` in ``dtype``, random weights
    drawn from ``seed`` (transformers' own initialisation), in eval mode."""
    import torch
    import transformers

    model = entry(model) if isinstance(model, str) else model
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {list(DTYPES)}")
    config = make_config(model, preset)
    torch.manual_seed(seed)
    cls = getattr(transformers, model.model_class)
    with torch.device(device):
        lm = cls(config)
    return lm.to(getattr(torch, DTYPES[dtype])).eval()


def count_params(lm) -> int:
    """Parameters, each tensor once: a tied lm_head shares the embedding's tensor, which
    ``parameters()`` yields once, so tied embeddings count once (as the model cards do)."""
    return sum(p.numel() for p in lm.parameters())
