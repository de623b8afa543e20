"""Paired cells: attention and an SSM in alternating rounds of one process, their plan,
records and table.  (The go/no-go answers read from them: test_analysis.)"""

from __future__ import annotations

import math
import statistics

import pytest

from ssmbench import paths, tables
from ssmbench.cell import CellSpec
from ssmbench.config import ConfigError, load, plan
from ssmbench.finish import unfinished_paired
from ssmbench.matrix import Cell, Size, Timing, paired_attention
from ssmbench.paired import read_paired, run_paired, validate_paired, write_paired
from tests.conftest import paired_record

SIZE = Size(d_model=32, n_layers=2, n_heads=2, head_dim=16, expand=2, d_conv=4, chunk=16)
TIMING = Timing(warmup=1, min_samples=6, max_samples=8, min_time_s=0.0, max_time_s=5.0)


def spec(model="mamba2", backend="torch", phase="decode", cache_source="prefill", timing=TIMING):
    d_state = 0 if model in ("attention", "deltanet") else 4
    cell = Cell(model, backend, phase, 1, 32, d_state, "fp32")
    return CellSpec("t", cell, "cpu", SIZE, timing, cache_source=cache_source)


@pytest.mark.parametrize("phase", ["prefill", "decode", "train"])
def test_a_paired_cell_times_both_sides_in_one_process(phase):
    record = run_paired(spec(phase=phase), threads=1)
    assert record.status == "ok", record.reason
    assert record.n_rounds == len(record.attention_samples_ms) == len(record.ssm_samples_ms)
    assert record.n_rounds >= TIMING.min_samples
    assert record.attention_ms == statistics.median(record.attention_samples_ms)
    assert record.latency_ratio == pytest.approx(record.attention_ms / record.ssm_ms)
    assert record.attention_flop > 0 and record.ssm_flop > 0
    assert record.kv_cache == ("in-place" if phase == "decode" else "")
    assert record.attention_compute_dtype == record.ssm_compute_dtype == "fp32"


def test_a_paired_decode_cell_from_random_caches():
    record = run_paired(spec(cache_source="random"), threads=1)
    assert record.status == "ok" and record.cache_source == "random"


def test_a_side_that_did_not_pass_verification_is_not_timed_and_named():
    verify = {
        "attention": {"model": "attention", "backend": "torch", "status": "passed", "reason": ""},
        "mamba2": {
            "model": "mamba2",
            "backend": "torch",
            "status": "failed",
            "reason": "y off by 1e-1",
        },
    }
    record = run_paired(spec(), verify=verify)
    assert record.status == "failed" and record.n_rounds == 0
    assert record.reason.startswith("mamba2: verification failed for mamba2/torch (decode)")
    missing = run_paired(spec(), verify={"mamba2": verify["mamba2"]})
    assert missing.status == "failed" and "no verify record for attention/torch" in missing.reason


def test_graph_backends_off_cuda_are_unavailable():
    record = run_paired(spec(backend="torch-graph"))
    assert record.status == "unavailable" and "CUDA graphs need a CUDA device" in record.reason


def test_records_round_trip_and_bad_ones_are_named(tmp_path):
    record = run_paired(spec(), threads=1)
    path = tmp_path / "p.json"
    write_paired(path, record)
    assert read_paired(path) == record
    data = record.to_dict()
    with pytest.raises(ValueError, match=r"p.json: field ssm_samples_ms: .* got 7 .* and 6"):
        validate_paired(
            {**data, "attention_samples_ms": [1.0] * 7, "ssm_samples_ms": [1.0] * 6}, path
        )
    with pytest.raises(ValueError, match=r"p.json: field <top level>: .*'colour' was unexpected"):
        validate_paired({**data, "colour": 1}, path)
    with pytest.raises(ValueError, match=r"field <top level>: 'run' is a required property"):
        validate_paired({k: v for k, v in data.items() if k != "run"}, path)
    with pytest.raises(ValueError, match="field status: 'great'"):
        validate_paired({**data, "status": "great"}, path)
    with pytest.raises(ValueError, match="field phase: 'warmup' is not one of"):
        validate_paired({**data, "phase": "warmup"}, path)


def test_the_paired_schema_has_the_records_fields():
    import json
    from dataclasses import fields

    from ssmbench.paired import SCHEMA, PairedRecord

    schema = json.loads(SCHEMA.read_text())
    assert set(schema["properties"]) == {f.name for f in fields(PairedRecord)}


def paired_config(**paired):
    config = load(overrides={"preset": "ci"})
    config["presets"]["ci"]["paired"] = paired
    return config


def test_the_plan_pairs_each_ssm_with_attention_and_verifies_both():
    sweep = dict(
        models=["mamba2"],
        backends=["torch"],
        phases=["decode"],
        batch=[1],
        seq_len=[4096],
        d_state=[4],
        dtype=["fp32"],
        cache="random",
    )
    p = plan(paired_config(timing={"min_samples": 30, "max_samples": 40}, sweeps=[sweep]))
    (cell,) = p.paired
    assert cell == Cell("mamba2", "torch", "decode", 1, 4096, 4, "fp32")
    assert paired_attention(cell) == Cell("attention", "torch", "decode", 1, 4096, 0, "fp32")
    assert p.paired_timing.min_samples == 30 and p.paired_timing.warmup == p.timing.warmup
    assert p.cache_source(cell) == p.cache_source(paired_attention(cell)) == "random"
    assert {("attention", "torch"), ("mamba2", "torch")} <= set(p.pairs)
    with pytest.raises(ConfigError, match=r"paired.sweeps\[0\].models: attention is the other"):
        plan(paired_config(sweeps=[{**sweep, "models": ["attention", "mamba2"]}]))
    with pytest.raises(ConfigError, match="paired.timing.max_samples: 2 is less than"):
        plan(paired_config(timing={"max_samples": 2, "min_samples": 3}, sweeps=[sweep]))
    with pytest.raises(ConfigError, match=r"config key presets.ci.paired.timing: .*non-empty"):
        plan(paired_config(timing={}, sweeps=[sweep]))


