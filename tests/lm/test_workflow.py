"""The whole-model workflow end to end on the `lm-ci` preset (every class of
config/models.yaml at its tiny size), in a temporary copy of the repository: gates,
cells, a profile, the lm tables, claims, figures and provenance; then a record damaged
after the run is healed by a plain rerun."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ssmbench import config as sbconfig
from ssmbench import paths
from ssmbench.lm import zoo
from ssmbench.lm.table import read_lm_table
from ssmbench.provenance import check
from tests.conftest import snakemake, succeeded

PLAN = sbconfig.plan(sbconfig.load(overrides={"preset": "lm-ci"}))
RUN = PLAN.run


def test_every_cell_is_a_row_measured_or_saying_why_not(lm_ci_run):
    wf, out = lm_ci_run
    table = read_lm_table(wf / paths.table(RUN, "lm.csv"))
    assert len(table) == len(PLAN.lm.cells)
    unavailable = {name for name, e in zoo.entries().items() if e.unavailable}
    for row in table.itertuples():
        if row.model in unavailable:  # Hymba: remote code that imports flash_attn
            assert row.status == "unavailable" and "flash_attn" in row.reason
        else:
            assert row.status == "ok", (row.model, row.phase, row.reason)
            assert row.cache_formula_ok and row.isolation.startswith("kernel packages blocked")
    ok = table[table.status == "ok"]
    prefill, decode = ok[ok.phase == "prefill"], ok[ok.phase == "decode"]
    assert prefill.ttft_ms_median.gt(0).all() and prefill.tpot_ms_median.isna().all()
    assert decode.tpot_ms_median.gt(0).all() and decode.e2e_tpot_ms.notna().all()
    parquet = pd.read_parquet(wf / paths.table(RUN, "lm.parquet"))
    assert list(parquet.columns) == list(table.columns) and len(parquet) == len(table)
    assert f"ssm-bench: {RUN}: {len(PLAN.lm.cells)} cells:" in out.stderr


def test_each_gate_ran_once_and_the_cells_carry_its_verdict(lm_ci_run):
    wf, _ = lm_ci_run
    gates = sorted((wf / "results" / RUN / "lm-verify").rglob("*.json"))
    gates = [g for g in gates if not g.name.endswith(".prov.json")]
    assert len(gates) == len(PLAN.lm.verified)
    for cell in PLAN.lm.cells:
        record = json.loads((wf / paths.lm_cell_record(RUN, cell)).read_text())
        gate = json.loads(
            (wf / paths.lm_verify(RUN, cell.model, cell.backend, cell.dtype)).read_text()
        )
        if record["status"] == "ok":
            assert gate["status"] == "passed" and record["verify"]["passed"]
            assert record["verify"]["source"].endswith(f"{cell.backend}-{cell.dtype}.json")
        else:
            assert gate["status"] == "unavailable"


def test_the_profile_and_the_claims_are_tables_of_their_own(lm_ci_run):
    wf, _ = lm_ci_run
    ops = pd.read_csv(wf / paths.table(RUN, "lm_ops.csv"))
    assert set(ops.model) == {c.model for c in PLAN.lm.profiled}
    ok = ops[ops.status == "ok"]
    assert ok.share.sum().round(6) == 1.0  # one profiled cell: its buckets' shares
    claims = pd.read_csv(wf / paths.table(RUN, "claims.csv"))
    assert len(claims) > 0 and claims.verdict.notna().all()


def test_every_figure_is_drawn_with_its_provenance(lm_ci_run):
    wf, _ = lm_ci_run
    for figure in PLAN.figures:
        for ext in paths.FIGURE_EXTS:
            path = wf / paths.figure(RUN, figure, ext)
            assert path.stat().st_size > 0, path
            check(str(path))  # its sidecar vouches for its bytes
    for name in paths.LM_TABLES:
        check(str(wf / paths.table(RUN, name)))


def test_a_damaged_record_is_moved_aside_and_only_its_cell_reruns(lm_ci_run):
    wf, _ = lm_ci_run
    cell = next(c for c in PLAN.lm.cells if c.model == "mamba2-130m" and c.phase == "decode")
    damaged = wf / paths.lm_cell_record(RUN, cell)
    others = [wf / paths.lm_cell_record(RUN, c) for c in PLAN.lm.cells if c != cell]
    before = {p: p.stat().st_mtime_ns for p in others}
    damaged.write_text(damaged.read_text()[:200])  # a truncated JSON object
    # the table and its sidecar, not the figures: quicker, the same heal (the sidecar is
    # what heal takes away so that the table, and the record it lacks, are made again)
    table = paths.table(RUN, "lm.csv")
    out = succeeded(
        snakemake(wf, table, paths.prov(table), "--config", "preset=lm-ci", timeout=600)
    )
    assert f"{paths.lm_cell_record(RUN, cell)}: " in out.stderr and ".corrupt" in out.stderr
    assert Path(f"{damaged}.corrupt").is_file()
    assert json.loads(damaged.read_text())["status"] == "ok"
    assert {p: p.stat().st_mtime_ns for p in others} == before  # nothing else remeasured
    assert not (wf / paths.device(RUN)).exists()  # no stand-in for a calibration it has none of
