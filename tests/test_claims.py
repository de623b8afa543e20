"""The claims ledger: every shipped claim loads, and each verdict follows from the cells."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from ssmbench import claims
from tests.conftest import ANCHORS


def cell(
    model, backend, phase, seq_len, time_ms, device="cuda", name="NVIDIA A100-SXM4-80GB", **kw
):
    return dict(
        model=model,
        backend=backend,
        phase=phase,
        batch=1,
        seq_len=seq_len,
        dtype="bf16",
        device=device,
        device_name=name,
        status="ok",
        time_ms_median=time_ms,
        **kw,
    )


def table(rows) -> pd.DataFrame:
    return pd.DataFrame(rows)


SCAN = {
    "id": "scan",
    "claim": "fused scan is 20-40x faster",
    "source": {"paper": "P", "where": "Fig 1"},
    "hardware": "A100",
    "published": [20, 40],
    "compare": "within",
    "metric": {
        "name": "latency_ratio",
        "phase": "prefill",
        "slow": {"model": "mamba", "backend": "torch"},
        "fast": {"model": "mamba", "backend": "fused"},
    },
    "requires": {"device": "cuda"},
}


def test_shipped_claims_load_with_their_sources():
    loaded = claims.load()
    assert len(loaded) >= 8 and len({c["id"] for c in loaded}) == len(loaded)
    for claim in loaded:
        assert claim["source"]["paper"] and claim["source"]["where"] and claim["hardware"]


@pytest.mark.parametrize(
    "fused_ms, verdict", [(1.0, "reproduced"), (0.1, "contradicted"), (10.0, "contradicted")]
)
def test_latency_ratio_verdicts(fused_ms, verdict):
    cells = table(
        [
            cell("mamba", "torch", "prefill", 1024, 15.0),
            cell("mamba", "fused", "prefill", 1024, fused_ms / 2),
            cell("mamba", "torch", "prefill", 4096, 60.0),
            cell("mamba", "fused", "prefill", 4096, fused_ms * 2),
        ]
    )
    row = claims.evaluate(cells, "r", [SCAN]).iloc[0]
    # "up to": the largest ratio over the shared points
    assert row.ours == pytest.approx(max(15.0 / (fused_ms / 2), 60.0 / (fused_ms * 2)))
    assert row.verdict == verdict and row.ratio == pytest.approx(row.ours / 40)


def test_a_cpu_run_or_a_missing_backend_is_not_comparable_and_says_why():
    cpu = table([cell("mamba", "torch", "prefill", 1024, 15.0, device="cpu", name="Xeon")])
    row = claims.evaluate(cpu, "r", [SCAN]).iloc[0]
    assert row.verdict == "not comparable here" and "needs a cuda run" in row.why
    gpu = table([cell("mamba", "torch", "prefill", 1024, 15.0)])
    row = claims.evaluate(gpu, "r", [SCAN]).iloc[0]
    assert row.verdict == "not comparable here" and row.why == "no ok prefill cells of mamba/fused"


def test_a_latency_ratio_is_never_of_two_device_kinds():
    """On a node of A100s and H100s: the point whose two cells ran on two kinds is left
    out (here the one with the largest ratio); with none on one kind, no ratio, and why."""
    h100 = "NVIDIA H100 80GB HBM3"
    cells = table(
        [
            cell("mamba", "torch", "prefill", 1024, 15.0),
            cell("mamba", "fused", "prefill", 1024, 0.5),
            cell("mamba", "torch", "prefill", 4096, 60.0),
            cell("mamba", "fused", "prefill", 4096, 0.5, name=h100),
        ]
    )
    row = claims.evaluate(cells, "r", [SCAN]).iloc[0]
    assert row.ours == pytest.approx(15.0 / 0.5)  # not 60 / 0.5 across two kinds
    row = claims.evaluate(cells[cells.seq_len == 4096], "r", [SCAN]).iloc[0]
    assert row.verdict == "not comparable here"
    assert row.why == "no shared T on one device kind"


def test_crossover_and_best_utilization():
    rows = []
    for t, ssm, attn in [(512, 2.0, 1.0), (1024, 2.0, 2.5), (2048, 3.0, 6.0), (4096, 5.0, 20.0)]:
        rows += [
            cell("mamba2", "fused", "prefill", t, ssm),
            cell("attention", "fused", "prefill", t, attn),
        ]
    cells = table(rows).assign(compute_util_datasheet=[0.1, 0.4, 0.1, 0.6, 0.1, 0.55, 0.1, 0.7])
    crossover = {
        **SCAN,
        "id": "x",
        "published": [None, 2048],
        "compare": "at_most",
        "metric": {
            "name": "crossover_len",
            "phase": "prefill",
            "ssm": {"model": "mamba2", "backend": "fused"},
            "attention": {"model": "attention", "backend": "fused"},
        },
    }
    util = {
        **SCAN,
        "id": "u",
        "published": [0.5, 0.73],
        "metric": {
            "name": "best",
            "column": "compute_util_datasheet",
            "select": {"model": "attention", "backend": "fused"},
        },
        "requires": {"device": "cuda", "device_name": "A100"},
    }
    rows = claims.evaluate(cells, "r", [crossover, util]).set_index("id")
    assert rows.loc["x", "ours"] == 1024 and rows.loc["x", "verdict"] == "reproduced"
    assert rows.loc["u", "ours"] == pytest.approx(0.7) and rows.loc["u", "verdict"] == "reproduced"
    h100 = cells.assign(device_name="NVIDIA H100 80GB HBM3")
    row = claims.evaluate(h100, "r", [util]).iloc[0]
    assert row.verdict == "not comparable here" and "measured on A100" in row.why


def test_a_claim_without_its_keys_or_with_an_unknown_metric_is_refused(tmp_path):
    bad = tmp_path / "claims.yaml"
    bad.write_text("claims:\n  - {id: a, claim: b, source: {paper: p, where: w}, hardware: h}\n")
    with pytest.raises(ValueError, match="claims\\[0\\] \\(a\\) has no 'published'"):
        claims.load(bad)
    bad.write_text(
        "claims:\n  - {id: a, claim: b, source: {paper: p, where: w}, hardware: h,"
        " published: [1, 2], compare: within, metric: {name: magic}}\n"
    )
    with pytest.raises(ValueError, match="unknown metric 'magic'"):
        claims.load(bad)


def test_a_selector_by_family_takes_the_fastest_of_its_backends_across_dtypes():
    """One claim reads our runs (fused) and an imported study's (mamba_ssm, hf) alike."""
    rows = [
        cell("mamba2-780m", "mamba_ssm", "prefill", 2048, 40.0, family="mamba2"),
        cell("mamba2-780m", "mamba_ssm", "prefill", 16384, 300.0, family="mamba2"),
        cell("qwen", "hf", "prefill", 2048, 20.0, family="attention"),
        cell("qwen", "hf", "prefill", 16384, 400.0, family="attention"),
        cell("qwen", "fused", "prefill", 2048, 25.0, family="attention"),  # slower: not used
    ]
    cells = table(rows).assign(dtype=["fp16", "fp16", "bf16", "bf16", "bf16"])
    short = {
        **SCAN,
        "published": [None, 1.9],
        "compare": "about",
        "tolerance": 0.1,
        "metric": {
            "name": "latency_ratio",
            "phase": "prefill",
            "max_len": 8191,
            "same_dtype": False,
            "slow": {"family": "mamba2", "backend": ["fused", "mamba_ssm"]},
            "fast": {"family": "attention", "backend": ["fused", "hf"]},
        },
    }
    row = claims.evaluate(cells, "r", [short]).iloc[0]
    assert row.ours == pytest.approx(2.0) and row.verdict == "reproduced"  # |2.0/1.9 - 1| < 0.1
    assert row.cells == "mamba2-780m/mamba_ssm vs qwen/hf prefill at b1 T2048"
    strict = {**short, "tolerance": 0.05}
    assert claims.evaluate(cells, "r", [strict]).iloc[0].verdict == "contradicted"
    same_dtype = {**short, "metric": {**short["metric"], "same_dtype": True}}
    row = claims.evaluate(cells, "r", [same_dtype]).iloc[0]
    assert row.verdict == "not comparable here" and row.why == "no shared T at T <= 8191"
    at_57k = {**short, "metric": {**short["metric"], "max_len": None, "at_len": 57344}}
    row = claims.evaluate(cells, "r", [at_57k]).iloc[0]
    assert row.why == "no shared T at T = 57344 (longest shared: 16384)"


