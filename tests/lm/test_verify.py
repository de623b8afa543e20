"""The whole-model correctness gate (ssmbench.lm.verify) on every ci entry, fp32 CPU, in an
hf-eager process: greedy tokens, prefill + decode logits, cache sizes against the formula."""

from __future__ import annotations

import pytest
import torch

from ssmbench.lm import backends, generate, zoo
from ssmbench.lm import verify as lm_verify
from ssmbench.lm.cache import cache_formula, cache_sizes, cache_tensors
from ssmbench.numerics import LOGITS_BASIS, compare_logits, logits_tolerance

BUILDABLE = zoo.available()
CHECKS = {
    "tokens.generate_vs_manual",
    "logits.prefill_decode_vs_forward",
    "cache.formula[T11]",
    "cache.formula[T22]",
    "cache.kv_linear_in_T",
    "cache.ssm_constant_in_T",
}


@pytest.fixture(scope="module")
def results():
    """verify_zoo in one fresh hf-eager process (about 30 s for the ten entries)."""
    return backends.run_in_fresh_process("hf-eager", "ssmbench.lm.verify:verify_zoo", {})


@pytest.mark.slow
@pytest.mark.parametrize("name", BUILDABLE)
def test_the_gate_passes_on_the_ci_entry(results, name):
    result = results[name]
    failed = [c for c in result["checks"] if not c["ok"]]
    assert result["passed"] and not failed, failed
    assert {c["name"] for c in result["checks"]} == CHECKS
    assert (result["backend"], result["dtype"], result["device"]) == ("hf-eager", "fp32", "cpu")


@pytest.mark.slow
@pytest.mark.parametrize("name", BUILDABLE)
def test_the_cache_has_the_kinds_of_its_layers(results, name):
    family = zoo.entry(name).family
    measured = results[name]["cache"]["11"]["measured"]
    has_kv, has_state = measured["kv"]["elements"] > 0, measured["ssm"]["elements"] > 0
    assert (has_kv, has_state) == {
        "transformer": (True, False),
        "ssm": (False, True),
        "hybrid": (True, True),
    }[family]
    assert measured["kv"]["bytes"] == 4 * measured["kv"]["elements"]  # fp32


@pytest.mark.slow
@pytest.mark.parametrize("name", BUILDABLE)
def test_every_layer_ran_transformers_own_pytorch_functions(results, name):
    layers = results[name]["layers"]
    assert len(layers) == zoo.entry(name).ci["num_hidden_layers"]
    assert not any(layer["kernels"] for layer in layers)
    for layer in layers:
        assert all(impl.startswith("transformers.models.") for impl in layer["ran"].values())
    if zoo.entry(name).family != "transformer":  # each SSM layer ran a scan and a step
        ssm_layers = [layer for layer in layers if layer["ran"]]
        assert ssm_layers and all(len(layer["ran"]) >= 3 for layer in ssm_layers)


def test_cache_formula_of_a_hybrid_counts_each_kind_of_layer():
    from ssmbench.lm.build import make_config

    config = make_config("qwen3-next-gdn", "ci")  # 3 gated-DeltaNet layers, 1 attention
    t, b = 10, 2
    formula = cache_formula(config, t, b)
    assert formula["kv"] == 2 * 1 * 2 * 16 * t * b  # layers * kv heads * head dim
    assert formula["conv"] == 3 * (2 * 2 * 16 + 4 * 16) * 4 * b
    assert formula["ssm"] == 3 * 4 * 16 * 16 * b


def _logits_check(result: dict) -> dict:
    return next(c for c in result["checks"] if c["name"] == "logits.prefill_decode_vs_forward")


def test_the_gate_fails_when_decode_drops_the_cache(monkeypatch):
    """A decode step that forgets the prefix (a fresh cache each token) must fail the
    logits check by orders of magnitude, not pass it."""
    original = generate.decode_step

    def forgetful(lm, token, cache):
        _, fresh = generate.prefill(lm, token[:, :0].new_ones((token.shape[0], 1)))
        return original(lm, token, fresh)

    monkeypatch.setattr(generate, "decode_step", forgetful)
    result = lm_verify.verify_lm("qwen2.5-0.5b", "ci", seed=1)
    verdicts = {c["name"]: c["ok"] for c in result["checks"]}
    assert not result["passed"]
    assert verdicts["logits.prefill_decode_vs_forward"] is False
    assert verdicts["cache.formula[T11]"] is True
    logits = _logits_check(result)
    assert logits["rel_rms_err"] > 1000 * logits["tolerance"]["bound"]


