"""The analysis the verdict and the figures read: the go/no-go table (paired cells first,
intervals, answers, precision), graph speed-ups, crossovers and the verdict's sentences."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from ssmbench import analysis, figures, tables
from tests.conftest import make_record, paired_record, sampled_record
from tests.figures.test_figures import FAMILIES, LENGTHS, graph_cells, synthetic_cells
from tests.gpufakes import A100, H100


def go_no_go_cells(attention_ms=2.0):
    """Separate cells of attention, mamba2 and mamba at one decode point, with samples."""

    rng = np.random.default_rng(3)
    records = []
    for model, ms in (("attention", attention_ms), ("mamba2", 1.0), ("mamba", 1.0)):
        samples = list(ms * (1 + 0.3 * rng.standard_normal(20)).clip(0.5))
        records.append(
            sampled_record(
                samples,
                model=model,
                backend="torch",
                phase="decode",
                seq_len=256,
                d_state=0 if model == "attention" else 16,
            )
        )
    return tables.cells_table(records), tables.samples_table(records)


def test_go_no_go_reads_paired_cells_first_and_says_what_each_interval_supports():
    cells, samples = go_no_go_cells(attention_ms=1.05)
    paired = tables.pairs_table([paired_record("mamba2", 1.6)])
    table = analysis.go_no_go_table(cells, samples=samples, paired=paired)
    m2 = table[table.ssm == "mamba2"].iloc[0]
    # one process: its rounds' interval, labelled as such
    assert m2.interval == "within-process" and m2.answer == "ssm faster"
    assert m2.replicates == 1
    assert m2.latency_ratio == pytest.approx(paired.latency_ratio.iloc[0])
    # mamba has no paired cell: the separate cells' ratio, its interval holding 1
    m1 = table[table.ssm == "mamba"].iloc[0]
    assert m1.interval == "separate cells" and m1.answer == "inconclusive"
    assert m1.latency_lo < 1.0 < m1.latency_hi
    # without samples a separate-cell ratio has no interval and no answer
    bare = analysis.go_no_go_table(cells)
    assert bare.interval.eq("").all() and bare.answer.eq("").all()


def replicated(model, ratios, loaded=(), **kw):
    """Replicate records of one pair, process r's true ratio ``ratios[r]``."""
    return [
        paired_record(
            model,
            ratio,
            seed=r,
            replicate=r,
            replicates=len(ratios),
            other_cpu_cores=1.0 if r in loaded else 0.1,
            **kw,
        )
        for r, ratio in enumerate(ratios)
    ]


def test_replicated_pairs_give_a_hierarchical_interval_their_spread_and_named_outliers():
    cells, samples = go_no_go_cells(attention_ms=1.05)
    records = replicated("mamba2", [1.5, 1.6, 1.55, 1.65, 2.6], loaded=(2,))
    pairs = tables.pairs_table(records)
    row = pairs.iloc[0]
    assert row.interval == "hierarchical" and row.replicates == row.replicates_ok == 5
    per_process = [float(v) for v in row.process_ratios.split(";")]
    assert row.latency_ratio == pytest.approx(np.median(per_process), rel=1e-5)
    assert row.between_maxmin == pytest.approx(max(per_process) / min(per_process), rel=1e-5)
    assert row.outliers.startswith("r4 (2.6")  # beyond its siblings' spread, named
    # judged from the witnesses' numbers: 1.0 core of another process, not the others' 0.1
    assert row.loaded == "r2: other processes used 1.00 cores on average"
    # the hierarchical interval holds the processes' disagreement: far wider than any
    # one process's rounds, whose noise is 2%
    one = tables.paired_table(records)
    assert (row.latency_hi - row.latency_lo) > 3 * (one.latency_hi - one.latency_lo).max()
    table = analysis.go_no_go_table(cells, samples=samples, paired=pairs)
    m2 = table[table.ssm == "mamba2"].iloc[0]
    assert m2.interval == "hierarchical" and m2.replicates == 5
    assert m2.process_ratios == row.process_ratios
    text = " ".join(analysis.go_no_go_sentences(table) + analysis.replicate_sentences(table))
    assert "paired, 5 processes" in text
    assert "Outlier replicates (kept in the pair's median, named here): mamba2 decode" in text
    assert "Loaded replicates (kept in the pair's median, named here): mamba2 decode" in text


