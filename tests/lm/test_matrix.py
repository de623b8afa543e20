"""The whole-model matrix of a preset (``lm``): cells, gates, profiles, the refusals of a
bad one, the paths of its outputs and its cost floor.  No torch, no transformers."""

from __future__ import annotations

import copy

import pytest

from ssmbench import budget, paths, registry
from ssmbench import config as sbconfig
from ssmbench.lm import zoo
from ssmbench.lm.matrix import LMCell


def plan_of(preset: str, **overrides) -> sbconfig.Plan:
    return sbconfig.plan(sbconfig.load(overrides={"preset": preset, **overrides}))


def test_the_lm_ci_preset_covers_every_class_of_the_zoo_at_ci_size():
    plan = plan_of("lm-ci")
    assert plan.kind == "lm" and plan.cells == () and plan.size is None
    assert plan.lm.size == "ci"
    prefill_models = {c.model for c in plan.lm.cells if c.phase == "prefill"}
    assert prefill_models == set(zoo.entries())  # Hymba too: its cells say why they can't run
    decode_families = {zoo.entry(c.model).family for c in plan.lm.cells if c.phase == "decode"}
    assert decode_families == set(zoo.FAMILIES)  # a KV cache, SSM states, and both
    # a prefill cell makes one token; a decode cell the sweep's N
    assert {c.new_tokens for c in plan.lm.cells if c.phase == "prefill"} == {1}
    assert {c.new_tokens for c in plan.lm.cells if c.phase == "decode"} == {4}
    # one gate per (model, backend, dtype), whatever the number of cells
    assert len(plan.lm.verified) == len({(c.model, c.backend, c.dtype) for c in plan.lm.cells})
    assert len(plan.lm.profiled) == 1
    assert set(plan.figures) == set(registry.figures_of("lm"))
    assert {s.table for s in plan.figures.values()} == {"lm", "lm_ops", "claims"}


def test_lm_cpu_times_an_ssm_and_a_transformer_at_the_issues_lengths():
    plan = plan_of("lm-cpu")
    pair = {"mamba2-130m", "qwen2.5-0.5b"}  # the crossover's two sides
    for phase in ("prefill", "decode"):
        for t in (1024, 4096):
            found = {c.model for c in plan.lm.cells if c.phase == phase and c.seq_len == t}
            assert pair <= found, (phase, t)
    # decode throughput at batch 1 and 8 (a CPU's prefill runs at its batch-1 rate)
    assert {c.batch for c in plan.lm.cells if c.phase == "decode"} == {1, 8}
    assert {zoo.entry(c.model).family for c in plan.lm.cells} == {"ssm", "transformer"}


def test_lm_gpu_runs_every_backend_up_to_131072_and_qwen3_next_reduced():
    plan = plan_of("lm-gpu")
    assert plan.device == "cuda" and plan.lm.size == "reduced"
    assert {c.backend for c in plan.lm.cells} == {"hf-eager", "hf-kernels", "hf-static"}
    assert max(c.seq_len for c in plan.lm.cells) == 131072
    assert zoo.entry("qwen3-next-gdn").reduced  # what `reduced` times for it


def test_a_block_preset_has_no_lm_cells_and_keeps_its_figures():
    plan = plan_of("ci")
    assert plan.kind == "blocks" and plan.lm.cells == ()
    assert not any(spec.lm for spec in plan.figures.values())


BLOCK_SWEEPS = sbconfig.load()["presets"]["ci"]["sweeps"]


def _bad(mutate, preset: str = "lm-ci") -> str:
    config = copy.deepcopy(sbconfig.load(overrides={"preset": preset}))
    mutate(config["presets"][preset])
    with pytest.raises(sbconfig.ConfigError) as error:
        sbconfig.plan(config)
    return str(error.value)


