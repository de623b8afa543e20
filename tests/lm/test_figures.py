"""Whole-model (lm) tables through the figures and the claims: ``lm.table.cells_view`` and
``lm_ops_table``, the loaders the notebooks read with, the five SSM-Scope figures drawn
from an lm table, and SSM-Scope's claims judged on a CPU lm run.

The lm run is synthetic: records of three zoo models at T = 1024, 2048, 4096, built with
``lm_table`` (timings chosen so that the crossovers fall where the docstrings say), one
``oom`` and one ``unavailable`` cell; the operator profile is ``profile_lm_cell``'s, run
for real at the ``ci`` size in a fresh hf-eager process."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from ssmbench import claims, figures, tables
from ssmbench.figures.data import load_cells, load_ops
from ssmbench.lm.record import LMRecord
from ssmbench.lm.table import cells_view, lm_ops_table, lm_table, write_lm_tables
from ssmbench.paths import REPO
from tests.conftest import NOTEBOOKS, draw_notebook

CPU = "Intel(R) Xeon(R) Processor"
LENGTHS = (1024, 2048, 4096)
N = 16  # generate(N) of every decode cell
# (model, preset) -> per T: TTFT ms, TPOT ms.  Qwen2.5-0.5B's TTFT grows 3x per doubling
# of T and Mamba2-780m's 2x, so the two cross once between 2048 and 4096; likewise their
# TPOTs (Qwen's grows, Mamba-2's is flat).  Falcon-H1 (hybrid) crosses no line: only
# recurrent-family lines against attention ones are marked.
TIMES = {
    ("qwen2.5-0.5b", "full"): {1024: (1.0, 0.5), 2048: (3.0, 0.6), 4096: (9.0, 0.8)},
    ("mamba2-780m", "full"): {1024: (2.0, 0.7), 2048: (4.0, 0.7), 4096: (8.0, 0.7)},
    ("falcon-h1-0.5b", "full"): {1024: (1.5, 0.6), 2048: (3.5, 0.6)},
    ("mamba-130m", "ci"): {1024: (0.5, 0.3)},
}
FAMILY = {"qwen2.5-0.5b": "transformer", "falcon-h1-0.5b": "hybrid"}


def record(model, preset, phase, seq_len, ms, **kw) -> LMRecord:
    """An ok record of one cell: samples around ``ms``, a memory split that adds up (the
    cache linear in T), and energy for prefill cells only (decode: its reason)."""
    batch = 1
    samples = [ms * f for f in (0.98, 1.0, 1.01, 1.1)]
    weights, cache = 1e8 + len(model), 4096.0 * seq_len
    base = dict(
        run="lm-cpu",
        model=model,
        backend="hf-eager",
        phase=phase,
        batch=batch,
        seq_len=seq_len,
        new_tokens=1 if phase == "prefill" else N,
        dtype="fp32",
        device="cpu",
        preset=preset,
        family=FAMILY.get(model, "ssm"),
        device_name=CPU,
        samples_ms=samples,
        n_samples=len(samples),
        weights_bytes=weights,
        cache_bytes=cache,
        cache_formula_bytes=cache,
        activations_bytes=2.0 * cache,
        peak_bytes=weights + 3.0 * cache,
    )
    median, p95 = float(np.median(samples)), float(np.percentile(samples, 95))
    if phase == "prefill":
        energy_j = 0.01 * ms
        base.update(ttft_ms_median=median, ttft_ms_p95=p95)
        base.update(tokens_per_s=batch * seq_len / (median / 1e3))
        base.update(energy_j=energy_j, energy_j_per_token=energy_j / (batch * seq_len))
    else:
        base.update(tpot_ms_median=median, tpot_ms_p95=p95, tokens_per_s=batch / (median / 1e3))
        base.update(energy_reason="decode energy not measured in this synthetic run")
    return LMRecord(**{**base, **kw})


def not_ok(model, preset, phase, seq_len, status, reason, backend="hf-eager") -> LMRecord:
    none = dict(samples_ms=[], n_samples=0, ttft_ms_median=None, ttft_ms_p95=None)
    none.update(tokens_per_s=None, energy_j=None, energy_j_per_token=None)
    none.update({c: None for c in ("weights_bytes", "cache_bytes", "activations_bytes")})
    return record(
        model, preset, phase, seq_len, 1.0, status=status, reason=reason, peak_bytes=None,
        backend=backend, **none,
    )  # fmt: skip


def records() -> list[LMRecord]:
    found = [
        record(model, preset, phase, t, ms)
        for (model, preset), times in TIMES.items()
        for t, both in times.items()
        for phase, ms in zip(("prefill", "decode"), both, strict=True)
    ]
    found.append(not_ok("falcon-h1-0.5b", "full", "prefill", 4096, "oom", "out of memory"))
    found.append(
        not_ok(
            "qwen2.5-0.5b", "full", "prefill", 1024, "unavailable",
            "hf-kernels needs a CUDA device", backend="hf-kernels",
        )
    )  # fmt: skip
    return found


@pytest.fixture(scope="module")
def lm() -> pd.DataFrame:
    return lm_table(records())


@pytest.fixture(scope="module")
def view(lm) -> pd.DataFrame:
    return cells_view(lm)


def row(table: pd.DataFrame, **keys) -> pd.Series:
    (found,) = table[np.logical_and.reduce([table[k] == v for k, v in keys.items()])].itertuples()
    return pd.Series(found._asdict())


# ---------------------------------------------------------------------------------------
# The cells view.


def test_the_cells_view_maps_each_number_of_each_record(view):
    tables.CELLS_SCHEMA.validate(view)  # what the figures and the claims read
    assert len(view) == len(records())
    for r in records():
        v = row(view, model=r.model, backend=r.backend, phase=r.phase, seq_len=r.seq_len)
        median, p95 = (
            (r.ttft_ms_median, r.ttft_ms_p95)
            if r.phase == "prefill"
            else (r.tpot_ms_median, r.tpot_ms_p95)
        )
        for ours, theirs in (("time_ms_median", median), ("time_ms_p95", p95)):
            assert (math.isnan(v[ours]) and theirs is None) or v[ours] == theirs, (r, ours)
        assert (v.status, v.reason, v.n_samples) == (r.status, r.reason, r.n_samples)
        assert (v.device, v.device_name, v.run, v["dtype"]) == ("cpu", CPU, "lm-cpu", "fp32")
        for col in ("peak_bytes", "weights_bytes", "cache_bytes", "activations_bytes"):
            assert v[col] == getattr(r, col) or (math.isnan(v[col]) and getattr(r, col) is None)
        assert v.cache_bytes_analytic == r.cache_formula_bytes
        if r.status == "ok":  # the throughput figure's tokens / time is the record's
            assert v.tokens / (v.time_ms_median / 1e3) == pytest.approx(r.tokens_per_s)
            energy = v.energy_j_per_token
            assert energy == r.energy_j_per_token or (math.isnan(energy) and r.phase == "decode")
    families = view.groupby("model")[["family", "d_state"]].first().T.to_dict()
    assert families == {
        "qwen2.5-0.5b": {"family": "attention", "d_state": 0},
        "mamba2-780m": {"family": "mamba2", "d_state": 128},  # its config's state_size
        "falcon-h1-0.5b": {"family": "hybrid", "d_state": 0},
        "mamba-130m": {"family": "mamba", "d_state": 16},  # the ci preset keeps 16
    }
    # nothing the lm table lacks is made up: counts, utilization, clocks, the size preset
    for col in ("flop", "bytes", "tflops", "compute_util", "sm_clock_before_mhz", "threads"):
        assert view[col].isna().all(), col
    assert view[tables.SIZE_COLUMNS].isna().all().all()
    assert set(view.compute_dtype) == set(view.memory_method) == {""}


def test_the_view_refuses_two_decode_cells_at_one_context_and_unknown_models():
    twins = [record("mamba2-780m", "full", "decode", 1024, 0.7, new_tokens=n) for n in (8, 16)]
    with pytest.raises(ValueError, match=r"at new_tokens \[8, 16\] .*select one new_tokens"):
        cells_view(lm_table(twins))
    with pytest.raises(ValueError, match="lm model 'gpt-9': .*no model 'gpt-9'"):
        cells_view(lm_table([record("gpt-9", "full", "prefill", 1024, 1.0)]))


# ---------------------------------------------------------------------------------------
# The five figures, from the view.


def test_the_crossover_figure_finds_the_crossovers_built_into_the_timings(view, tmp_path):
    """Prefill: between T = 2048 and 4096 Qwen's TTFT goes 3 -> 9 ms and Mamba2-780m's
    4 -> 8 ms.  On log-log axes both are straight there; with u the fraction of the way
    in log T, log 3 + u log 3 = log 4 + u log 2, so u = log(4/3) / log(3/2) = 0.70951 and
    T = 2048 * 2**u = 3349.0.  Decode: Qwen's TPOT 0.6 -> 0.8 ms against a flat 0.7 ms,
    u = log(0.7/0.6) / log(0.8/0.6) = 0.53584, T = 2048 * 2**u = 2969.2.  No other pair
    crosses (Mamba-130m is one point; Falcon-H1 is a hybrid)."""
    points = figures.crossovers(view).set_index("phase")
    assert len(points) == 2
    assert points.loc["prefill", "seq_len"] == pytest.approx(3349.0, abs=0.1)
    assert points.loc["decode", "seq_len"] == pytest.approx(2969.2, abs=0.1)
    assert points.loc["prefill", "recurrent"] == "mamba2-780m / hf-eager"
    assert points.loc["prefill", "attention"] == "qwen2.5-0.5b / hf-eager"
    fig = figures.draw("ttft_tpot_crossover", view)
    for ax in fig.axes[:2]:
        (star,) = [line for line in ax.get_lines() if line.get_marker() == "*"]
        labels = [t.get_text() for t in ax.texts]
        assert any(t.startswith("mamba2-780m = qwen2.5-0.5b\nT ≈ ") for t in labels), labels
    marked = {c.get_label() for c in fig.axes[0].collections}
    assert {"falcon-h1-0.5b: oom", "qwen2.5-0.5b: unavailable"} <= marked
    figures.save(fig, tmp_path / "x.png")
    plt.close(fig)


def lines_of(ax) -> dict[str, tuple[list, list]]:
    return {
        line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }


def test_throughput_draws_each_records_tokens_per_second(view):
    fig = figures.draw("throughput", view)
    prefill, decode = fig.axes[:2]
    for ax, phase in ((prefill, "prefill"), (decode, "decode")):
        x, y = lines_of(ax)["qwen2.5-0.5b / hf-eager"]
        expected = [
            r.tokens_per_s
            for r in records()
            if r.model == "qwen2.5-0.5b" and r.phase == phase and r.status == "ok"
        ]
        assert x == list(LENGTHS) and y == pytest.approx(expected)
    plt.close(fig)


def test_prefill_energy_per_token_shows_and_decode_says_why(view):
    fig = figures.draw("energy_per_token", view)
    prefill, decode = fig.axes[:2]
    x, y = lines_of(prefill)["mamba2-780m / hf-eager"]
    assert x == list(LENGTHS) and y == pytest.approx([0.02 / 1024, 0.04 / 2048, 0.08 / 4096])
    words = " ".join(t.get_text() for t in decode.texts).replace("\n", " ")
    assert "energy not measured here: decode energy not measured" in words
    plt.close(fig)


def test_the_memory_footprint_has_a_panel_per_model_and_its_oom(view):
    fig = figures.draw("memory_footprint", view)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert set(titles) == {"qwen2.5-0.5b", "mamba2-780m", "falcon-h1-0.5b", "mamba-130m"}
    assert "hf-eager" in fig._suptitle.get_text()  # the backend the table has, not torch
    (falcon,) = [ax for ax in fig.axes if ax.get_title() == "falcon-h1-0.5b"]
    assert "oom" in [t.get_text() for t in falcon.texts]
    plt.close(fig)


PROFILE_CHILD = """
import json, sys
from ssmbench.lm import backends
backends.prepare("hf-eager")  # first thing, as `python -m ssmbench lm-cell` does
from ssmbench.config import Timing
from ssmbench.lm.cell import LMCellSpec, profile_lm_cell
timing = Timing(warmup=1, min_samples=1, max_samples=1, min_time_s=0.0, max_time_s=1.0)
rows = []
for model, phase, n in (("mamba2-130m", "prefill", 1), ("qwen2.5-0.5b", "decode", 4)):
    spec = LMCellSpec(model=model, backend="hf-eager", phase=phase, batch=1, seq_len=32,
                      new_tokens=n, dtype="fp32", device="cpu", preset="ci", timing=timing,
                      run="lm-cpu")
    rows += profile_lm_cell(spec, threads=1, iters=1)
