"""The config is validated before anything runs; bad input names the key and the value."""

from __future__ import annotations

import copy
import math

import pytest

from ssmbench import config as sbconfig
from ssmbench.matrix import compute_dtype
from ssmbench.registry import GRAPH_BACKENDS
from tests.conftest import snakemake

BASE = sbconfig.load()


def cfg(**overrides) -> dict:
    c = copy.deepcopy(BASE)
    c.update(overrides)
    return c


def sweep_of(c: dict, preset: str = "cpu") -> dict:
    return c["presets"][preset]["sweeps"][0]


def test_default_config_plans_cpu_without_cuda():
    plan = sbconfig.plan(cfg(), cuda=False)
    assert plan.preset == "cpu" and plan.run == "cpu" and plan.device == "cpu"
    assert {c.seq_len for c in plan.cells} == {256, 512, 1024, 2048, 4096, 16384, 65536}
    families = ("attention", "s4d", "mamba", "mamba2", "mamba3", "deltanet", "hybrid")
    # graph backends are verified through their base (torch, fused): no pair of their own
    backends = ("naive", "torch", "fused")
    assert set(plan.pairs) == {(m, b) for m in families for b in backends}
    eager = [c for c in plan.cells if c.backend in ("naive", "torch")]
    by_phase = {ph: {c for c in eager if c.phase == ph} for ph in ("prefill", "decode", "train")}
    assert len(by_phase["prefill"]) == 7 * 5 + 7 * 2  # torch at 5 lengths, naive at 2
    decode = by_phase["decode"]
    assert {c.seq_len for c in decode} == {1024, 4096, 16384, 65536}
    # an SSM's naive and torch decode steps are one code: only attention's loop differs
    assert {c.model for c in decode if c.backend == "naive"} == {"attention", "hybrid"}
    long = {c for c in decode if c.seq_len > 4096}
    assert {c.batch for c in long} == {1, 8} and len(long) == 7 * 2 * 2
    assert all(plan.cache_source(c) == "random" for c in long)
    assert {c.seq_len for c in by_phase["train"]} == {256, 1024}
    assert {c.seq_len for c in by_phase["train"] if c.backend == "naive"} == {256}
    gpu_only = {c for c in plan.cells if c.backend in ("fused", "torch-graph", "fused-graph")}
    assert len(gpu_only) == 7 * (3 + 2) and {c.seq_len for c in gpu_only} == {1024}
    assert len(plan.cells) == 49 + len(decode) + 21 + len(gpu_only)
    # the profiled cells are torch prefills, also timed by the first sweep
    assert plan.profiled and plan.profiled <= by_phase["prefill"]
    assert {c.backend for c in plan.profiled} == {"torch"}


def test_profile_and_timing_keys():
    c = cfg(preset="ci")
    plan = sbconfig.plan(c)
    assert plan.calibrate_quick and plan.cpu_mem_limit_gb == 16
    assert plan.timing.timeout_s == 60 and plan.timing.target_spread == 0.0
    assert plan.figure_cells("op_breakdown") == sorted(plan.profiled)


def test_host_allocator_defaults_to_retain():
    c = cfg(preset="ci")
    assert sbconfig.plan(c).timing.host_allocator == "retain"
    c["presets"]["ci"]["timing"]["host_allocator"] = "system"
    assert sbconfig.plan(c).timing.host_allocator == "system"


def test_auto_picks_the_cuda_preset_when_cuda_and_run_override():
    assert sbconfig.plan(cfg(), cuda=True).preset == "gpu"
    assert sbconfig.plan(cfg(preset="ci", run="mine")).run == "mine"


def test_every_shipped_preset_passes_every_check():
    """The checks refuse what cannot run (tests/workflow/test_bad_input.py), not a preset we ship:
    each plans, its paired timing merged over its own, its caps above the floors."""
    for name, preset in BASE["presets"].items():
        plan = sbconfig.plan(cfg(preset=name), cuda=False)
        assert plan.run == preset.get("run", name) and plan.mem_mb >= sbconfig.MIN_MEM_MB
        assert preset.get("cpu_mem_limit_gb", math.inf) >= sbconfig.MIN_CPU_MEM_LIMIT_GB
        assert plan.paired_timing is None or (
            plan.paired_timing.min_time_s <= plan.paired_timing.max_time_s
        )


def dry_run_figures(workdir, *config: str) -> set[str]:
    """The figure files a dry run of ``--config *config`` would write."""
    out = snakemake(workdir, "-n", "--config", *config)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-2000:])
    return {word.strip(",") for word in out.stdout.split() if word.startswith("figures/")}


def test_live_and_shipped_runs_of_one_name_draw_into_different_folders(new_workflow):
    """run=cpu measured here and the shipped cpu run: figures/cpu/ and
    figures/precollected/cpu/, each asked for by its own config, never one file."""
    wf = new_workflow(shipped=("cpu",))
    live = dry_run_figures(wf, "preset=ci", "run=cpu")
    shipped = dry_run_figures(wf, "source=precollected")
    assert "figures/cpu/roofline.pdf" in live and not live & shipped
    assert "figures/precollected/cpu/roofline.pdf" in shipped
    assert {f.split("/")[1] for f in shipped} == {"precollected"}


def test_attention_cells_use_the_n0_placeholder():
    plan = sbconfig.plan(cfg(preset="ci"))
    assert {c.d_state for c in plan.cells if c.model in ("attention", "deltanet")} == {0}
    assert {c.d_state for c in plan.cells if c.model not in ("attention", "deltanet")} == {4}