def test_another_device_of_the_kind_shows_ours_for_reference_without_judging():
    cells = table(
        [
            cell("mamba", "torch", "prefill", 1024, 30.0, name="NVIDIA H200"),
            cell("mamba", "fused", "prefill", 1024, 1.0, name="NVIDIA H200"),
        ]
    )
    on_a100 = {**SCAN, "requires": {"device": "cuda", "device_name": "A100"}}
    row = claims.evaluate(cells, "r", [on_a100]).iloc[0]
    assert row.ours == pytest.approx(30.0) and row.verdict == "not comparable here"
    assert (
        row.why == "measured on A100; this run's device is NVIDIA H200 (ours shown for reference)"
    )


def test_a_selector_names_a_model_or_a_family():
    cells = table([cell("mamba", "torch", "prefill", 1024, 30.0)])
    both = {
        **SCAN,
        "metric": {**SCAN["metric"], "slow": {"model": "m", "family": "f", "backend": "torch"}},
    }
    with pytest.raises(ValueError, match="a model or a family"):
        claims.evaluate(cells, "r", [both])


def test_about_needs_a_tolerance(tmp_path):
    bad = tmp_path / "claims.yaml"
    bad.write_text(
        "claims:\n  - {id: a, claim: b, source: {paper: p, where: w}, hardware: h,"
        " published: [null, 2], compare: about, metric: {name: best}}\n"
    )
    with pytest.raises(ValueError, match="compare 'about' needs a tolerance"):
        claims.load(bad)


