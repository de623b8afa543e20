"""The correctness gate of a whole model before it is timed (as ``ssmbench.verify`` is for
blocks).  :func:`verify_lm` builds a zoo entry with random weights and checks:

1. tokens: greedy ``generate(N)`` gives the tokens of a manual loop (one prefill, then N-1
   one-token decode steps through the cache, argmax each time);
2. logits: prefill of the first P tokens, then teacher-forced decode steps, give the full
   forward's logits at positions P-1 .. T-1, within the depth-aware bound of
   :func:`ssmbench.numerics.logits_tolerance` on the relative RMS error (the elementwise
   allclose of the dtype's row of :data:`ssmbench.numerics.TOLERANCES` is reported beside
   it, ``allclose_ok``, and does not decide);
3. cache: the cache object's tensors after prefill, by kind (attention KV, SSM conv state,
   SSM recurrent state), equal the per-class formula of :func:`cache_formula` at two prompt
   lengths: KV grows linearly with T, the SSM states do not change.

The result is JSON-able, shaped like :func:`ssmbench.verify.verify_backend`'s: ``passed``,
``checks`` (one row per comparison), ``logits_tolerance`` (the rule the logits check
ran under, with its basis), ``cache`` and the per-layer ``layers`` report of
:func:`ssmbench.lm.backends.layer_report` (which implementation each layer ran).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import torch

from ssmbench.lm.backends import blocked, layer_report, trace_kernels
from ssmbench.lm.build import build
from ssmbench.lm.zoo import ModelEntry, entry
from ssmbench.numerics import compare_logits

CACHE_KINDS = ("kv", "conv", "ssm")


def _cache_kwarg(lm) -> str:
    """The name under which this transformers version's forward takes the cache (5.24:
    ``cache``; earlier 5.x: ``past_key_values``, Mamba's ``cache_params``)."""
    params = inspect.signature(lm.forward).parameters
    for name in ("cache", "past_key_values", "cache_params"):
        if name in params:
            return name
    raise TypeError(f"{type(lm).__name__}.forward takes no cache argument")


def _out_cache(out):
    for name in ("cache", "past_key_values", "cache_params"):
        value = getattr(out, name, None)
        if value is not None:
            return value
    raise TypeError(f"{type(out).__name__} returned no cache")


@torch.no_grad()
def prefill(lm, ids: torch.Tensor):
    """(logits (b, t, vocab), cache) of a forward over ``ids`` that fills a new cache."""
    out = lm(input_ids=ids, use_cache=True)
    return out.logits, _out_cache(out)


@torch.no_grad()
def decode_step(lm, token: torch.Tensor, cache):
    """(logits (b, vocab), cache) of one token (b, 1) through ``cache``."""
    out = lm(input_ids=token, use_cache=True, **{_cache_kwarg(lm): cache})
    return out.logits[:, -1], _out_cache(out)


@torch.no_grad()
def manual_greedy(lm, prompt: torch.Tensor, n_new: int) -> torch.Tensor:
    """Greedy tokens (b, n_new) of a prefill and n_new - 1 decode steps."""
    logits, cache = prefill(lm, prompt)
    token = logits[:, -1].argmax(-1, keepdim=True)  # (b, 1)
    tokens = [token]
    for _ in range(n_new - 1):
        logits, cache = decode_step(lm, token, cache)
        token = logits.argmax(-1, keepdim=True)
        tokens.append(token)
    return torch.cat(tokens, dim=1)


@torch.no_grad()
def generate_greedy(lm, prompt: torch.Tensor, n_new: int) -> torch.Tensor:
    """transformers' greedy ``generate``: the n_new tokens after ``prompt``."""
    out = lm.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=n_new,
        min_new_tokens=n_new,  # no stop at a random model's eos
        do_sample=False,
        pad_token_id=0,
    )
    return out[:, prompt.shape[1] :]


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _tensors(v)


# the attributes of transformers' cache layers (cache_utils: DynamicLayer keys/values,
# LinearAttentionLayer conv_states/recurrent_states), by kind
CACHE_ATTRS = {"keys": "kv", "values": "kv", "conv_states": "conv", "recurrent_states": "ssm"}


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


def _check(name: str, ok: bool, **detail) -> dict:
    return {"name": name, "ok": bool(ok), **detail}