print(json.dumps(rows))
"""


@pytest.fixture(scope="module")
def profiled() -> list[dict]:
    """profile_lm_cell's rows of two ci-size cells, in one fresh hf-eager process (~10 s)."""
    src = str(REPO / "src")
    out = subprocess.run(
        [sys.executable, "-c", PROFILE_CHILD],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join((src, str(REPO)))},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_lm_ops_table_is_an_ops_table_that_op_breakdown_draws(profiled, tmp_path):
    ops = lm_ops_table(profiled)
    tables.OPS_SCHEMA.validate(ops)
    assert len(ops) == len(profiled) and set(ops.status) == {"ok"}
    assert dict(ops.groupby("model").d_state.first()) == {"mamba2-130m": 16, "qwen2.5-0.5b": 0}
    assert set(ops.time_basis) == {"cpu_self"}
    for (model, phase), cell in ops.groupby(["model", "phase"]):
        assert cell.share.sum() == pytest.approx(1.0), (model, phase)
    path = tmp_path / "lm_ops.csv"
    tables.write_ops(ops.to_dict("records"), path)  # the ops table's own writer and reader
    back = load_ops(path)
    pd.testing.assert_frame_equal(back, ops, check_dtype=False)
    fig = figures.draw("op_breakdown", back)
    titles = {ax.get_title().split("\n")[0] for ax in fig.axes if ax.get_title()}
    assert titles == {"mamba2-130m / hf-eager, prefill", "qwen2.5-0.5b / hf-eager, decode"}
    plt.close(fig)


