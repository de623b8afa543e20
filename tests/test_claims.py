"""The claims ledger: every shipped claim loads, and each verdict follows from the cells."""

from __future__ import annotations

import pandas as pd
import pytest

from ssmbench import claims


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