def test_numbers_read_off_a_seed_table_match_that_table():
    """Every claim with ``from_table`` publishes the ratio of the two entries it names,
    recomputed here from the seed's own file (skipped where the anchors are absent)."""
    derived = [c for c in claims.load() if "from_table" in c]
    assert len(derived) >= 3
    if not ANCHORS.is_dir():
        pytest.skip(f"no anchors at {ANCHORS} (set SSMBENCH_ANCHORS)")
    for claim in derived:
        source = claim["from_table"]
        entries = json.loads((ANCHORS / source["file"]).read_text())["entries"]

        def value(key, entries=entries):
            (entry,) = [
                e for e in entries if e["model"] == key["model"] and e["seq_len"] == key["seq_len"]
            ]
            return entry[key["field"]]

        top, bottom = source["ratio"]
        assert claims.reference(claim) == pytest.approx(value(top) / value(bottom), rel=1e-3), (
            claim["id"]
        )


def test_across_dtypes_each_side_runs_at_its_fastest_dtype():
    rows = [
        cell("mamba2", "fused", "prefill", 1024, 4.0),
        cell("mamba2", "fused", "prefill", 1024, 9.0),
        cell("attention", "fused", "prefill", 1024, 2.0),
        cell("attention", "fused", "prefill", 1024, 5.0),
    ]
    cells = table(rows).assign(dtype=["bf16", "fp32", "bf16", "fp32"])
    select = {"slow": {"family": "mamba2", "backend": "fused"}}
    select["fast"] = {"family": "attention", "backend": "fused"}
    ours, _, used, _ = claims.latency_ratio(cells, **select, phase="prefill", same_dtype=False)
    assert ours == pytest.approx(4.0 / 2.0)  # never 9.0 / 2.0 (fp32 against bf16)
    same = claims.latency_ratio(cells, **select, phase="prefill")[0]
    assert same == pytest.approx(max(4.0 / 2.0, 9.0 / 5.0))  # per dtype, the larger