def test_replicates_are_planned_per_preset_and_per_sweep_and_spread_over_the_run():
    sweep = dict(
        models=["mamba2", "hybrid"],
        backends=["torch"],
        phases=["decode"],
        batch=[1],
        seq_len=[64],
        d_state=[4],
        dtype=["fp32"],
    )
    p = plan(paired_config(replicates=3, sweeps=[sweep, {**sweep, "models": ["s4d"]}]))
    assert {p.replicates(c) for c in p.paired} == {3}
    assert len(p.paired_jobs) == 9 and p.measure_rounds == 3
    assert {r for _, r in p.paired_jobs} == {0, 1, 2}
    # the cells that are not headline cells fall into the rounds between the replicates
    rounds = p.bench_round
    assert set(rounds) == set(p.cells) - set(p.headline)
    assert sorted(set(rounds.values())) == [0, 1, 2]
    assert plan(paired_config(replicates=3, sweeps=[sweep])).bench_round == rounds  # seeded
    # a sweep's own count wins over the preset's; a cell in two sweeps takes the most
    p = plan(
        paired_config(replicates=2, sweeps=[sweep, {**sweep, "models": ["s4d"], "replicates": 4}])
    )
    assert p.replicates(Cell("s4d", "torch", "decode", 1, 64, 4, "fp32")) == 4
    assert p.replicates(Cell("mamba2", "torch", "decode", 1, 64, 4, "fp32")) == 2
    one = paired_config(sweeps=[sweep])
    del one["presets"]["ci"]["headline"]  # its cells have replicates of their own
    assert plan(one).measure_rounds == 1  # default: one process
    for bad, match in ((0, "minimum"), (2.0, "integer")):
        with pytest.raises(ConfigError, match=rf"presets.ci.paired.replicates: .*{match}"):
            plan(paired_config(replicates=bad, sweeps=[sweep]))
    config = load(overrides={"preset": "ci"})
    config["presets"]["ci"]["sweeps"][0]["replicates"] = 3
    with pytest.raises(ConfigError, match=r"sweeps\[0\].replicates: only a paired sweep"):
        plan(config)


def test_each_replicate_has_its_own_record_path():
    cell = Cell("mamba2", "torch", "decode", 1, 64, 4, "fp32")
    first, second = (paths.paired_record("r", cell, i) for i in (0, 1))
    assert first == "results/r/paired/mamba2/torch/decode/b1-t64-n4-fp32-r0.json"
    assert second.endswith("-r1.json")
    assert (
        paths.paired_log("r", cell, 1) == "logs/r/paired/mamba2/torch/decode/b1-t64-n4-fp32-r1.log"
    )


def test_the_cpu_preset_pairs_every_ssm_at_the_decision_lengths():
    p = plan(load(overrides={"preset": "cpu"}))
    assert {p.replicates(c) for c in p.paired} == {5}  # the verdict's pairs: k >= 5
    points = {(c.phase, c.seq_len) for c in p.paired}
    assert points == {("prefill", 4096), ("decode", 4096), ("decode", 65536), ("train", 1024)}
    assert {c.model for c in p.paired} == {"s4d", "mamba", "mamba2", "mamba3", "deltanet", "hybrid"}
    long = [c for c in p.paired if c.seq_len == 65536]
    assert all(p.cache_source(c) == "random" for c in long)


def test_the_paired_table_holds_each_ratio_with_its_paired_interval():
    table = tables.paired_table(
        [paired_record("mamba2", 2.0), paired_record("s4d", 1.0, status="not_run")]
    )
    ok = table[table.status == "ok"].iloc[0]
    assert ok.latency_lo < 2.0 < ok.latency_hi
    # rounds resampled together: the 50% drift stays out of the interval (its medians still
    # pick neighbouring rounds, so it is wider than the 2% noise alone would make it)
    assert ok.latency_hi - ok.latency_lo < 0.25
    assert ok.flop_ratio == 2.0
    not_run = table[table.status == "not_run"].iloc[0]
    assert math.isnan(not_run.latency_lo) and math.isnan(not_run.latency_hi)


def test_unfinished_paired_cells_become_rows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cells = [Cell("mamba2", "torch", "decode", 1, 256, 16, "fp32")]
    (record,) = unfinished_paired("t", cells, [], {}, "cpu", "budget")
    assert record.status == "not_run" and record.reason.startswith("budget")
    # replicates: each one's own row; one whose job started (its log exists) failed
    cell = cells[0]
    done = paths.paired_record("t", cell, 0)
    log = tmp_path / paths.paired_log("t", cell, 2)
    log.parent.mkdir(parents=True)
    log.write_text("started")
    rows = unfinished_paired("t", [(cell, r) for r in range(3)], [done], {}, "cpu", "budget")
    assert [(r.replicate, r.status) for r in rows] == [(1, "not_run"), (2, "failed")]


def test_a_cuda_pair_without_a_gpu_is_unavailable():
    cell = Cell("mamba2", "fused", "decode", 1, 32, 4, "bf16")
    record = run_paired(CellSpec("t", cell, "cuda", SIZE, TIMING))
    if record.status != "unavailable":  # a machine with CUDA runs it
        pytest.skip("CUDA is available here")
    assert "torch.cuda.is_available() is False" in record.reason and record.n_rounds == 0