def verify_lm(
    model: ModelEntry | str,
    preset: str = "ci",
    device: str = "cpu",
    dtype: str = "fp32",
    seed: int = 0,
    prompt_len: int = 11,
    n_new: int = 6,
    batch: int = 2,
) -> dict:
    """The gate of one model: tokens, logits and cache checks (module docstring)."""
    model = entry(model) if isinstance(model, str) else model
    lm = build(model, preset, device=device, dtype=dtype, seed=seed)
    vocab = lm.config.vocab_size
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (batch, prompt_len + n_new), generator=gen).to(device)
    prompt = ids[:, :prompt_len]
    checks = []

    # 1. greedy generate == the manual loop
    with trace_kernels(lm) as calls:
        manual = manual_greedy(lm, prompt, n_new)
    generated = generate_greedy(lm, prompt, n_new)
    checks.append(
        _check(
            "tokens.generate_vs_manual",
            torch.equal(manual, generated),
            manual=manual.tolist(),
            generate=generated.tolist(),
        )
    )

    # 2. prefill + teacher-forced decode == full forward at positions P-1 .. T-1
    with torch.no_grad():
        full = lm(input_ids=ids, use_cache=False).logits  # (b, T, vocab)
    logits, cache = prefill(lm, prompt)
    stepped = [logits[:, -1]]
    for i in range(prompt_len, ids.shape[1]):
        step, cache = decode_step(lm, ids[:, i : i + 1], cache)
        stepped.append(step)
    stepped = torch.stack(stepped, dim=1)  # (b, n_new, vocab)
    logits_check = compare_logits(
        "logits.prefill_decode_vs_forward",
        full[:, prompt_len - 1 :],
        stepped,
        dtype,
        lm.config.num_hidden_layers,
    )
    checks.append(logits_check)

    # 3. cache after prefill at two lengths: measured == formula, KV linear, SSM constant
    cache_rows = {}
    for t in (prompt_len, 2 * prompt_len):
        x = torch.randint(1, vocab, (batch, t), generator=gen).to(device)
        _, cache = prefill(lm, x)
        measured = cache_sizes(cache)
        expected = cache_formula(lm.config, t, batch)
        cache_rows[t] = {"measured": measured, "formula_elements": expected}
        checks.append(
            _check(
                f"cache.formula[T{t}]",
                all(measured[k]["elements"] == expected[k] for k in CACHE_KINDS),
                measured={k: measured[k]["elements"] for k in CACHE_KINDS},
                formula=expected,
            )
        )
    short, long = (cache_rows[t]["measured"] for t in (prompt_len, 2 * prompt_len))
    checks.append(
        _check(
            "cache.kv_linear_in_T",
            long["kv"]["elements"] == 2 * short["kv"]["elements"],
            kv_elements=[short["kv"]["elements"], long["kv"]["elements"]],
        )
    )
    checks.append(
        _check(
            "cache.ssm_constant_in_T",
            all(long[k] == short[k] for k in ("conv", "ssm")),
            state_elements=[
                short["conv"]["elements"] + short["ssm"]["elements"],
                long["conv"]["elements"] + long["ssm"]["elements"],
            ],
        )
    )
    return {
        "model": model.name,
        "preset": preset,
        # hf-eager when the cell process blocked the kernel packages (backends.prepare)
        "backend": "hf-eager" if blocked() else "unisolated",
        "blocked": blocked(),
        "device": str(device),
        "dtype": dtype,
        "seed": seed,
        "passed": all(c["ok"] for c in checks),
        "checks": checks,
        "logits_tolerance": logits_check["tolerance"],
        "cache": {str(t): row for t, row in cache_rows.items()},
        "layers": layer_report(lm, calls),
    }


def verify_zoo(preset: str = "ci", device: str = "cpu", dtype: str = "fp32", seed: int = 0):
    """:func:`verify_lm` of every available entry: {name: result}."""
    from ssmbench.lm.zoo import available

    return {name: verify_lm(name, preset, device, dtype, seed) for name in available()}


# --- a kernel backend against transformers' own paths ---------------------------------


def forward_logits(
    model: str,
    preset: str,
    device: str,
    dtype: str,
    seed: int,
    out_path: str,
    length: int = 17,
    batch: int = 2,
) -> dict:
    """A full forward's logits over the gate's ids (those :func:`verify_lm` draws from
    ``seed``), saved in float32 to ``out_path``, with this process's layer report: what
    :func:`against_eager` runs once in a fresh hf-eager process and once in its own."""
    lm = build(model, preset, device=device, dtype=dtype, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, lm.config.vocab_size, (batch, length), generator=gen).to(device)
    with torch.no_grad(), trace_kernels(lm) as calls:
        logits = lm(input_ids=ids, use_cache=False).logits
    torch.save(logits.float().cpu(), out_path)
    return {"n_layers": lm.config.num_hidden_layers, "layers": layer_report(lm, calls)}


def against_eager(model: str, preset: str, device: str, dtype: str, seed: int) -> dict:
    """This process's forward logits (with the kernels its backend binds) against a fresh
    hf-eager process's on the same weights and ids, under
    :func:`ssmbench.numerics.logits_tolerance`: the
    check an hf-kernels gate adds (``logits.kernels_vs_eager``).  On a GPU the two differ
    by the kernels' accumulation order; a kernel that computes something else is far
    outside the bound."""
    import tempfile
    from pathlib import Path

    from ssmbench.lm.backends import run_in_fresh_process

    with tempfile.TemporaryDirectory(prefix="ssmbench-eager-") as tmp:
        ref_path, out_path = str(Path(tmp, "eager.pt")), str(Path(tmp, "this.pt"))
        args = dict(model=model, preset=preset, device=device, dtype=dtype, seed=seed)
        eager = run_in_fresh_process(
            "hf-eager", "ssmbench.lm.verify:forward_logits", {**args, "out_path": ref_path}
        )
        mine = forward_logits(**args, out_path=out_path)
        ref, out = torch.load(ref_path), torch.load(out_path)
    row = compare_logits("logits.kernels_vs_eager", ref, out, dtype, mine["n_layers"])
    return {**row, "eager_layers": eager["layers"], "layers": mine["layers"]}