def test_a_latency_ratio_claim_carries_its_interval_with_the_samples():
    import numpy as np

    from ssmbench import tables
    from tests.conftest import sampled_record

    rng = np.random.default_rng(0)
    records = []
    for model, ms in (("mamba", 6.0), ("mamba2", 2.0)):
        s = list(ms * (1 + 0.05 * rng.standard_normal(30)))
        records.append(sampled_record(s, model=model, backend="torch"))
    cells, samples = tables.cells_table(records), tables.samples_table(records)
    claim = {
        "id": "t",
        "claim": "mamba2 is faster than mamba",
        "source": {"paper": "p", "where": "w"},
        "hardware": "any",
        "published": [2.0, 4.0],
        "compare": "within",
        "metric": {
            "name": "latency_ratio",
            "phase": "prefill",
            "slow": {"model": "mamba", "backend": "torch"},
            "fast": {"model": "mamba2", "backend": "torch"},
        },
    }
    (row,) = claims.evaluate(cells, "t", [claim], samples=samples).itertuples()
    assert row.ours_lo < row.ours < row.ours_hi and 2.7 < row.ours < 3.3
    (bare,) = claims.evaluate(cells, "t", [claim]).itertuples()
    assert bare.ours == row.ours and math.isnan(bare.ours_lo)


def test_task_claims_publish_the_study_s_final_epoch():
    """Every task claim's published value is its ``from_json`` entry of the case study's
    results file (skipped where the anchors are absent)."""
    derived = [c for c in claims.load() if "from_json" in c]
    assert {c["metric"]["task"] for c in derived} == {
        "parity",
        "selective_copy",
        "exact_copy",
        "imdb",
    }
    if not ANCHORS.is_dir():
        pytest.skip(f"no anchors at {ANCHORS} (set SSMBENCH_ANCHORS)")
    for claim in derived:
        value = json.loads((ANCHORS / claim["from_json"]["file"]).read_text())
        for key in claim["from_json"]["key"]:
            value = value[key]
        assert claims.reference(claim) == pytest.approx(value, abs=5e-5), claim["id"]


def task_rows(values, family="mamba3", task="parity", status="ok"):
    return pd.DataFrame(
        {
            "task": task,
            "eval": "test",
            "family": family,
            "seed": range(len(values)),
            "metric": "token_accuracy",
            "headline": True,
            "value": values,
            "status": status,
            "cut": "train.epochs 20 -> 3",
        }
    )


TASK_CLAIM = {
    "id": "t",
    "claim": "c",
    "source": {"paper": "p", "where": "w"},
    "hardware": "h",
    "published": [0.98, 0.98],
    "compare": "covers",
    "tolerance": 0.02,
    "metric": {"name": "task_accuracy", "task": "parity", "eval": "test", "family": "mamba3"},
}


@pytest.mark.parametrize(
    "values, verdict",
    [
        ([0.97, 0.99, 0.95], "reproduced"),  # 0.98 in [0.95, 0.99]
        ([0.955, 0.95, 0.96], "reproduced"),  # 0.98 <= 0.96 + 0.02
        ([0.55, 0.51, 0.53], "contradicted"),
        ([0.999, 1.0, 1.0], "reproduced"),
    ],
)
def test_a_task_claim_is_reproduced_when_the_seeds_range_covers_it(values, verdict):
    cells = pd.DataFrame([cell("mamba3", "torch", "prefill", 128, 1.0)])
    row = claims.evaluate(cells, "r", [TASK_CLAIM], tasks=task_rows(values)).iloc[0]
    assert row.verdict == verdict
    assert row.ours == pytest.approx(sum(values) / len(values))
    assert (row.ours_lo, row.ours_hi) == (min(values), max(values))
    assert "cut: train.epochs 20 -> 3" in row.cells


def test_a_task_claim_is_left_out_without_tasks_and_not_comparable_without_ok_seeds():
    cells = pd.DataFrame([cell("mamba3", "torch", "prefill", 128, 1.0)])
    assert claims.evaluate(cells, "r", [TASK_CLAIM]).empty  # a run that trains nothing
    failed = task_rows([None, None], status="failed")
    row = claims.evaluate(cells, "r", [TASK_CLAIM], tasks=failed).iloc[0]
    assert row.verdict == "not comparable here" and "no ok parity/mamba3 runs (failed)" in row.why
