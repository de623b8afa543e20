"""The shipped run's tables are what its records make: re-aggregating the records of
results/precollected/cpu gives the shipped tables, column by column."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ssmbench.aggregate import aggregate
from ssmbench.analysis import go_no_go_table, speedups_table, verdict_rst
from ssmbench.paths import REPO
from ssmbench.tables import write_tables

RUN = REPO / "results" / "precollected" / "cpu"


def records(kind: str, pattern: str = "*.json") -> list[str]:
    return sorted(str(p) for p in (RUN / kind).rglob(pattern) if not p.name.endswith(".prov.json"))


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> tuple[Path, dict, pd.DataFrame]:
    """The shipped records aggregated again: (folder of CSVs, tables, go/no-go table)."""
    if not (RUN / "tables" / "cells.csv").is_file():
        pytest.skip(f"no shipped run at {RUN}")
    out = tmp_path_factory.mktemp("tables")
    tables = aggregate(
        records("cells"),
        records("verify"),
        "cpu",
        records("profile", "*.ops.csv"),
        paired_paths=records("paired"),
        device_path=RUN / "device.json",
    )
    write_tables(
        tables,
        {
            n: str(out / n)
            for n in ("cells.csv", "paired.csv", "pairs.csv", "verify.csv", "ops.csv", "claims.csv")
        },
    )
    samples = tables["samples"]
    go_no_go = go_no_go_table(tables["cells"], samples=samples, paired=tables["pairs"])
    go_no_go.to_csv(out / "go_no_go.csv", index=False, float_format="%.4g")
    speedups_table(tables["cells"], samples).to_csv(
        out / "speedups.csv", index=False, float_format="%.4g"
    )
    return out, tables, go_no_go


@pytest.mark.parametrize(
    "name",
    [
        "cells.csv",
        "paired.csv",
        "pairs.csv",
        "verify.csv",
        "ops.csv",
        "claims.csv",
        "go_no_go.csv",
        "speedups.csv",
    ],
)
def test_the_shipped_tables_are_what_the_shipped_records_make(rebuilt, name):
    shipped = pd.read_csv(RUN / "tables" / name)
    again = pd.read_csv(rebuilt[0] / name)
    assert list(again.columns) == list(shipped.columns)
    # a claim's `why` is config/claims.yaml's wording of its reason, which changes with the
    # ledger (SSM-Scope's claims now name their hardware and ours); its numbers and verdict
    # are the records'
    worded = {"why"} if name == "claims.csv" else set()
    for col in [c for c in shipped.columns if c not in worded]:
        pd.testing.assert_series_equal(again[col], shipped[col], check_names=True, obj=col)


def test_the_verdict_is_what_the_records_say(rebuilt):
    _, tables, go_no_go = rebuilt
    shipped = (RUN / "tables" / "verdict.rst").read_text()
    assert verdict_rst(tables["cells"], tables["claims"], go_no_go) == shipped
    # the floors' bullets, one per go/no-go phase, read off the records' operator counts
    # and the run's calibrated ceilings
    floors = [line for line in shipped.splitlines() if line.startswith("- Floors")]
    assert len(floors) == 3