def test_a_failed_replicate_is_named_and_the_others_still_answer():
    records = replicated("mamba2", [1.5, 1.6, 1.55])
    records[1].status, records[1].reason = "oom", "out of memory\ndetails"
    records[1].attention_samples_ms = records[1].ssm_samples_ms = []
    row = tables.pairs_table(records).iloc[0]
    assert row.status == "ok" and row.replicates == 3 and row.replicates_ok == 2
    assert row.reason == "r1 oom: out of memory"
    none_ok = tables.pairs_table(
        [paired_record("s4d", 1.0, status="not_run", reason="the run stopped")]
    ).iloc[0]
    assert none_ok.status == "not_run" and none_ok.interval == ""


def test_separate_cells_are_widened_by_the_between_process_spread_the_pairs_measured():
    cells, samples = go_no_go_cells(attention_ms=2.0)
    alone = analysis.go_no_go_table(cells, samples=samples)
    m1 = alone[alone.ssm == "mamba"].iloc[0]
    assert m1.interval == "separate cells"
    # mamba2's replicates disagree by about 20% from process to process on each side
    rng = np.random.default_rng(5)
    records, shifts = [], []
    for r in range(5):
        rec = paired_record("mamba2", 1.6, seed=r, replicate=r, replicates=5)
        shift = 0.2 * rng.standard_normal(2)  # each side's process effect, log scale
        f_a, f_s = np.exp(shift)
        rec.attention_samples_ms = [x * f_a for x in rec.attention_samples_ms]
        rec.ssm_samples_ms = [x * f_s for x in rec.ssm_samples_ms]
        records.append(rec)
        shifts.append(shift)
    pairs = tables.pairs_table(records)
    sd = analysis.process_sd_by_phase(pairs)["decode"]
    # the sd of the process effects drawn here, pooled over the two sides; a process's
    # median of 30 rounds with 2% noise adds about 0.5%
    drawn = np.sqrt(np.var(np.array(shifts), axis=0, ddof=1).mean())
    assert sd == pytest.approx(drawn, rel=0.1)
    table = analysis.go_no_go_table(cells, samples=samples, paired=pairs)
    w1 = table[table.ssm == "mamba"].iloc[0]
    assert w1.interval == "separate cells, widened"
    assert w1.latency_ratio == m1.latency_ratio
    assert w1.latency_lo < m1.latency_lo and w1.latency_hi > m1.latency_hi
    assert "widened by the between-process spread" in " ".join(analysis.go_no_go_sentences(table))


def test_go_no_go_names_the_precision_of_each_side():
    cells, samples = go_no_go_cells()
    cells = cells.assign(compute_dtype=np.where(cells.model == "attention", "bf16", "fp32"))
    table = analysis.go_no_go_table(cells, samples=samples)
    assert set(table.attention_compute_dtype) == {"bf16"}
    assert set(table.ssm_compute_dtype) == {"fp32"}


def test_the_verdict_gives_intervals_inconclusive_points_and_precision():
    cells, samples = go_no_go_cells(attention_ms=1.05)
    cells = cells.assign(compute_dtype=np.where(cells.model == "attention", "bf16", "fp32"))
    paired = tables.pairs_table([paired_record("mamba2", 1.6)])
    table = analysis.go_no_go_table(cells, samples=samples, paired=paired)
    text = " ".join(analysis.go_no_go_sentences(table))
    ratio = table[table.ssm == "mamba2"].iloc[0]
    assert (
        f"mamba2 {ratio.latency_ratio:.2f}x (95% CI {ratio.latency_lo:.2f}-"
        f"{ratio.latency_hi:.2f}, paired, within one process only)" in text
    )
    replicates = " ".join(analysis.replicate_sentences(table))
    assert "Every paired interval is within one process (replicates: 1)" in replicates
    assert "Inconclusive in decode (the 95% interval holds 1, no answer): mamba at T = 256" in text
    assert "Not like for like in precision: " in text
    assert "mamba: attention computes in bf16, the SSM in fp32" in text


