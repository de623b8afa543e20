"""Records: schema, atomic writes; timing statistics; the tables built from records."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pandera.pandas as pa
import pytest

from ssmbench import records, tables
from ssmbench.config import Timing
from ssmbench.measure.timing import measure, percentile
from ssmbench.records import CellRecord

SIZE = {
    "d_model": 32,
    "n_layers": 1,
    "n_heads": 2,
    "head_dim": 16,
    "expand": 2,
    "d_conv": 4,
    "chunk": 16,
}


def make_record(**kw) -> CellRecord:
    base = dict(
        run="t",
        model="mamba",
        backend="torch",
        phase="prefill",
        batch=1,
        seq_len=64,
        d_state=4,
        dtype="fp32",
        device="cpu",
        size=SIZE,
        samples_ms=[1.0, 2.0, 3.0],
        n_samples=3,
        time_ms_median=2.0,
        time_ms_p95=2.9,
        tokens=64,
        flop=1e6,
        bytes=1e4,
        intensity=100.0,
    )
    base.update(kw)
    return CellRecord(**base)


def test_record_round_trip(tmp_path):
    path = tmp_path / "a" / "b.json"
    records.write_record(path, make_record())
    assert records.read_record(path) == make_record()
    assert [p.name for p in path.parent.iterdir()] == ["b.json"]  # no temporary left


def test_schema_field_set_matches_the_dataclass():
    props = set(records.schema()["properties"])
    assert props == set(make_record().to_dict())


@pytest.mark.parametrize(
    "change, field",
    [
        (dict(status="great"), "status"),
        (dict(status="failed", reason=""), "reason"),
        (dict(status="ok", time_ms_median=None), "time_ms_median"),
        (dict(samples_ms=[-1.0]), "samples_ms.0"),
        (dict(seq_len=0), "seq_len"),
    ],
    ids=["unknown-status", "failed-without-reason", "ok-without-time", "negative-sample", "T0"],
)
def test_invalid_record_is_refused_with_its_field(tmp_path, change, field):
    path = tmp_path / "r.json"
    with pytest.raises(ValueError, match=f"field {field}"):
        records.write_record(path, make_record(**change))
    assert not path.exists()


def test_interrupted_write_leaves_no_file(tmp_path, monkeypatch):
    path = tmp_path / "r.json"

    def explode(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(json, "dump", explode)
    with pytest.raises(KeyboardInterrupt):
        records.write_json_atomic(path, {"a": 1})
    assert list(tmp_path.iterdir()) == []


def test_nan_is_not_written_as_json(tmp_path):
    with pytest.raises(ValueError):
        records.write_json_atomic(tmp_path / "x.json", {"a": float("nan")})


@pytest.mark.parametrize("n", [1, 2, 5, 20, 101])
def test_percentile_matches_numpy(n):
    values = list(np.random.default_rng(n).exponential(size=n))
    for q in (0, 50, 95, 100):
        assert percentile(values, q) == pytest.approx(np.percentile(values, q), rel=1e-12)


def test_measure_keeps_every_sample_within_budget():
    calls = []
    timing = Timing(warmup=2, min_samples=4, max_samples=7, min_time_s=0.0, max_time_s=10.0)
    result = measure(lambda: calls.append(1), timing)
    assert len(calls) == 2 + 4 and len(result.samples_ms) == 4
    timing = Timing(warmup=0, min_samples=1, max_samples=7, min_time_s=60.0, max_time_s=60.0)
    assert len(measure(lambda: None, timing).samples_ms) == 7  # max_samples caps


def test_tables_from_records(tmp_path):
    recs = [
        make_record(seq_len=64),
        make_record(seq_len=128, backend="naive"),
        make_record(
            seq_len=128,
            status="oom",
            reason="RuntimeError: out of memory",
            samples_ms=[],
            n_samples=0,
            time_ms_median=None,
            time_ms_p95=None,
        ),
    ]
    cells = tables.cells_table(recs)
    assert list(cells.columns[: len(tables.KEYS)]) == tables.KEYS
    assert set(tables.CELL_COLUMNS) <= set(cells.columns)
    assert cells.status.tolist().count("oom") == 1
    samples = tables.samples_table(recs)
    assert len(samples) == 6 and samples.time_ms.sum() == pytest.approx(12.0)
    path = tmp_path / "cells.csv"
    tables.write_tables({"cells": cells}, {"cells.csv": str(path)})
    back = tables.read_cells(path)
    pd.testing.assert_frame_equal(back, cells, check_dtype=False)


def test_tables_refuse_duplicate_cells_and_p95_below_median(tmp_path):
    with pytest.raises(pa.errors.SchemaError, match="p95_ge_median"):
        tables.cells_table([make_record(time_ms_p95=1.0)])
    with pytest.raises(pa.errors.SchemaError, match="not unique"):
        tables.cells_table([make_record(), make_record()])


def test_read_cells_names_the_file(tmp_path):
    cells = tables.cells_table([make_record()])
    bad = cells.drop(columns=["time_ms_median"])
    path = Path(tmp_path) / "broken.csv"
    bad.to_csv(path, index=False)
    with pytest.raises(ValueError, match="broken.csv"):
        tables.read_cells(path)
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        tables.read_cells(os.path.join(tmp_path, "missing.csv"))
