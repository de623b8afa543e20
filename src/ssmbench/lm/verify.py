"""The correctness gate of a whole model before it is timed (as ``ssmbench.verify`` is for
blocks).  :func:`verify_lm` builds a zoo entry with random weights and checks:

1. tokens: greedy ``generate(N)`` gives the tokens of a manual loop (one prefill, then N-1
   one-token decode steps through the cache, argmax each time: :mod:`ssmbench.lm.generate`);
2. logits: prefill of the first P tokens, then teacher-forced decode steps, give the full
   forward's logits at positions P-1 .. T-1, within the depth-aware bound of
   :func:`ssmbench.numerics.logits_tolerance` on the relative RMS error (the elementwise
   allclose of the dtype's row of :data:`ssmbench.numerics.TOLERANCES` is reported beside
   it, ``allclose_ok``, and does not decide);
3. cache: the cache object's tensors after prefill, by kind (attention KV, SSM conv state,
   SSM recurrent state), equal the per-class formula of
   :func:`ssmbench.lm.cache.cache_formula` at two prompt lengths: KV grows linearly with
   T, the SSM states do not change.

The result is JSON-able, shaped like :func:`ssmbench.verify.verify_backend`'s: ``passed``,
``checks`` (one row per comparison), ``logits_tolerance`` (the rule the logits check
ran under, with its basis), ``cache`` and the per-layer ``layers`` report of
:func:`ssmbench.lm.backends.layer_report` (which implementation each layer ran).

:func:`against_eager` is the check an hf-kernels gate adds: its forward logits against a
fresh hf-eager process's (:func:`forward_logits` in each).  :func:`verify_zoo` runs
:func:`verify_lm` on every available entry.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from ssmbench.lm import generate
from ssmbench.lm.backends import blocked, layer_report, run_in_fresh_process, trace_kernels
from ssmbench.lm.build import build
from ssmbench.lm.cache import CACHE_KINDS, cache_formula, cache_sizes
from ssmbench.lm.zoo import ModelEntry, available, entry
from ssmbench.numerics import compare_logits


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
        manual = generate.manual_greedy(lm, prompt, n_new)
    generated = generate.generate_greedy(lm, prompt, n_new)
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
    logits, cache = generate.prefill(lm, prompt)
    stepped = [logits[:, -1]]
    for i in range(prompt_len, ids.shape[1]):
        step, cache = generate.decode_step(lm, ids[:, i : i + 1], cache)
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
        _, cache = generate.prefill(lm, x)
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
