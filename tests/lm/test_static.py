"""The hf-static backend (ssmbench.lm.static): which classes it takes, its gate (static
greedy tokens == the eager loop's), and whole cells on a CPU through the tests' opt-in
(SSMBENCH_LM_STATIC_ON_CPU=1: the static cache, its prefill and the decode loop, the step
not compiled), ci size, fp32."""

from __future__ import annotations

import pytest
import torch

from ssmbench.lm import backends, static
from ssmbench.lm.cache import cache_formula, cache_sizes
from ssmbench.lm.cell import LMCellSpec, run_lm_cell
from ssmbench.lm.generate import manual_greedy

TIMING = {"warmup": 1, "min_samples": 3, "max_samples": 6, "min_time_s": 0.0, "max_time_s": 2.0}
TIMING["timeout_s"] = 90
T, N = 21, 5


def spec(**kw) -> dict:
    base = dict(model="qwen2.5-0.5b", backend="hf-static", phase="decode", batch=2, seq_len=T)
    base.update(new_tokens=N, dtype="fp32", device="cpu", preset="ci", timing=TIMING)
    return {**base, "energy_window_s": 0.0, **kw}


@pytest.fixture
def on_cpu(monkeypatch):
    monkeypatch.setenv(static.STATIC_ON_CPU, "1")


def test_on_cpu_hf_static_needs_the_opt_in(monkeypatch):
    monkeypatch.delenv(static.STATIC_ON_CPU, raising=False)
    ok, why = backends.availability("qwen2.5-0.5b", "hf-static", "cpu")
    assert not ok and why.startswith("hf-static on cpu: ") and why.endswith("GPU only")
    assert "SSMBENCH_LM_STATIC_ON_CPU=1" in why
    monkeypatch.setenv(static.STATIC_ON_CPU, "yes")  # only "1" opts in
    assert not backends.availability("qwen2.5-0.5b", "hf-static", "cpu")[0]


@pytest.mark.parametrize(
    "name, available, why",
    [
        ("qwen2.5-0.5b", True, "Qwen2ForCausalLM._can_compile_fullgraph, attention layers only"),
        ("llama-3.2-1b", True, "LlamaForCausalLM._can_compile_fullgraph"),
        ("mamba-130m", False, "MambaForCausalLM compilable with a static cache"),
        ("falcon-h1-0.5b", False, "FalconH1ForCausalLM compilable"),
        ("zamba2-1.2b", False, "Zamba2ForCausalLM compilable"),
        ("mamba2-130m", False, "Mamba2ForCausalLM (ssm) keeps fixed-size SSM"),
        ("qwen3-next-gdn", False, "Qwen3NextForCausalLM (hybrid) keeps fixed-size SSM"),
    ],
)
@pytest.mark.parametrize("device", ["cuda", "cpu-opt-in"])
def test_hf_static_takes_the_attention_classes_only(monkeypatch, name, available, why, device):
    if device == "cpu-opt-in":
        monkeypatch.setenv(static.STATIC_ON_CPU, "1")
    ok, reason = backends.availability(name, "hf-static", device.split("-")[0])
    assert ok is available and why in reason


@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "llama-3.2-1b"])
def test_static_greedy_tokens_equal_the_eager_loop(name):
    from ssmbench.lm.build import build

    lm = build(name, "ci", seed=3)
    check = static.static_tokens_check(lm, "cpu", seed=3, prompt_len=13, n_new=7, batch=3)
    assert check["ok"] and check["static"] == check["eager"], check
    assert check["logits"]["rel_rms_err"] < check["logits"]["tolerance"]["bound"] / 100
    assert len(check["static"]) == 3 and len(check["static"][0]) == 7
    assert check["static_mode"] == static.CPU_MODE


def test_the_static_cache_is_preallocated_and_reused_across_rounds():
    from ssmbench.lm.build import build

    lm = build("qwen2.5-0.5b", "ci")
    prompt = torch.randint(1, 512, (2, T), generator=torch.Generator().manual_seed(0))
    decoder = static.StaticDecoder(lm, T + N, "cpu")
    with torch.inference_mode():
        first = decoder.greedy(prompt, N)
        keys = [layer.keys for layer in decoder.cache.layers]
        again = decoder.greedy(prompt, N)  # prefill resets the same tensors
    assert torch.equal(first, again)
    assert all(a is b.keys for a, b in zip(keys, decoder.cache.layers, strict=True))
    sizes = cache_sizes(decoder.cache)
    assert sizes["kv"]["elements"] == cache_formula(lm.config, T + N, 2)["kv"]
    assert keys[0].shape[2] == T + N


def test_the_static_decoder_refuses_what_does_not_fit():
    from ssmbench.lm.build import build

    lm = build("qwen2.5-0.5b", "ci")
    decoder = static.StaticDecoder(lm, 8, "cpu")
    with pytest.raises(RuntimeError, match="StaticDecoder.step before prefill"):
        decoder.step()
    with pytest.raises(ValueError, match="a prompt of 8 tokens leaves no room in a static "):
        decoder.prefill(torch.ones(1, 8, dtype=torch.long))
    with torch.inference_mode():
        decoder.prefill(torch.ones(1, 6, dtype=torch.long))
        decoder.step()
        decoder.step()
        with pytest.raises(RuntimeError, match="the static cache is full: max_cache_len=8"):
            decoder.step()