def test_lm_ops_table_keeps_a_status_row_and_refuses_two_rows_of_one_bucket(profiled):
    failed = {**profiled[0], "status": "oom", "reason": "out of memory", "seq_len": 64}
    failed.update(bucket=None, time_ms=None, share=None, n_kernels=None, top_kernels=None)
    ops = lm_ops_table([*profiled, failed])
    assert ops[ops.seq_len == 64].status.tolist() == ["oom"]
    with pytest.raises(ValueError, match="lm profile rows: not a valid ops table"):
        lm_ops_table([profiled[0], profiled[0]])


# ---------------------------------------------------------------------------------------
# The loaders and a notebook.


def test_load_cells_tells_an_lm_table_from_a_cells_table(lm, view, tmp_path):
    write_lm_tables(lm, tmp_path / "lm.csv", tmp_path / "lm.parquet")
    for name in ("lm.csv", "lm.parquet"):
        pd.testing.assert_frame_equal(load_cells(tmp_path / name), view, check_dtype=False)
    # a figure's table has the figure's name: the columns tell, not the name
    (tmp_path / "ttft_tpot_crossover.csv").write_bytes((tmp_path / "lm.csv").read_bytes())
    assert len(load_cells(tmp_path / "ttft_tpot_crossover.csv")) == len(view)
    view.to_csv(tmp_path / "cells.csv", index=False)  # the view written is a cells table
    assert len(load_cells(tmp_path / "cells.csv")) == len(view)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: t.drop(columns="layer_impls"), "not a valid lm table: no column 'layer_impls'"),
        (lambda t: t.assign(ttft_ms_median=-1.0), "not a valid lm table"),
        (lambda t: t.assign(model=t.model.replace("mamba-130m", "gpt-9")), "lm model 'gpt-9'"),
    ],
    ids=["missing-column", "negative-ttft", "unknown-model"],
)
def test_load_cells_refuses_a_bad_lm_table_naming_the_file(lm, tmp_path, change, message):
    path = tmp_path / "lm.csv"
    change(lm).to_csv(path, index=False)
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: .*{re.escape(message)}"):
        load_cells(path)
    with pytest.raises(FileNotFoundError, match="absent.csv does not exist"):
        load_cells(tmp_path / "absent.csv")