def test_speedups_with_intervals_and_rows_for_graph_cells_that_did_not_run():
    rng = np.random.default_rng(0)
    records = []
    for backend, ms in (("torch", 3.0), ("torch-graph", 1.0)):
        s = list(ms * (1 + 0.05 * rng.standard_normal(20)))
        records.append(sampled_record(s, model="mamba2", backend=backend, phase="decode"))
    records.append(
        make_record(
            model="mamba2",
            backend="fused-graph",
            phase="decode",
            status="unavailable",
            reason="no CUDA",
            samples_ms=[],
            n_samples=0,
            time_ms_median=None,
            time_ms_p95=None,
        )
    )
    cells, samples = tables.cells_table(records), tables.samples_table(records)
    table = analysis.speedups_table(cells, samples)
    ok = table[table.graph == "torch-graph"].iloc[0]
    assert ok.speedup_lo < ok.speedup < ok.speedup_hi and 2.5 < ok.speedup < 3.5
    fused = table[table.graph == "fused-graph"].iloc[0]
    assert fused.status == "unavailable" and pd.isna(fused.speedup)


def test_graph_speedups_pair_each_graph_cell_with_its_eager_twin():
    cells = graph_cells()
    speedups = analysis.graph_speedups(cells)
    assert set(speedups.eager) == {"torch"} and set(speedups.graph) == {"torch-graph"}
    assert len(speedups) == len(FAMILIES) * len(LENGTHS)
    np.testing.assert_allclose(speedups.speedup, speedups.eager_ms / speedups.graph_ms)
    assert set(speedups.speedup.round(6)) <= {2.0, 3.0, 4.0}


def test_go_no_go_compares_the_strongest_backends_both_sides_reached():
    cells = synthetic_cells()  # attention, mamba, s4d with naive and torch
    fused = cells[(cells.backend == "torch") & (cells.model == "attention")]
    cells = pd.concat([cells, fused.assign(backend="fused", time_ms_median=0.001)])
    table = analysis.go_no_go_table(cells)
    # attention has a fused cell but the SSMs do not: both sides are compared at torch
    assert set(table.attention_backend) == {"torch"} and set(table.ssm_backend) == {"torch"}
    assert set(table.ssm) == {"mamba", "s4d"}
    row = table[(table.phase == "prefill") & (table.ssm == "mamba")].iloc[0]
    ok = cells[(cells.status == "ok") & (cells.phase == "prefill") & (cells.seq_len == row.seq_len)]
    a = ok[(ok.model == "attention") & (ok.backend == "torch")].iloc[0]
    m = ok[(ok.model == "mamba") & (ok.backend == "torch")].iloc[0]
    assert row.latency_ratio == pytest.approx(a.time_ms_median / m.time_ms_median)
    assert row.flop_ratio == pytest.approx(a.flop / m.flop)
    assert row.energy_ratio == pytest.approx(a.energy_j / m.energy_j)
    fig = figures.draw("go_no_go", table)
    assert len(fig.axes) == 3 and "backends torch" in fig.axes[0].get_title()
    plt.close(fig)


# The verdict's sentences: every number read off the tables


def verdict_cell(model, backend, phase, seq_len, time_ms, flop, status="ok"):
    return dict(
        run="r",
        model=model,
        family=model,
        backend=backend,
        phase=phase,
        batch=1,
        seq_len=seq_len,
        dtype="fp32",
        status=status,
        time_ms_median=time_ms,
        flop=flop,
        energy_j=None,
    )


