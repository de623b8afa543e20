"""The whole-model correctness gate (ssmbench.lm.verify) on every ci entry, fp32 CPU, in an
hf-eager process: greedy tokens, prefill + decode logits, cache sizes against the formula."""

from __future__ import annotations

import pytest
import torch

from ssmbench.lm import backends, zoo
from ssmbench.lm import verify as lm_verify

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
    formula = lm_verify.cache_formula(config, t, b)
    assert formula["kv"] == 2 * 1 * 2 * 16 * t * b  # layers * kv heads * head dim
    assert formula["conv"] == 3 * (2 * 2 * 16 + 4 * 16) * 4 * b
    assert formula["ssm"] == 3 * 4 * 16 * 16 * b


def test_the_gate_fails_when_decode_drops_the_cache(monkeypatch):
    """A decode step that forgets the prefix (a fresh cache each token) must fail the token
    and logits checks, not pass them."""
    original = lm_verify.decode_step

    def forgetful(lm, token, cache):
        _, fresh = lm_verify.prefill(lm, token[:, :0].new_ones((token.shape[0], 1)))
        return original(lm, token, fresh)

    monkeypatch.setattr(lm_verify, "decode_step", forgetful)
    result = lm_verify.verify_lm("qwen2.5-0.5b", "ci", seed=1)
    verdicts = {c["name"]: c["ok"] for c in result["checks"]}
    assert not result["passed"]
    assert verdicts["logits.prefill_decode_vs_forward"] is False
    assert verdicts["cache.formula[T11]"] is True


def test_cache_sizes_refuses_a_cache_without_layers():
    with pytest.raises(TypeError, match="dict has no per-layer list"):
        lm_verify.cache_sizes({"keys": torch.zeros(3)})