def _sweep(key, value, index=0):
    return lambda p: p["lm"]["sweeps"][index].__setitem__(key, value)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            _sweep("models", ["mamba-131m"]),
            "presets.lm-ci.lm.sweeps[0].models: 'mamba-131m' is not in models.yaml (known: "
            "qwen2.5-0.5b,",
        ),
        (_sweep("backends", ["torch"]), "'torch' is not one of ['hf-eager', 'hf-kernels'"),
        (_sweep("new_tokens", [1], index=1), "1 is less than the minimum of 2"),
        (
            lambda p: p["lm"]["sweeps"][1].pop("new_tokens"),
            "presets.lm-ci.lm.sweeps[1].new_tokens: a sweep with decode cells needs the N",
        ),
        (
            _sweep("new_tokens", [8]),
            "presets.lm-ci.lm.sweeps[0].new_tokens: only decode cells generate N tokens",
        ),
        (_sweep("seq_len", [0]), "0 is less than the minimum of 1"),
        (lambda p: p["lm"].__setitem__("size", "huge"), "'huge' is not one of ['full'"),
        (
            lambda p: p.__setitem__("sweeps", copy.deepcopy(BLOCK_SWEEPS)),
            "presets.lm-ci: has both sweeps (blocks) and lm (whole models)",
        ),
        (lambda p: p.pop("lm"), "presets.lm-ci: needs sweeps (block cells) or lm"),
        (_sweep("e2e_rounds", 2), "lm.sweeps[0].e2e_rounds: only decode cells are checked"),
        (
            lambda p: p.__setitem__("headline", [{"phases": ["decode"]}]),
            "presets.lm-ci.headline: is for block cells",
        ),
    ],
    ids=[
        "unknown-model",
        "block-backend",
        "one-new-token",
        "decode-without-n",
        "n-on-prefill",
        "zero-length",
        "unknown-size",
        "both-kinds",
        "neither-kind",
        "e2e-on-prefill",
        "headline",
    ],
)
def test_a_bad_lm_matrix_is_refused_naming_the_key(mutate, message):
    assert message in _bad(mutate)


def test_a_block_preset_without_a_size_is_refused():
    assert "presets.ci.size: the blocks' size is needed" in _bad(lambda p: p.pop("size"), "ci")


def test_the_paths_of_a_cell_its_gate_and_its_profile():
    c = LMCell("qwen2.5-0.5b", "hf-eager", "decode", 8, 1024, 16, "fp32")
    assert paths.lm_cell_record("r", c) == (
        "results/r/lm/qwen2.5-0.5b/hf-eager/decode/b8-t1024-g16-fp32.json"
    )
    assert paths.lm_verify("r", c.model, c.backend, c.dtype) == (
        "results/r/lm-verify/qwen2.5-0.5b/hf-eager-fp32.json"
    )
    assert paths.lm_ops("r", c).startswith("results/r/lm-profile/qwen2.5-0.5b/")
    assert paths.lm_trace("r", c).endswith("b8-t1024-g16-fp32.trace.json.gz")
    assert c.name == "qwen2.5-0.5b/hf-eager/decode b8 t1024 g16 fp32"


def test_the_cost_of_a_whole_model_run_counts_its_jobs():
    plan = plan_of("lm-cpu")
    jobs = budget.jobs(plan)
    rules = [j.rule for j in jobs]
    assert rules.count("lm_bench") == len(plan.lm.cells)
    assert rules.count("lm_verify") == len(plan.lm.verified)
    assert rules.count("lm_profile") == len(plan.lm.profiled)
    assert "calibrate" not in rules and "bench" not in rules
    bench = [j.seconds for j in jobs if j.rule == "lm_bench"]
    # no cell is estimated below its sampling budget, nor above its timeout
    assert min(bench) >= plan.timing.max_time_s
    assert max(bench) <= plan.timing.timeout_s + budget.CPU_COSTS.start_s + budget.LM_IMPORT_S
    assert "whole-model cells (full size), each at its sampling budget" in budget.describe(plan)


def test_a_sweeps_e2e_rounds_override_the_presets_for_its_decode_cells():
    plan = plan_of("lm-cpu")
    rounds = {c: plan.lm.e2e_rounds_of(c) for c in plan.lm.cells if c.phase == "decode"}
    assert plan.lm.e2e_rounds == 1
    assert {c.seq_len for c, n in rounds.items() if n == 1} == {1024}
    assert {c.seq_len for c, n in rounds.items() if n == 0} == {256, 4096}


def test_a_decode_cell_in_two_sweeps_with_different_e2e_rounds_is_refused():
    def twice(preset):
        sweeps = preset["lm"]["sweeps"]
        sweeps.append({**copy.deepcopy(sweeps[1]), "e2e_rounds": 2})
        sweeps[1]["e2e_rounds"] = 0

    message = _bad(twice)
    assert "e2e_rounds: qwen2.5-0.5b/hf-eager/decode b1 t16 g4 fp32 is in another sweep" in message