CELLS = pd.DataFrame(
    [
        verdict_cell("attention", "torch", "prefill", 1024, 10.0, 8e9),
        verdict_cell("attention", "naive", "prefill", 1024, 90.0, 8e9),
        verdict_cell("mamba2", "torch", "prefill", 1024, 5.0, 1e9),
        verdict_cell("s4d", "torch", "prefill", 1024, 4.0, 2e9),
        verdict_cell(
            "attention", "torch", "prefill", 256, 1.0, 1e9
        ),  # shorter: not the verdict's T
        verdict_cell("mamba2", "torch", "prefill", 256, 2.0, 1e8),
        verdict_cell("mamba", "fused", "prefill", 1024, None, 1e9, status="unavailable"),
    ]
)


def test_go_no_go_sentence_states_the_ratios_at_the_longest_shared_length():
    (sentence,) = analysis.go_no_go_sentences(analysis.go_no_go_table(CELLS))
    # attention / SSM: time 10/5 = 2.00 and 10/4 = 2.50; FLOPs 8 and 4; time over FLOPs
    # 2.00/8 = 0.25 and 2.50/4 = 0.625; no samples: no interval, no answer
    assert sentence.startswith(
        "Go/no-go, prefill at T = 1024, batch 1 (torch vs torch): attention over each SSM"
    )
    assert "mamba2 2.00x for 8.00x the FLOPs (0.25 of the FLOP ratio as speed)" in sentence
    assert "s4d 2.50x for 4.00x the FLOPs (0.62 of the FLOP ratio as speed)" in sentence
    assert "CI" not in sentence and "faster" not in sentence


def test_verdict_lists_status_go_no_go_fastest_backends_and_claims():
    claims = pd.DataFrame({"verdict": ["not comparable here", "reproduced", "reproduced"]})
    text = analysis.verdict_rst(CELLS, claims, analysis.go_no_go_table(CELLS))
    first, rest = text.split("\n\n", 1)
    assert first == "Run r planned 7 cells: 6 ok, 1 unavailable, 0 failed."
    points = rest.splitlines()
    assert all(p.startswith("- ") for p in points) and len(points) == 3
    assert "attention torch (10 ms at T = 1024, batch 1, 9.0x ahead of naive)" in points[1]
    assert (
        points[2]
        == "- Of 3 published claims checked against this run: 2 reproduced, 1 not comparable here."
    )


def test_two_runs_are_compared_point_by_point(tmp_path):
    import importlib.util

    from ssmbench.paths import REPO

    spec = importlib.util.spec_from_file_location(
        "compare_go_no_go", REPO / "scripts" / "compare_go_no_go.py"
    )
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    point = dict(phase="decode", batch=1, dtype="fp32", interval="hierarchical")
    a = pd.DataFrame(
        [
            dict(point, seq_len=4096, ssm="mamba2", latency_ratio=1.5, latency_lo=1.3,
                 latency_hi=1.7, answer="ssm faster"),
            dict(point, seq_len=4096, ssm="s4d", latency_ratio=0.9, latency_lo=0.8,
                 latency_hi=0.95, answer="attention faster"),
            dict(point, seq_len=1024, ssm="s4d", latency_ratio=1.0, latency_lo=0.9,
                 latency_hi=1.1, answer="inconclusive"),
        ]
    )  # fmt: skip
    b = a.copy()
    b.loc[1, ["latency_ratio", "latency_lo", "latency_hi", "answer"]] = [
        1.2,
        1.1,
        1.3,
        "ssm faster",
    ]
    b.loc[2, ["latency_ratio", "latency_lo", "latency_hi", "answer"]] = [
        1.3,
        1.2,
        1.4,
        "ssm faster",
    ]
    both = compare.compare(a, b)
    # s4d at 4096 flips; at 1024 one side is inconclusive: no flip, though neither covers
    assert both.flip.tolist() == [False, True, False]
    assert both.a_in_b.tolist() == [True, False, False]
    assert both.b_in_a.tolist() == [True, False, False]