def test_a_sweeps_random_cache_applies_to_its_decode_cells_only():
    c = cfg(preset="ci")
    c["presets"]["ci"]["sweeps"][1]["cache"] = "random"  # torch decode and train
    plan = sbconfig.plan(c)
    assert plan.random_cache and {x.phase for x in plan.random_cache} == {"decode"}
    decode = {x for x in plan.cells if x.phase == "decode" and x.backend == "torch"}
    assert plan.random_cache == decode
    assert {plan.cache_source(x) for x in plan.cells if x.phase != "decode"} == {"prefill"}
    h200 = sbconfig.plan(cfg(preset="h200"))
    assert {x.seq_len for x in h200.random_cache} == {65536, 131072}


@pytest.mark.parametrize(
    "model, backend, phase, dtype, expected",
    [
        ("mamba2", "torch", "prefill", "fp32", "fp32"),  # an fp32 cell computes in fp32
        ("attention", "fused", "prefill", "fp64", "fp64"),
        ("mamba2", "torch", "prefill", "bf16", "fp32"),  # the torch forms widen
        ("mamba3", "naive", "train", "bf16", "fp32"),
        ("deltanet", "compile", "prefill", "fp16", "fp32"),
        ("s4d", "torch", "prefill", "bf16", "fp32"),
        ("attention", "torch", "prefill", "bf16", "bf16"),  # SDPA in the cell's dtype
        ("attention", "naive", "train", "fp16", "fp16"),
        ("attention", "compile", "prefill", "bf16", "bf16"),
        ("attention", "fused-graph", "decode", "bf16", "bf16"),
        ("mamba2", "fused", "prefill", "bf16", "bf16"),  # half matmuls, fp32 state
        ("deltanet", "fused", "train", "bf16", "bf16"),
        ("mamba", "fused", "prefill", "bf16", "fp32"),  # a float32 scan, no matmul
        ("mamba2", "torch-mixed", "prefill", "bf16", "bf16"),
        ("mamba3", "torch-mixed", "train", "bf16", "bf16"),
        ("deltanet", "torch-mixed", "prefill", "bf16", "bf16"),
        ("mamba2", "torch-mixed", "prefill", "fp32", "fp32"),  # fp32: torch's arithmetic
        ("mamba", "torch-mixed", "prefill", "bf16", "fp32"),  # not offered: unavailable
        ("mamba2", "torch-mixed", "decode", "bf16", "fp32"),  # torch's step, widened
        ("mamba2", "fused-graph", "decode", "bf16", "fp32"),
        ("hybrid", "torch", "prefill", "bf16", "fp32"),  # the widest of its parts
        ("hybrid", "fused", "prefill", "bf16", "bf16"),
        ("hybrid", "torch-mixed", "train", "bf16", "bf16"),
        ("hybrid", "torch-mixed", "decode", "bf16", "fp32"),
    ],
    ids=str,
)
def test_compute_dtype_is_what_the_operator_runs_in(model, backend, phase, dtype, expected):
    assert compute_dtype(model, backend, phase, dtype) == expected


def test_every_list_of_backends_is_the_registrys():
    """The config schema's two enums, the command line's choices and the figures' styles
    and tiers name exactly the backends ssmbench.models registers (graph ones included)."""
    import yaml

    from ssmbench import __main__ as cli
    from ssmbench.figures import style
    from ssmbench.models import ALL_BACKENDS
    from ssmbench.registry import BACKEND_TIERS

    backends = [*ALL_BACKENDS, *GRAPH_BACKENDS]
    with open(sbconfig.SCHEMA) as f:
        schema = yaml.safe_load(f)

    def enums(node):
        """Every ``backends: {items: {enum: [...]}}`` in the schema."""
        if isinstance(node, dict):
            found = node.get("backends", {}).get("items", {}).get("enum")
            return ([found] if found else []) + [e for v in node.values() for e in enums(v)]
        return [e for v in node for e in enums(v)] if isinstance(node, list) else []

    from ssmbench.lm import backends as lm_backends

    lm_sweep = schema["$defs"].pop("lm_sweep")  # whole models have backends of their own
    assert enums(lm_sweep) == [list(lm_backends.BACKENDS)]
    assert len(enums(schema)) == 2 and "torch-mixed" in backends
    for names in (*enums(schema), cli.BACKENDS, style.BACKEND_STYLES, BACKEND_TIERS):
        assert sorted(names) == sorted(backends)


def test_a_cuda_plan_calibrates_each_card_its_jobs_may_lease(monkeypatch):
    """On a node of four GPUs (two kinds), a cuda preset's plan has one calibration record
    per GPU, named by its UUID; CUDA_VISIBLE_DEVICES narrows them; where SLURM chose the
    GPUs, and on a CPU, the run has one device.json."""
    from ssmbench import devices, paths
    from tests.gpufakes import MIXED, fake_gpus

    node = fake_gpus(4, MIXED)
    monkeypatch.setattr(devices, "gpus", lambda root=None: node)
    for name in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS"):
        monkeypatch.delenv(name, raising=False)
    plan = sbconfig.plan(cfg(preset="gpu"), cuda=True)
    assert plan.calibrated_gpus == tuple(g.uuid for g in node)
    assert plan.device_records() == [f"results/gpu/devices/{g.uuid}.json" for g in node]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    plan = sbconfig.plan(cfg(preset="gpu"), cuda=True)
    assert plan.calibrated_gpus == (node[1].uuid, node[2].uuid)
    monkeypatch.setenv("SLURM_JOB_GPUS", "0")
    assert sbconfig.plan(cfg(preset="gpu"), cuda=True).device_records() == [paths.device("gpu")]
    cpu = sbconfig.plan(cfg(preset="cpu"), cuda=True)
    assert cpu.calibrated_gpus == () and cpu.device_records() == [paths.device("cpu")]