@pytest.mark.parametrize(
    "model, layer, kind",
    [("mamba2-130m", 0, "conv"), ("mamba-130m", 1, "conv"), ("qwen2.5-0.5b", 1, "kv")],
    ids=["mamba2-L0-conv", "mamba-L1-conv", "qwen2.5-L1-kv"],
)
def test_the_gate_fails_when_the_cache_loses_a_layers_state(monkeypatch, model, layer, kind):
    """The prefill hands decode a cache whose ``layer`` has lost its ``kind`` tensors
    (zeroed in place): the logits check fails 100x beyond the depth-aware bound while
    the cache still has the formula's sizes."""
    original = generate.prefill

    def lossy(lm, ids):
        logits, cache = original(lm, ids)
        lost = [t for i, k, t in cache_tensors(cache) if (i, k) == (layer, kind)]
        assert lost, f"layer {layer} has no {kind} tensor"
        for t in lost:
            t.zero_()
        return logits, cache

    monkeypatch.setattr(generate, "prefill", lossy)
    result = lm_verify.verify_lm(model, "ci")
    logits = _logits_check(result)
    assert not result["passed"] and not logits["ok"]
    assert logits["rel_rms_err"] > 100 * logits["tolerance"]["bound"]
    assert all(c["ok"] for c in result["checks"] if c["name"].startswith("cache.formula"))


def test_the_clean_gate_is_far_inside_its_bound_and_records_it():
    result = lm_verify.verify_lm("mamba2-130m", "ci")
    logits = _logits_check(result)
    assert result["passed"] and logits["ok"] and logits["allclose_ok"]
    assert logits["rel_rms_err"] < logits["tolerance"]["bound"] / 100
    assert result["logits_tolerance"] == logits["tolerance"]
    assert result["logits_tolerance"] == {
        "rule": "rel_rms_err <= rtol(dtype) * n_layers",
        "rtol_per_layer": 1e-4,
        "n_layers": 2,
        "bound": 2e-4,
        "basis": LOGITS_BASIS,
    }


def _logits(seed: int = 0) -> torch.Tensor:
    """Random logits (b 2, positions 6, vocab 512) of a full-size model's scale (std 2.8)."""
    return 2.8 * torch.randn(2, 6, 512, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    "rel_err, n_layers, ok",
    [(3.6e-5, 24, True), (1e-3, 24, True), (1e-3, 2, False), (3e-3, 24, False)],
    ids=["mamba130m-full", "deep", "shallow", "past-bound"],
)
def test_the_logits_bound_grows_with_depth(rel_err, n_layers, ok):
    """A relative RMS error of ``rel_err`` passes within 1e-4 per layer; the elementwise
    allclose of the block gate fails them all (its 1e-4 holds for O(1) outputs only)."""
    ref = _logits()
    noise = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1))
    out = ref + rel_err * ref.norm() / noise.norm() * noise
    row = compare_logits("logits", ref, out, "fp32", n_layers)
    assert row["rel_rms_err"] == pytest.approx(rel_err, rel=1e-3)
    assert row["ok"] is ok and row["allclose_ok"] is False
    assert row["tolerance"]["bound"] == pytest.approx(1e-4 * n_layers)


def test_non_finite_logits_fail_and_bad_arguments_are_refused():
    ref = _logits()
    out = ref.clone()
    out[0, 3, 7] = float("nan")
    assert compare_logits("logits", ref, out, "fp32", 24)["ok"] is False
    with pytest.raises(KeyError, match="no tolerance for dtype 'int8'"):
        logits_tolerance("int8", 24)
    with pytest.raises(ValueError, match="n_layers must be positive, got 0"):
        logits_tolerance("fp32", 0)


def test_cache_sizes_refuses_a_cache_without_layers():
    with pytest.raises(TypeError, match="dict has no per-layer list"):
        cache_sizes({"keys": torch.zeros(3)})


def test_a_kernel_backend_is_compared_with_a_fresh_eager_process_on_the_same_ids():
    """`against_eager` runs the reference forward in a fresh hf-eager process and its own
    in this one; with both eager (the CPU case: hf-kernels needs a GPU) the weights and
    ids are the same, so the logits are identical and the row says so, with the bound."""
    from ssmbench.lm.backends import run_in_fresh_process

    args = dict(model="mamba2-130m", preset="ci", device="cpu", dtype="fp32", seed=3)
    row = run_in_fresh_process("hf-eager", "ssmbench.lm.verify:against_eager", args)
    assert row["name"] == "logits.kernels_vs_eager" and row["ok"]
    assert row["rel_rms_err"] == 0.0 and row["max_abs_err"] == 0.0
    assert row["tolerance"]["n_layers"] == len(row["layers"]) == len(row["eager_layers"])
    assert not any(layer["kernels"] for layer in row["layers"] + row["eager_layers"])