def test_the_comparison_says_what_each_run_ran_on(tmp_path, monkeypatch, capsys):
    """Beside each go/no-go table, the run's cells table gives its commit and its load
    probe (the host's speed): the comparison prints both, and how much slower B's host was."""
    import importlib.util

    from ssmbench.paths import REPO

    spec = importlib.util.spec_from_file_location(
        "compare_go_no_go", REPO / "scripts" / "compare_go_no_go.py"
    )
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    point = dict(phase="decode", batch=1, dtype="fp32", seq_len=4096, ssm="mamba2",
                 interval="hierarchical", latency_ratio=1.5, latency_lo=1.3, latency_hi=1.7,
                 answer="ssm faster")  # fmt: skip
    for run, commit, probes in (("a", "a" * 40, [0.2, 0.25, 0.3]), ("b", "b" * 40, [0.3, 0.4])):
        (tmp_path / run).mkdir()
        pd.DataFrame([point]).to_csv(tmp_path / run / "go_no_go.csv", index=False)
        cells = pd.DataFrame(dict(probe_before_ms=probes, git_commit=commit))
        cells.to_csv(tmp_path / run / "cells.csv", index=False)
    tables_ = [str(tmp_path / run / "go_no_go.csv") for run in ("a", "b")]
    monkeypatch.setattr("sys.argv", ["compare_go_no_go.py", *tables_])
    compare.main()
    out = capsys.readouterr().out.splitlines()
    said = "(median [quartiles] over its cells)"
    assert out[0] == f"A: commit aaaaaaa, load probe 0.25 ms [0.225, 0.275] {said}"
    assert out[1] == f"B: commit bbbbbbb, load probe 0.35 ms [0.325, 0.375] {said}"
    assert out[2] == "host speed, B against A: the probe took 1.40x as long"
    assert out[3] == "the runs' code differs: a difference may be the code's, not the host's"
    assert out[4] == "1 points in both tables; 0 answers flip"
    # without a cells table beside it, a run says nothing of its host
    (tmp_path / "b" / "cells.csv").unlink()
    compare.main()
    out = capsys.readouterr().out.splitlines()
    assert (
        out[0].startswith("A: commit aaaaaaa")
        and out[1] == "1 points in both tables; 0 answers flip"
    )


# A node of two kinds of GPU (tests/gpufakes.py): whatever ran on one kind is never put in
# one ratio with what ran on the other.


def test_replicates_of_a_pair_on_two_device_kinds_are_two_rows_never_pooled():
    """Three replicate processes on H100s (true ratio 1.55), three on A100s (1.02): the
    pairs table and the go/no-go table have a row per kind with that kind's ratio, not
    the pooled median of the six (about 1.3)."""
    records = replicated("mamba2", [1.5, 1.6, 1.55, 1.0, 1.05, 1.02])
    for r in records:
        r.device = "cuda"
        r.device_name = H100 if r.replicate < 3 else A100
    pairs = tables.pairs_table(records)
    assert list(pairs.device_name) == [A100, H100]  # sorted by kind
    assert list(pairs.replicates_ok) == [3, 3]
    by_kind = pairs.set_index("device_name").latency_ratio
    assert by_kind[H100] == pytest.approx(1.55, rel=0.03)
    assert by_kind[A100] == pytest.approx(1.02, rel=0.03)
    cells, samples = go_no_go_cells(attention_ms=1.05)
    table = analysis.go_no_go_table(cells, samples=samples, paired=pairs)
    m2 = table[table.ssm == "mamba2"].set_index("device_name")
    assert sorted(m2.index) == [A100, H100]
    assert (m2.interval == "hierarchical").all() and (m2.replicates == 3).all()
    assert m2.latency_ratio[H100] == pytest.approx(by_kind[H100])
    assert m2.latency_ratio[A100] == pytest.approx(by_kind[A100])
    assert m2.answer[H100] == "ssm faster"
    text = " ".join(analysis.go_no_go_sentences(table))
    assert f"mamba2 on {H100} 1.5" in text and f"mamba2 on {A100} 1.0" in text
    # one kind: one row, as before
    one = tables.pairs_table(replicated("mamba2", [1.5, 1.6, 1.55], device_name=H100))
    assert len(one) == 1 and one.device_name.iloc[0] == H100