def test_the_crossover_notebook_draws_an_lm_table(lm, tmp_path):

    write_lm_tables(lm, tmp_path / "lm.csv", tmp_path / "lm.parquet")
    draw_notebook("ttft_tpot_crossover", tmp_path / "lm.csv", tmp_path)


def test_every_ssm_scope_notebook_reads_its_table_through_the_loader():
    for name, loader in {
        "ttft_tpot_crossover": "load_cells(cells_path)",
        "memory_footprint": "load_cells(cells_path)",
        "throughput": "load_cells(cells_path)",
        "energy_per_token": "load_cells(cells_path)",
        "op_breakdown": "load_ops(ops_path)",
    }.items():
        notebook = json.loads(Path(NOTEBOOKS / f"{name}.ipynb").read_text())
        code = "".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
        words = "".join(notebook["cells"][0]["source"])
        assert loader in code, name
        assert "lm" in words and "SSM-Scope" in words, name


# ---------------------------------------------------------------------------------------
# SSM-Scope's claims on the lm run.


def test_ssm_scope_claims_on_a_cpu_lm_run_are_shown_for_reference(view):
    judged = claims.evaluate(view, "lm-cpu").set_index("id")
    short = judged.loc["ssm-scope-short-context"]
    # up to 1.9x: the largest TTFT ratio of Mamba2-780m over Qwen2.5-0.5B at T < 8K is at
    # T = 1024 (2.0 / 1.0; 4 / 3 at 2048, 8 / 9 at 4096), taken on the samples' medians
    assert short.ours == pytest.approx(2.0) and short.verdict == "not comparable here"
    assert short.cells == "mamba2-780m/hf-eager vs qwen2.5-0.5b/hf-eager prefill at b1 T1024"
    assert short.why == (
        "measured on NVIDIA GeForce RTX 4090 (24 GB) and Jetson edge GPUs; this run's device "
        f"is cpu ({CPU}) (ours shown for reference)"
    )
    long = judged.loc["ssm-scope-long-context"]
    assert long.verdict == "not comparable here" and pd.isna(long.ours)
    assert long.why.endswith("; no shared T at T = 57344 (longest shared: 4096)")
    # a claim that needs a GPU and says nothing else keeps ours empty on a CPU
    assert judged.loc["mamba-inference-throughput", "why"].startswith("needs a cuda run")


def test_ssm_scope_claims_are_judged_on_their_hardware(view):
    on_4090 = view.assign(device="cuda", device_name="NVIDIA GeForce RTX 4090")
    short = claims.evaluate(on_4090, "lm-4090").set_index("id").loc["ssm-scope-short-context"]
    assert short.verdict == "reproduced" and short.why == ""  # |2.0 / 1.9 - 1| < 10 %


def test_a_claim_with_an_unknown_otherwise_is_refused(tmp_path):
    bad = tmp_path / "claims.yaml"
    bad.write_text(
        "claims:\n  - {id: a, claim: b, source: {paper: p, where: w}, hardware: h,"
        " published: [1, 2], compare: within, metric: {name: best},"
        " requires: {device: cuda, otherwise: judge}}\n"
    )
    with pytest.raises(ValueError, match="claim a: requires.otherwise must be 'reference'"):
        claims.load(bad)
