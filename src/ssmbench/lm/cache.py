"""The cache of a whole model, accounted by kind: what its tensors hold and what its
config says they should.

    kv    attention keys and values (grow with the tokens cached)
    conv  an SSM layer's convolution state (its last d_conv inputs; fixed size)
    ssm   an SSM / linear-attention layer's recurrent state (fixed size)

:func:`cache_tensors` walks transformers' cache object layer by layer, :func:`cache_sizes`
adds its elements and bytes up by kind, and :func:`cache_formula` gives, from the config
alone, the elements a prefill of T tokens leaves; the gate (:mod:`ssmbench.lm.verify`)
checks one against the other and the cell (:mod:`ssmbench.lm.cell`) splits its memory
with them.  Imports torch; no other module of :mod:`ssmbench.lm`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

CACHE_KINDS = ("kv", "conv", "ssm")
# the attributes of transformers' cache layers (cache_utils: DynamicLayer keys/values,
# LinearAttentionLayer conv_states/recurrent_states), by kind
CACHE_ATTRS = {"keys": "kv", "values": "kv", "conv_states": "conv", "recurrent_states": "ssm"}


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _tensors(v)


def cache_tensors(cache) -> Iterator[tuple[int, str, torch.Tensor]]:
    """(layer index, kind, tensor) of the cache object's non-empty tensors, each once, in
    layer order."""
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise TypeError(f"{type(cache).__name__} has no per-layer list (`layers`)")
    seen = set()
    for index, layer in enumerate(layers):
        for attr, kind in CACHE_ATTRS.items():
            for t in _tensors(getattr(layer, attr, None)):
                if t.numel() == 0 or id(t) in seen:
                    continue
                seen.add(id(t))
                yield index, kind, t


def cache_sizes(cache) -> dict[str, dict[str, int]]:
    """Elements and bytes of the cache object's tensors by kind, each tensor once."""
    sizes = {kind: {"elements": 0, "bytes": 0} for kind in CACHE_KINDS}
    for _, kind, t in cache_tensors(cache):
        sizes[kind]["elements"] += t.numel()
        sizes[kind]["bytes"] += t.numel() * t.element_size()
    return sizes


def _layer_kinds(config) -> tuple[int, int]:
    """(attention layers, SSM / linear-attention layers) of a config."""
    name = type(config).__name__
    n = config.num_hidden_layers
    if name in ("MambaConfig", "Mamba2Config"):
        return 0, n
    if name == "FalconH1Config":  # attention and Mamba-2 heads side by side in every layer
        return n, n
    if name == "Zamba2Config":  # Mamba-2 in every layer, the shared attention at hybrid ones
        return config.layers_block_type.count("hybrid"), n
    if name == "Qwen3NextConfig":
        kinds = config.layer_types
        return kinds.count("full_attention"), kinds.count("linear_attention")
    return n, 0  # Qwen2, Llama


def cache_formula(config, t: int, batch: int = 1) -> dict[str, int]:
    """Elements of the cache after a prefill of ``t`` tokens, by kind, from the config:

    kv    2 * attention layers * kv_heads * head_dim * t * batch
    conv  SSM layers * conv channels * conv kernel * batch   (the last d_conv inputs)
    ssm   SSM layers * state elements * batch

    with, per class, conv channels and state elements:
    Mamba       E = expand * D;            conv E,            state E * n
    Mamba-2     E = expand * D (heads h, head dim p, groups g, state n): conv E + 2 g n,
                state h * p * n  (Falcon-H1: E = mamba_d_ssm; Zamba2: the mamba_ fields)
    Qwen3-Next  key heads hk (dim dk), value heads hv (dim dv): conv 2 hk dk + hv dv,
                state hv * dk * dv
    """
    name = type(config).__name__
    n_attn, n_ssm = _layer_kinds(config)
    kv = 0
    if n_attn:
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        if name == "Zamba2Config":
            head_dim = config.attention_head_dim  # 2 D / heads: it attends over [x, x_emb]
        else:
            head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv = 2 * n_attn * kv_heads * head_dim * t * batch
    conv = ssm = 0
    if name == "MambaConfig":
        e = config.intermediate_size
        conv, ssm = e * config.conv_kernel, e * config.state_size
    elif name in ("Mamba2Config", "FalconH1Config", "Zamba2Config"):
        if name == "Mamba2Config":
            e, h, p = int(config.expand * config.hidden_size), config.num_heads, config.head_dim
            g, n, k = config.n_groups, config.state_size, config.conv_kernel
        elif name == "FalconH1Config":
            e, h, p = config.mamba_d_ssm, config.mamba_n_heads, config.mamba_d_head
            g, n, k = config.mamba_n_groups, config.mamba_d_state, config.mamba_d_conv
        else:
            e = int(config.mamba_expand * config.hidden_size)
            h, p = config.n_mamba_heads, config.mamba_headdim
            g, n, k = config.mamba_ngroups, config.mamba_d_state, config.mamba_d_conv
        conv, ssm = (e + 2 * g * n) * k, h * p * n
    elif name == "Qwen3NextConfig":
        hk, dk = config.linear_num_key_heads, config.linear_key_head_dim
        hv, dv = config.linear_num_value_heads, config.linear_value_head_dim
        conv, ssm = (2 * hk * dk + hv * dv) * config.linear_conv_kernel_dim, hv * dk * dv
    return {"kv": kv, "conv": n_ssm * conv * batch, "ssm": n_ssm * ssm * batch}