def test_separate_cells_on_two_device_kinds_give_no_ratio_and_say_where_each_ran():
    """Attention on an H100, Mamba-2 on an A100: the row keeps its FLOP ratio but has no
    latency or energy ratio and no answer, and names both devices; Mamba-1, on an H100
    like attention, has its ratio."""
    rng = np.random.default_rng(3)
    records = []
    for model, kind in (("attention", H100), ("mamba2", A100), ("mamba", H100)):
        samples = list(1.0 + 0.05 * rng.standard_normal(20))
        records.append(
            sampled_record(
                samples,
                model=model,
                phase="decode",
                seq_len=256,
                d_state=0 if model == "attention" else 16,
                device="cuda",
                device_name=kind,
                energy_j=1.0,
            )
        )
    cells, samples = tables.cells_table(records), tables.samples_table(records)
    table = analysis.go_no_go_table(cells, samples=samples).set_index("ssm")
    assert np.isnan(table.latency_ratio["mamba2"]) and np.isnan(table.latency_lo["mamba2"])
    assert np.isnan(table.energy_ratio["mamba2"]) and table.answer["mamba2"] == ""
    assert table.device_name["mamba2"] == f"attention: {H100}; mamba2: {A100}"
    assert table.flop_ratio["mamba2"] == pytest.approx(1.0)  # the same work either way
    assert table.latency_ratio["mamba"] == pytest.approx(
        cells.time_ms_median[0] / cells.time_ms_median[1]
    )  # attention over mamba (rows in KEYS order: attention, mamba, mamba2)
    assert table.device_name["mamba"] == H100 and table.energy_ratio["mamba"] == 1.0
    text = " ".join(analysis.go_no_go_sentences(table.reset_index()))
    assert f"mamba2: no ratio (attention: {H100}; mamba2: {A100})" in text


def test_a_cell_whose_processes_ran_on_two_kinds_names_both_and_gives_no_ratio():
    """A headline cell in three processes, two on an H100 and one on an A100: its row
    names both kinds, and neither the go/no-go nor a graph speed-up divides by it."""
    rng = np.random.default_rng(4)
    records = [
        sampled_record(
            list(1.0 + 0.05 * rng.standard_normal(20)),
            model="attention",
            phase="decode",
            seq_len=256,
            d_state=0,
            replicate=r,
            replicates=3,
            device="cuda",
            device_name=kind,
        )
        for r, kind in enumerate((H100, H100, A100))
    ]
    records.append(
        sampled_record([1.0, 1.1, 0.9], model="mamba", phase="decode", seq_len=256,
                       device="cuda", device_name=H100)
    )  # fmt: skip
    cells, samples = tables.cells_table(records), tables.samples_table(records)
    assert cells.set_index("model").device_name["attention"] == f"{A100}; {H100}"
    row = analysis.go_no_go_table(cells, samples=samples).iloc[0]
    assert row.ssm == "mamba" and np.isnan(row.latency_ratio) and row.answer == ""
    # an eager decode cell and its graph replay on two kinds: no speed-up
    twins = [
        sampled_record([3.0, 3.1, 2.9], model="mamba2", backend="torch", phase="decode",
                       device="cuda", device_name=H100),
        sampled_record([1.0, 1.1, 0.9], model="mamba2", backend="torch-graph",
                       phase="decode", device="cuda", device_name=A100),
    ]  # fmt: skip
    speedups = analysis.speedups_table(tables.cells_table(twins), tables.samples_table(twins))
    graph = speedups.iloc[0]
    assert graph.status == "unavailable" and np.isnan(graph.speedup)
    assert graph.reason == f"no ratio of two device kinds: torch on {H100}, torch-graph on {A100}"
