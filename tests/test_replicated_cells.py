"""Headline cells measured in several processes (a headline selector's ``replicates``):
their plan and paths, one row per cell in the cells table (the median process, with the
spread and a hierarchical interval), their samples per process, and the go/no-go
interval of two such cells."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ssmbench import analysis, paths, tables
from ssmbench.config import ConfigError, load, plan
from ssmbench.finish import unfinished_records
from ssmbench.matrix import Cell
from tests.conftest import RECORD_SIZE, sampled_record

DECODE_64 = dict(backend="torch", phase="decode", batch=1, seq_len=64, dtype="fp32")


def headline_config(*selectors):
    config = load(overrides={"preset": "ci"})
    config["presets"]["ci"]["headline"] = list(selectors)
    return config


def test_a_headline_selectors_replicates_plan_one_job_per_process():
    p = plan(
        headline_config(
            {"models": ["mamba2"], "phases": ["decode"], "replicates": 3},
            {"models": ["mamba2", "attention"], "phases": ["decode"], "seq_len": [64]},
        )
    )
    m2 = Cell("mamba2", "torch", "decode", 1, 64, 4, "fp32")
    attention = Cell("attention", "torch", "decode", 1, 64, 0, "fp32")
    assert m2 in p.headline and attention in p.headline
    assert p.cell_replicates_of(m2) == 3 and p.cell_replicates_of(attention) == 1
    assert {(m2, r) for r in range(3)} <= p.bench_job_set
    assert len(p.bench_jobs) == len(p.cells) + 2 * 2  # mamba2 decode at T = 32 and 64
    assert p.measure_rounds == 3
    # a cell two selectors name takes the larger count
    p = plan(
        headline_config(
            {"models": ["mamba2"], "phases": ["decode"], "replicates": 2},
            {"models": ["mamba2"], "seq_len": [64], "replicates": 4},
        )
    )
    assert p.cell_replicates_of(m2) == 4
    assert p.cell_replicates_of(Cell("mamba2", "torch", "decode", 1, 32, 4, "fp32")) == 2


def test_a_headline_selector_that_selects_nothing_is_refused():
    with pytest.raises(ConfigError, match=r"presets.ci.headline\[1\]: selects no cell"):
        plan(headline_config({"models": ["mamba2"]}, {"seq_len": [4096]}))
    for bad, match in ((0, "minimum"), (2.5, "integer")):
        with pytest.raises(ConfigError, match=rf"headline\[0\].replicates: .*{match}"):
            plan(headline_config({"models": ["mamba2"], "replicates": bad}))


def test_the_cpu_preset_measures_its_headline_cells_in_three_processes():
    p = plan(load(overrides={"preset": "cpu"}))
    assert len(p.headline) == 7
    assert {p.cell_replicates_of(c) for c in p.headline} == {3}
    assert all(c.seq_len == 65536 and c.phase == "decode" for c in p.headline)


def test_a_replicates_records_sit_beside_the_cells():
    cell = Cell("mamba2", "torch", "decode", 1, 64, 4, "fp32")
    assert paths.cell_record("r", cell) == paths.cell_record("r", cell, 0)
    assert paths.cell_record("r", cell) == "results/r/cells/mamba2/torch/decode/b1-t64-n4-fp32.json"
    assert paths.cell_record("r", cell, 2).endswith("/b1-t64-n4-fp32-r2.json")
    assert paths.bench_log("r", cell, 2) == "logs/r/bench/mamba2/torch/decode/b1-t64-n4-fp32-r2.log"


def test_unfinished_replicates_become_rows_of_their_own(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cell = Cell("mamba2", "torch", "decode", 1, 64, 4, "fp32")
    done = [paths.cell_record("r", cell, 0)]
    rows = unfinished_records("r", [(cell, 0), (cell, 1), (cell, 2)], done, RECORD_SIZE, "cpu")
    assert [(r.replicate, r.status) for r in rows] == [(1, "not_run"), (2, "not_run")]
    log = tmp_path / paths.bench_log("r", cell, 2)
    log.parent.mkdir(parents=True)
    log.write_text("started")
    rows = unfinished_records("r", [(cell, 1), (cell, 2)], [], RECORD_SIZE, "cpu")
    assert [r.status for r in rows] == ["not_run", "failed"] and str(log.name) in rows[1].reason


def processes_of(model, medians, replicates=None, **kw):
    """One record per process of ``model``'s decode cell at T = 64, process r's samples
    around ``medians[r]`` ms (2% noise, seeded)."""
    rng = np.random.default_rng(len(medians))
    return [
        sampled_record(
            m * (1 + 0.02 * rng.standard_normal(12)),
            model=model,
            d_state=0 if model == "attention" else 4,
            replicate=r,
            replicates=replicates or len(medians),
            **DECODE_64,
            **kw,
        )
        for r, m in enumerate(medians)
    ]


def test_a_replicated_cell_is_one_row_its_median_process_with_its_spread():
    records = processes_of("mamba2", [1.0, 1.3, 1.1])
    (row,) = tables.cells_table(records).itertuples()
    # the median process (1.1 ms) is the row, whole: its own record's median
    assert row.replicate == 2 and row.time_ms_median == records[2].time_ms_median
    assert row.replicates == 3 and row.replicates_ok == 3
    medians = [r.time_ms_median for r in records]
    assert row.process_medians_ms == ";".join(f"{m:.6g}" for m in medians)
    assert row.process_maxmin == pytest.approx(max(medians) / min(medians))
    assert row.process_cv == pytest.approx(np.std(medians, ddof=1) / np.mean(medians))
    assert row.time_interval == "hierarchical" and row.time_ms_lo <= 1.1 <= row.time_ms_hi
    # an even count: the lower of the two middle processes, a real one
    four = processes_of("mamba2", [1.0, 1.3, 1.1, 1.2])
    (row,) = tables.cells_table(four).itertuples()
    assert row.time_ms_median == four[2].time_ms_median


def test_a_replicate_that_failed_or_ran_loaded_is_named_and_the_rest_answer():
    records = processes_of("mamba2", [1.0, 1.2, 1.1])
    records[1].status, records[1].reason = "failed", "RuntimeError: boom\nTraceback ..."
    records[1].time_ms_median = records[1].time_ms_p95 = None
    records[1].samples_ms, records[1].n_samples = [], 0
    records[2].other_cpu_cores = 1.4  # another process took more than a core
    (row,) = tables.cells_table(records).itertuples()
    assert row.status == "ok" and row.replicates_ok == 2
    assert row.reason == "other processes: r1 failed: RuntimeError: boom"
    assert row.loaded.startswith("r2: ")
    # no ok process: the first record's status and reason
    for r in records:
        r.status, r.reason = "timeout", "too slow"
    (row,) = tables.cells_table(records).itertuples()
    assert row.status == "timeout" and row.replicates_ok == 0 and row.time_interval == ""


def test_samples_are_kept_per_process_and_an_old_samples_table_reads(tmp_path):
    records = processes_of("mamba2", [1.0, 1.2, 1.1])
    samples = tables.samples_table(records)
    assert sorted(samples.replicate.unique()) == [0, 1, 2]
    assert samples.groupby("replicate").size().tolist() == [12, 12, 12]
    path = tmp_path / "samples.parquet"
    samples[samples.replicate == 0].drop(columns=["replicate"]).to_parquet(path)
    old = tables.read_samples(path)
    assert (old.replicate == 0).all() and len(old) == 12


def test_two_replicated_cells_ratio_takes_each_sides_processes():
    """attention's processes around 2.0 ms, mamba2's around 1.0: the go/no-go ratio is
    the rows' medians' ratio, its interval resampled over both sides' processes, and it
    is labelled so."""
    records = processes_of("attention", [2.0, 2.6, 2.2]) + processes_of("mamba2", [1.0, 1.2, 0.9])
    cells, samples = tables.cells_table(records), tables.samples_table(records)
    (row,) = analysis.go_no_go_table(cells, samples=samples).itertuples()
    a, s = (cells[cells.model == m].iloc[0] for m in ("attention", "mamba2"))
    assert row.latency_ratio == pytest.approx(a.time_ms_median / s.time_ms_median)
    assert row.interval == "separate cells, replicated" and row.replicates == 3
    assert row.latency_lo < row.latency_ratio < row.latency_hi
    # one side in one process: the samples of the processes each row reports
    single = processes_of("attention", [2.2]) + processes_of("mamba2", [1.0, 1.2, 0.9])
    cells, samples = tables.cells_table(single), tables.samples_table(single)
    (row,) = analysis.go_no_go_table(cells, samples=samples).itertuples()
    assert row.interval == "separate cells" and row.replicates == 1
    assert not math.isnan(row.latency_lo)


def test_the_verdict_says_how_far_a_headline_cells_processes_disagree():
    records = processes_of("attention", [2.0, 2.6, 2.2]) + processes_of("mamba2", [1.0, 1.2, 0.9])
    cells = tables.cells_table(records)
    (sentence,) = analysis.headline_sentences(cells)
    maxmin = cells.process_maxmin
    assert sentence.startswith("2 headline cells measured in 3 processes each")
    assert f"{maxmin.min():.2f}-{maxmin.max():.2f} (max/min)" in sentence
    worst = cells.model[maxmin.idxmax()]
    assert f"most at {worst}/torch decode T = 64, batch 1" in sentence
    one = tables.cells_table(processes_of("mamba2", [1.0]))
    assert analysis.headline_sentences(one) == []
    assert analysis.headline_sentences(pd.DataFrame({"status": ["ok"]})) == []