def test_a_static_decode_that_loses_its_cache_fails_the_gate_and_is_never_timed(
    on_cpu, monkeypatch
):
    """A step that finds the static cache wiped (reset after the prefill): its logits
    differ from the eager loop's (a random ci model's tokens may not), the cell is failed,
    nothing is timed."""
    original = static.StaticDecoder._inputs

    def wiped(self, ids, start):
        if ids.shape[1] == 1:
            self.cache.reset()
        return original(self, ids, start)

    monkeypatch.setattr(static.StaticDecoder, "_inputs", wiped)
    r = run_lm_cell(LMCellSpec.from_dict(spec()))
    assert r.status == "failed", r.reason
    assert r.reason.startswith("hf-static gate failed for qwen2.5-0.5b: tokens equal ")
    assert r.reason.endswith("(bound 0.0002) against the eager loop: not timed")
    assert r.verify["passed"] and r.verify["static"]["ok"] is False
    logits = r.verify["static"]["logits"]
    assert logits["rel_rms_err"] > 100 * logits["tolerance"]["bound"]
    assert r.samples_ms == [] and r.peak_bytes is None


@pytest.fixture(scope="module")
def measured():
    """A decode and a prefill hf-static cell and an hf-eager decode cell of the same model,
    in one fresh process with the CPU opt-in (~15 s)."""
    specs = [spec(), spec(phase="prefill", new_tokens=1, batch=1), spec(backend="hf-eager")]
    mp = pytest.MonkeyPatch()
    mp.setenv(static.STATIC_ON_CPU, "1")
    try:
        records = backends.run_in_fresh_process(
            "hf-static", "ssmbench.lm.cell:run_lm_cells", {"specs": specs, "threads": 1}
        )
    finally:
        mp.undo()
    return dict(zip(("decode", "prefill", "eager"), records, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_a_static_cell_is_measured_after_both_gates(measured, phase):
    r = measured[phase]
    assert r["status"] == "ok", r["reason"]
    assert r["verify"]["passed"] and r["verify"]["static"]["ok"]
    assert f"static_mode: {static.CPU_MODE}" in r["notes"]
    assert r["n_samples"] == len(r["samples_ms"]) >= TIMING["min_samples"]
    if phase == "decode":
        assert r["n_samples"] % (N - 1) == 0 and 0 < r["tpot_ms_median"] <= r["tpot_ms_p95"]
        assert any(n.startswith("end-to-end check not run for hf-static") for n in r["notes"])
        assert r["e2e_samples_ms"] == []
    else:
        assert 0 < r["ttft_ms_median"] <= r["ttft_ms_p95"] and r["tpot_ms_median"] is None


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_the_static_cache_is_the_formula_at_max_length(measured, phase):
    """cache = the bytes preallocated for T + N tokens (kv heads 2, head dim 16, 2 layers,
    fp32), whatever the steps; the split still adds up."""
    r = measured[phase]
    n_new = N if phase == "decode" else 1
    kv_bytes = 4 * 2 * 2 * 2 * 16 * (T + n_new) * r["batch"]
    assert r["cache_bytes"] == r["cache_kv_bytes"] == r["cache_formula_bytes"] == kv_bytes
    assert r["cache_formula_ok"]
    assert f"max_cache_len = T + N = {T + n_new} tokens" in " ".join(r["notes"])
    assert r["weights_bytes"] + r["cache_bytes"] + r["activations_bytes"] == r["peak_bytes"]


@pytest.mark.slow
def test_the_eager_cell_of_the_same_model_keeps_t_tokens(measured):
    """The DynamicCache of hf-eager holds the T prompt tokens after prefill; the static
    one N more, preallocated."""
    eager, static_r = measured["eager"], measured["decode"]
    assert eager["status"] == "ok", eager["reason"]
    assert static_r["cache_bytes"] == eager["cache_bytes"] * (T + N) / T


def test_greedy_of_the_static_decoder_matches_manual_greedy_after_a_longer_round():
    """One decoder, rounds of different prompt lengths (the cache reset between them)."""
    from ssmbench.lm.build import build

    lm = build("llama-3.2-1b", "ci")
    decoder = static.StaticDecoder(lm, 24, "cpu")
    gen = torch.Generator().manual_seed(5)
    with torch.inference_mode():
        for t in (17, 9):
            prompt = torch.randint(1, 512, (2, t), generator=gen)
            assert torch.equal(decoder.greedy(prompt, 6), manual_greedy(lm, prompt, 6))


def test_the_static_step_traces_as_one_graph():
    """What CUDA graphs need of the step, checked without a GPU: dynamo (its ``eager``
    backend: tracing only, no code generation) takes the whole step as one graph
    (``fullgraph=True`` raises at a graph break), and a second round of the same decoder
    reuses it: no recompilation as the position moves."""
    from ssmbench.lm.build import build

    lm = build("qwen2.5-0.5b", "ci")
    decoder = static.StaticDecoder(lm, 20, "cpu")
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()  # earlier tests' compiles count there too
    decoder.forward = torch.compile(lm.forward, backend="eager", fullgraph=True)
    prompt = torch.randint(1, 512, (2, 11), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        tokens = [decoder.greedy(prompt, 8) for _ in range(2)]
        expected = manual_greedy(lm, prompt, 8)
    assert all(torch.equal(t, expected) for t in tokens)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
