"""SSM-Scope's published data as ssm-bench runs, and the two figures that compare families.

The real clone (``SSM_SCOPE_DIR``, default ssm-scope/ in the anchors of tests/conftest.py)
is used when it is there; a small clone written here in SSM-Scope's own file formats
always is.
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from ssmbench import claims, figures, tables
from ssmbench.figures.style import FAMILY_COLORS
from ssmbench.importers.ssm_scope import (
    CATEGORY_FILES,
    MIB,
    RUNS,
    SSMScopeFormatError,
    cells_schema,
    import_ssm_scope,
    write_runs,
)
from tests.conftest import ANCHORS, NOTEBOOKS, draw_notebook

REAL = Path(os.environ.get("SSM_SCOPE_DIR") or ANCHORS / "ssm-scope")
GENERATION = "ispass_ae/notebooks/generation_times.csv"
MEMORY = "ispass_ae/notebooks/memory_footprints.csv"
MEMORY_JETSON = "ispass_ae/notebooks/memory_footprints_jetson.csv"
PROFILE = "profile_data/mamba-130m_cuda_1_1024"


# ---------------------------------------------------------------------------------------
# A small clone in their formats.

LENGTHS = (1024, 2048, 4096, 8192)


def attention_prefill_ms(t):  # slope 2 on log-log
    return t * t / 2**16


def mamba2_prefill_ms(t):  # slope 1, 1.5x T/16: crosses attention at T = 6144
    return 1.5 * t / 16


def attention_tpot_s(t):
    return 0.010 * (1 + t / 4096)


MAMBA2_TPOT_S = 0.018  # flat: crosses attention between T = 2048 and 4096

# (operator, category file or None for none, cuda us over 10 forwards, count)
OPERATORS = [
    ("aten::linear", "gemm.csv", 2000.0, 10),
    ("aten::scaled_dot_product_attention", "gemm.csv", 500.0, 10),
    ("mambainnerfn", "ssm_scan.csv", 3000.0, 240),
    ("causalconv1dfn", "ssm_scan.csv", 400.0, 240),
    ("layernormfn", "nomralization.csv", 300.0, 250),
    ("aten::add", "arithmetic.csv", 100.0, 20),
    ("aten::to", "memory.csv", 200.0, 30),
    ("torch-compiled region: 0/1", None, 1000.0, 10),
]
FORWARDS = 10


def write_rows(path: Path, header: list[str], rows: list[list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def write_profile(folder: Path) -> None:
    """One profile folder as their ``generate_report`` leaves it."""
    cols = ["name", "cpu_time (us)", "cuda_time (us)", "total_time (us)", "count"]
    main = [["profilerstep*", 0.0, 0.0, 0.0, 0.0], ["inference_prof", 900.0, 7505.0, 8405.0, 10]]
    main += [[op, 50.0, us, us + 50.0, n] for op, _, us, n in OPERATORS]
    main += [["cudadevicesynchronize", 70.0, 5.0, 75.0, 10]]
    main += [["GEMM", 1.0, 2500.0, 2501.0, ""], ["NonGEMM", 1.0, 1.0, 2.0, ""]]
    write_rows(folder / f"{folder.name}.csv", ["", *cols], [[i, *r] for i, r in enumerate(main)])
    for file, category in CATEGORY_FILES.items():
        ops = [[op, 50.0, us, us + 50.0, n] for op, f, us, n in OPERATORS if f == file]
        total = sum(r[2] for r in ops)
        if file in ("gemm.csv", "ssm_scan.csv"):
            rows = ops + [
                [category, 0.0, total, total, ""],
                ["Inference", 900.0, 7505.0, 8405.0, ""],
            ]
            write_rows(folder / file, ["", *cols], [[i, *r] for i, r in enumerate(rows)])
        else:
            rows = [[i, *r] for i, r in enumerate(ops)] + [[9, category, 0.0, total, total, 1]]
            write_rows(
                folder / file, ["", "Unnamed: 0", *cols], [[i, *r] for i, r in enumerate(rows)]
            )


def make_clone(root: Path) -> Path:
    gen = []
    for t in LENGTHS:
        for short, prefill_s, tpot_s in (
            ("qwen25-instruct", attention_prefill_ms(t) / 1e3, attention_tpot_s(t)),
            ("mamba2", mamba2_prefill_ms(t) / 1e3, MAMBA2_TPOT_S),
        ):
            decode_s = tpot_s * 256
            gen.append(
                [f"gen_{short}_cuda_256_{t}", t, 256, prefill_s, decode_s, prefill_s + decode_s]
                + [tpot_s, 256 / decode_s, "cuda", "2025-12-15 02:19:47"]
            )
    write_rows(
        root / GENERATION,
        "model_name,input_seq_length,output_tokens,prefill_time_seconds,decode_time_seconds,"
        "total_time_seconds,tpot_seconds,throughput_tokens_per_sec,device,timestamp".split(","),
        gen,
    )
    header = (
        "model_name,model_config,seq_len,batch_size,model_size_mb,activation_memory_mb,"
        "kv_cache_mb,reserved_memory_mb,total_memory_mb".split(",")
    )
    write_rows(
        root / MEMORY,
        header,
        [
            [
                "mamba2-780m",
                "state-spaces/mamba2-780m",
                1024,
                1,
                1488.04,
                110.24,
                0,
                1770.0,
                1598.28,
            ],
            ["mamba-790m", "state-spaces/mamba-790m", 512, 1, 1512.92, 60.3, 0, 2026.0, 1573.22],
            ["qwen25-instruct", "Qwen/Qwen2.5-0.5B-Instruct", 1024, 1, 942.29, 306.67, 12.0]
            + [1526.0, 1260.96],
            ["falcon-h1-0.5b", "tiiuae/Falcon-H1-0.5B-Base", 256, 1, 994.51, 271.2, -230.26]
            + [1050.0, 1035.45],
        ],
    )
    write_rows(
        root / MEMORY_JETSON,
        header,
        [
            [
                "zamba2",
                "Zyphra/Zamba2-1.2B-Instruct-v2",
                256,
                1,
                2317.55,
                50.82,
                50.0,
                3880.0,
                2418.37,
            ]
        ],
    )
    write_profile(root / PROFILE)
    write_profile(root / "profile_data_jetson" / "mamba-130m_cuda_1_1024")
    (root / "profile_data" / "mamba_breakdown.csv").write_text(",256\nGEMM,1.0\n")  # not a run
    return root


@pytest.fixture
def clone(tmp_path) -> Path:
    return make_clone(tmp_path / "ssm-scope")


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> dict:
    return import_ssm_scope(make_clone(tmp_path_factory.mktemp("clone") / "ssm-scope"))


@pytest.fixture(scope="module")
def real() -> dict:
    if not REAL.is_dir():
        pytest.skip(f"no SSM-Scope clone at {REAL} (set SSM_SCOPE_DIR)")
    return import_ssm_scope(REAL)


def one(table: pd.DataFrame, **where) -> pd.Series:
    rows = table
    for col, value in where.items():
        rows = rows[rows[col] == value]
    assert len(rows) == 1, where
    return rows.iloc[0]


# ---------------------------------------------------------------------------------------
# The importer on the small clone: values, units, buckets, errors.


def test_small_clone_gives_both_runs_with_valid_tables(synthetic):
    assert set(synthetic) == set(RUNS) == {"ssm-scope-rtx4090", "ssm-scope-jetson"}
    for found in synthetic.values():
        cells_schema().validate(found["cells"])
        tables.OPS_SCHEMA.validate(found["ops"])
        assert list(found["ops"].columns) == tables.OPS_COLUMNS
    # what the cells table needs beyond CELLS_SCHEMA: nullable sizes and a family column
    assert set(cells_schema().columns) - set(tables.CELLS_SCHEMA.columns) <= {"family"}
    # each run's device as the device catalogue names it (config/devices.yaml)
    kinds = {run: set(found["cells"].device_kind) for run, found in synthetic.items()}
    assert kinds == {
        "ssm-scope-rtx4090": {"RTX 4090"},
        "ssm-scope-jetson": {"Jetson Orin Nano 8GB"},
    }


def test_generation_times_become_prefill_and_decode_cells(synthetic):
    cells = synthetic["ssm-scope-rtx4090"]["cells"]
    prefill = one(cells, model="qwen25-instruct", phase="prefill", seq_len=2048)
    assert prefill.time_ms_median == pytest.approx(attention_prefill_ms(2048))  # s -> ms
    assert prefill.time_ms_p95 == prefill.time_ms_median and prefill.n_samples == 1
    assert (prefill.tokens, prefill.batch, prefill.status) == (2048, 1, "ok")
    assert (prefill.backend, prefill["dtype"], prefill.family) == ("hf", "bf16", "attention")
    decode = one(cells, model="mamba2-780m", phase="decode", seq_len=8192)  # renamed "mamba2"
    assert decode.time_ms_median == pytest.approx(MAMBA2_TPOT_S * 1e3)  # decode / 256, in ms
    assert (decode.tokens, decode.backend, decode["dtype"], decode.d_state) == (
        1,
        "mamba_ssm",
        "fp16",
        128,
    )
    assert decode.device == "cuda" and decode.device_name == "NVIDIA GeForce RTX 4090"
    assert cells.d_model.isna().all() and cells.flop.isna().all() and cells.energy_j.isna().all()


def test_memory_fills_timed_cells_and_untimed_rows_are_unavailable(synthetic):
    cells = synthetic["ssm-scope-rtx4090"]["cells"]
    qwen = one(cells, model="qwen25-instruct", phase="prefill", seq_len=1024)
    assert qwen.status == "ok"
    assert qwen.peak_bytes == pytest.approx(1260.96 * MIB)  # MiB -> bytes
    assert qwen.weights_bytes == pytest.approx(942.29 * MIB)
    assert qwen.cache_bytes == pytest.approx(12.0 * MIB)
    assert qwen.activations_bytes == pytest.approx(306.67 * MIB)
    mamba2 = one(cells, model="mamba2-780m", phase="prefill", seq_len=1024)
    assert mamba2.status == "ok" and math.isnan(mamba2.cache_bytes)  # 0 by rule, not measured
    untimed = one(cells, model="mamba-790m", seq_len=512)
    assert untimed.status == "unavailable" and "no latency" in untimed.reason
    assert math.isnan(untimed.time_ms_median) and untimed.n_samples == 0
    assert untimed.peak_bytes == pytest.approx(1573.22 * MIB) and untimed.family == "mamba"
    falcon = one(cells, model="falcon-h1-0.5b", seq_len=256)
    assert math.isnan(falcon.cache_bytes) and "kv_cache_mb -230.26 < 0" in falcon.memory_method
    jetson = synthetic["ssm-scope-jetson"]["cells"]
    assert set(jetson.status) == {"unavailable"}
    assert set(jetson.device_name) == {"NVIDIA Jetson Orin Nano (8 GB)"}


def test_operator_categories_map_to_our_buckets_on_device_time(synthetic):
    ops = synthetic["ssm-scope-rtx4090"]["ops"]
    assert set(ops.model) == {"mamba-130m"} and set(ops.time_basis) == {"cuda_device"}
    by_bucket = ops.set_index("bucket")
    expected_us = {  # summed over 10 forwards
        "gemm": 2000.0,
        "attention": 500.0,  # their GEMM file, our attention bucket
        "ssm_scan": 3000.0,
        "convolution": 400.0,  # their SSM_Scan file, our convolution bucket
        "normalization": 300.0,
        "elementwise": 300.0,  # arithmetic + memory
        "other": 1000.0,  # in no category file; the harness's sync is left out
    }
    assert set(by_bucket.index) == set(expected_us)
    for bucket, us in expected_us.items():
        assert by_bucket.time_ms[bucket] == pytest.approx(us / 1e3 / FORWARDS)  # us -> ms each
    assert by_bucket.share.sum() == pytest.approx(1.0)
    assert by_bucket.share["ssm_scan"] == pytest.approx(3000 / 7500)
    assert by_bucket.n_kernels["convolution"] == pytest.approx(24)
    assert by_bucket.top_kernels["elementwise"] == "aten::to;aten::add"
    row = by_bucket.loc["gemm"]
    assert (row.phase, row.batch, row.seq_len, row.d_state, row["dtype"]) == (
        "prefill",
        1,
        1024,
        16,
        "fp16",
    )


def replace_in(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(
    "file, column, break_it",
    [
        pytest.param(
            GENERATION,
            "prefill_time_seconds",
            lambda p: replace_in(p, "prefill_time_seconds", "prefill_s"),
            id="renamed-column",
        ),
        pytest.param(
            MEMORY,
            "total_memory_mb",
            lambda p: replace_in(p, "1598.28", "lots"),
            id="text-in-a-number-column",
        ),
        pytest.param(
            f"{PROFILE}/mamba-130m_cuda_1_1024.csv",
            "cuda_time (us)",
            lambda p: replace_in(p, ",2000.0,", ",2 ms,"),
            id="profile-time-not-a-number",
        ),
        pytest.param(
            f"{PROFILE}/ssm_scan.csv",
            "name",
            lambda p: replace_in(p, ",name,", ",op,"),
            id="category-file-without-names",
        ),
        pytest.param(
            GENERATION,
            "tpot_seconds",
            lambda p: replace_in(p, ",0.0125,", ",0.5,"),
            id="tpot-disagrees-with-decode-time",
        ),
    ],
)
def test_a_malformed_column_names_the_file_and_the_column(clone, file, column, break_it):
    break_it(clone / file)
    with pytest.raises(SSMScopeFormatError) as caught:
        import_ssm_scope(clone)
    assert caught.value.path == clone / file and caught.value.column == column
    assert str(clone / file) in str(caught.value) and repr(column) in str(caught.value)


@pytest.mark.parametrize(
    "file", [GENERATION, MEMORY_JETSON, f"{PROFILE}/nomralization.csv"], ids=["gen", "mem", "cat"]
)
def test_a_missing_file_is_named(clone, file):
    (clone / file).unlink()
    with pytest.raises(SSMScopeFormatError, match="file not found") as caught:
        import_ssm_scope(clone)
    assert caught.value.path == clone / file and str(clone / file) in str(caught.value)


def test_an_unknown_model_is_named_with_its_file(clone):
    replace_in(clone / MEMORY, "mamba-790m,state-spaces/mamba-790m", "mamba-9b,state-spaces/x")
    with pytest.raises(SSMScopeFormatError, match="unknown model 'mamba-9b'") as caught:
        import_ssm_scope(clone)
    assert caught.value.path == clone / MEMORY and caught.value.column == "model_name"


def test_write_runs_writes_the_precollected_layout_with_provenance(clone, tmp_path):
    written = write_runs(clone, tmp_path / "out")
    for run in RUNS:
        tables_dir = tmp_path / "out" / run / "tables"
        assert written[run] == {
            name: str(tables_dir / f"{name}.csv") for name in ("cells", "ops", "claims")
        }
        cells = pd.read_csv(tables_dir / "cells.csv")
        cells_schema().validate(cells)
        tables.read_ops(tables_dir / "ops.csv")
        judged = pd.read_csv(tables_dir / "claims.csv")
        assert list(judged.columns) == claims.COLUMNS and set(judged.run) == {run}
        # every claim but the quality axis's, which a run without tasks is not judged on
        assert len(judged) == sum(not claims.is_task_claim(c) for c in claims.load())
        sidecar = json.loads((tables_dir / "cells.csv.prov.json").read_text())
        assert sidecar["rule"] == "import_ssm_scope"
        profile = clone / RUNS[run].profiles / "mamba-130m_cuda_1_1024" / "gemm.csv"
        assert (
            str(profile) in sidecar["inputs"] and str(clone / RUNS[run].memory) in sidecar["inputs"]
        )


# ---------------------------------------------------------------------------------------
# The importer on the real clone.


def raw_rows(relative: str) -> list[dict]:
    with open(REAL / relative, newline="") as f:
        return [r for r in csv.DictReader(f) if any(r.values())]


def test_real_clone_gives_both_runs_with_valid_tables(real):
    assert set(real) == {"ssm-scope-rtx4090", "ssm-scope-jetson"}
    rtx, jetson = real["ssm-scope-rtx4090"], real["ssm-scope-jetson"]
    for found in real.values():
        cells_schema().validate(found["cells"])
        tables.OPS_SCHEMA.validate(found["ops"])
    timed = rtx["cells"][rtx["cells"].status == "ok"]
    assert set(timed.model) == {"qwen25-instruct", "mamba2-780m", "falcon-h1-0.5b"}
    assert len(timed) == 2 * len(raw_rows(GENERATION))
    # every timed prefill cell has a memory row: one prefill cell per memory row
    assert len(rtx["cells"][rtx["cells"].phase == "prefill"]) == len(raw_rows(MEMORY))
    assert len(jetson["cells"]) == len(raw_rows(MEMORY_JETSON))
    assert {"mamba-130m", "mamba2-130m", "hymba", "zamba2", "llama3_2"} <= set(rtx["ops"].model)
    assert set(jetson["ops"].device_name) == {"NVIDIA Jetson Orin Nano (8 GB)"}


def test_real_numbers_match_the_raw_files(real):
    cells = real["ssm-scope-rtx4090"]["cells"]
    (gen,) = [
        r for r in raw_rows(GENERATION) if r["model_name"] == "gen_qwen25-instruct_cuda_256_32768"
    ]
    prefill = one(cells, model="qwen25-instruct", phase="prefill", seq_len=32768)
    decode = one(cells, model="qwen25-instruct", phase="decode", seq_len=32768)
    assert prefill.time_ms_median == pytest.approx(float(gen["prefill_time_seconds"]) * 1e3)
    assert decode.time_ms_median == pytest.approx(float(gen["tpot_seconds"]) * 1e3)
    assert decode.tokens / (decode.time_ms_median / 1e3) == pytest.approx(
        float(gen["throughput_tokens_per_sec"])
    )
    (mem,) = [
        r
        for r in raw_rows(MEMORY)
        if r["model_name"] == "qwen25-instruct" and r["seq_len"] == "32768"
    ]
    assert prefill.peak_bytes == pytest.approx(float(mem["total_memory_mb"]) * MIB)
    assert prefill.cache_bytes == pytest.approx(float(mem["kv_cache_mb"]) * MIB)
    (mamba,) = [
        r
        for r in raw_rows(MEMORY_JETSON)
        if r["model_name"] == "mamba-790m" and r["seq_len"] == "4096"
    ]
    untimed = one(real["ssm-scope-jetson"]["cells"], model="mamba-790m", seq_len=4096)
    assert untimed.status == "unavailable"
    assert untimed.weights_bytes == pytest.approx(float(mamba["model_size_mb"]) * MIB)
    assert untimed.activations_bytes == pytest.approx(float(mamba["activation_memory_mb"]) * MIB)


def test_their_headline_claims_are_judged_on_their_own_data(real):
    """SSM-Scope's abstract against SSM-Scope's published timings: the short-context claim
    is their generation_times.csv at T = 2048 (Mamba2-780m over Qwen2.5-0.5B); the 57K
    point of the long-context claim is not in their published timings."""
    judged = claims.evaluate(real["ssm-scope-rtx4090"]["cells"], "ssm-scope-rtx4090")
    judged = judged.set_index("id")
    (mamba2,) = [r for r in raw_rows(GENERATION) if r["model_name"] == "gen_mamba2_cuda_256_2048"]
    (qwen,) = [
        r for r in raw_rows(GENERATION) if r["model_name"] == "gen_qwen25-instruct_cuda_256_2048"
    ]
    expected = float(mamba2["prefill_time_seconds"]) / float(qwen["prefill_time_seconds"])
    short = judged.loc["ssm-scope-short-context"]
    assert short.ours == pytest.approx(expected) and short.verdict == "reproduced"
    assert "mamba2-780m/mamba_ssm vs qwen25-instruct/hf prefill at b1 T2048" == short.cells
    long = judged.loc["ssm-scope-long-context"]
    assert long.verdict == "not comparable here"
    assert long.why == "no shared T at T = 57344 (longest shared: 32768)"


def test_real_operator_times_are_per_forward_device_time(real):
    ops = real["ssm-scope-rtx4090"]["ops"]
    cell = ops[(ops.model == "mamba-130m") & (ops.seq_len == 1024)].set_index("bucket")
    scan = {r["name"]: r for r in raw_rows(f"{PROFILE}/ssm_scan.csv")}
    assert cell.time_ms["ssm_scan"] == pytest.approx(
        float(scan["mambainnerfn"]["cuda_time (us)"]) / 1e3 / 10
    )
    main = {r["name"]: r for r in raw_rows(f"{PROFILE}/mamba-130m_cuda_1_1024.csv")}
    forward_ms = float(main["inference_prof"]["cuda_time (us)"]) / 1e3 / 10
    assert cell.time_ms.sum() == pytest.approx(forward_ms, rel=2e-3)
    shares = ops.groupby(tables.KEYS).share.sum()
    np.testing.assert_allclose(shares, 1.0)
    zamba2 = ops[(ops.model == "zamba2") & (ops.seq_len == 1024)].set_index("bucket")
    assert zamba2.top_kernels["attention"] == "aten::scaled_dot_product_attention"
    assert zamba2.top_kernels["convolution"] == "causalconv1dfn"


# ---------------------------------------------------------------------------------------
# The two figures.


def crossing_in_log_log(x0, x1, a0, a1, b0, b1) -> float:
    """T where two segments cross when both are straight in (log T, log y)."""
    d0, d1 = math.log(a0 / b0), math.log(a1 / b1)
    t = d0 / (d0 - d1)
    return math.exp(math.log(x0) + t * (math.log(x1) - math.log(x0)))


def test_crossovers_are_interpolated_on_log_log_axes(synthetic):
    cells = synthetic["ssm-scope-rtx4090"]["cells"]
    points = figures.crossovers(cells).set_index("phase")
    assert points.loc["prefill", "seq_len"] == pytest.approx(6144)
    assert points.loc["prefill", "time_ms"] == pytest.approx(mamba2_prefill_ms(6144))
    expected = crossing_in_log_log(
        2048, 4096, MAMBA2_TPOT_S, MAMBA2_TPOT_S, attention_tpot_s(2048), attention_tpot_s(4096)
    )
    assert points.loc["decode", "seq_len"] == pytest.approx(expected)
    assert points.loc["decode", "recurrent"].startswith("mamba2-780m / mamba_ssm")
    assert points.loc["decode", "attention"].startswith("qwen25-instruct / hf")


def stars(ax) -> list:
    return [line for line in ax.get_lines() if line.get_marker() == "*"]


def test_ttft_tpot_figure_colours_by_family_and_annotates_crossovers(synthetic, tmp_path):
    cells = synthetic["ssm-scope-rtx4090"]["cells"]
    fig = figures.draw("ttft_tpot_crossover", cells)
    prefill, decode = fig.axes[:2]
    lines = {line.get_label(): line for line in prefill.get_lines() if line.get_marker() != "*"}
    mamba2 = lines["mamba2-780m / mamba_ssm (fp16)"]
    assert matplotlib.colors.same_color(mamba2.get_color(), FAMILY_COLORS["mamba2"])
    qwen = lines["qwen25-instruct / hf (bf16)"]
    assert matplotlib.colors.same_color(qwen.get_color(), FAMILY_COLORS["attention"])
    np.testing.assert_allclose(qwen.get_ydata(), [attention_prefill_ms(t) for t in LENGTHS])
    (tpot,) = [line for line in decode.get_lines() if line.get_label().startswith("qwen")]
    np.testing.assert_allclose(tpot.get_ydata(), [attention_tpot_s(t) * 1e3 for t in LENGTHS])
    assert len(stars(prefill)) == 1 and len(stars(decode)) == 1
    assert stars(prefill)[0].get_xdata()[0] == pytest.approx(6144)
    words = "\n".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))
    assert "mamba2-780m = qwen25-instruct\nT ≈ 6,144" in words
    assert prefill.get_xscale() == "log" and decode.get_yscale() == "log"
    assert {c.get_label() for c in prefill.collections} >= {
        "mamba-790m: unavailable",
        "falcon-h1-0.5b: unavailable",
    }
    assert "NVIDIA GeForce RTX 4090" in fig._suptitle.get_text()
    figures.save(fig, tmp_path / "f.pdf", tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000
    plt.close(fig)


def test_throughput_figure_has_a_panel_per_phase(synthetic):
    cells = synthetic["ssm-scope-rtx4090"]["cells"]
    fig = figures.draw("throughput", cells, models=["mamba2-780m", "qwen25-instruct"])
    prefill, decode = fig.axes[:2]
    assert [prefill.get_title(), decode.get_title()] == ["prefill", "decode"]
    (line,) = [x for x in prefill.get_lines() if x.get_label().startswith("mamba2")]
    np.testing.assert_allclose(
        line.get_ydata(), [t / (mamba2_prefill_ms(t) / 1e3) for t in LENGTHS]
    )
    (line,) = [x for x in decode.get_lines() if x.get_label().startswith("qwen")]
    np.testing.assert_allclose(line.get_ydata(), [1 / attention_tpot_s(t) for t in LENGTHS])
    assert decode.get_xlabel() == "context length T (tokens)"
    plt.close(fig)


def test_figures_of_our_own_runs_colour_by_model_name():
    """Our tables have no family column: the model name is the family."""
    from tests.figures.test_figures import synthetic_cells

    cells = synthetic_cells()
    for name in ("ttft_tpot_crossover", "throughput"):
        fig = figures.draw(name, cells, backends=["torch"])
        (line,) = [x for x in fig.axes[0].get_lines() if x.get_label() == "s4d / torch"]
        assert matplotlib.colors.same_color(line.get_color(), FAMILY_COLORS["s4d"])
        assert "s4d: unavailable" not in {c.get_label() for c in fig.axes[0].collections}
        plt.close(fig)
    fig = figures.draw("ttft_tpot_crossover", cells, models=["nope"])
    assert "no prefill or decode cells" in "\n".join(
        t.get_text() for t in fig.findobj(matplotlib.text.Text)
    )
    plt.close(fig)


def test_figures_draw_from_the_real_runs(real):
    cells = real["ssm-scope-rtx4090"]["cells"]
    points = figures.crossovers(cells)
    # the paper's Fig. 1: Mamba2-780m overtakes Qwen2.5-0.5B between 24K and 32K tokens
    assert set(points.phase) == {"prefill", "decode"}
    assert points.seq_len.between(24576, 32768).all()
    fig = figures.draw("ttft_tpot_crossover", cells)
    assert len(stars(fig.axes[0])) == len(points[points.phase == "prefill"])
    plt.close(fig)
    fig = figures.draw("throughput", real["ssm-scope-jetson"]["cells"])
    words = "\n".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))
    assert "no ok prefill cell with a time here" in words and "unavailable" in words
    plt.close(fig)


@pytest.mark.parametrize("name", ["ttft_tpot_crossover", "throughput"])
def test_notebooks_run_under_papermill(name, synthetic, tmp_path):

    notebook = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    (tagged,) = [c for c in notebook["cells"] if "parameters" in c["metadata"].get("tags", [])]
    for param in ("cells_path", "models", "backends", "batch", "dtype", "out_pdf", "out_png"):
        assert f"{param} = " in "".join(tagged["source"])
    assert name in figures.FIGURES  # the notebook draws through the catalogue's entry
    # the imported table as written: a family column, no size preset
    cells = synthetic["ssm-scope-rtx4090"]["cells"]
    cells.to_csv(tmp_path / "cells.csv", index=False)
    draw_notebook(name, tmp_path / "cells.csv", tmp_path)
