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


def test_compute_dtype_is_recorded_tabulated_and_optional_in_old_tables(tmp_path):
    """The record and the cells table carry compute_dtype; a table written before the
    column (the shipped ones) still reads."""
    widened = make_record(dtype="bf16", compute_dtype="fp32")
    path = tmp_path / "r.json"
    records.write_record(path, widened)
    assert records.read_record(path).compute_dtype == "fp32"
    with pytest.raises(ValueError, match="compute_dtype"):
        records.validate_record({**widened.to_dict(), "compute_dtype": "int8"})
    cells = tables.cells_table([widened, make_record(seq_len=128, compute_dtype="")])
    assert "compute_dtype" in tables.CELL_COLUMNS and list(cells.compute_dtype) == ["fp32", ""]
    tables.write_tables({"cells": cells}, {"cells.csv": str(tmp_path / "cells.csv")})
    assert list(tables.read_cells(tmp_path / "cells.csv").compute_dtype) == ["fp32", ""]
    old = tmp_path / "old.csv"
    cells.drop(columns=["compute_dtype"]).to_csv(old, index=False)
    assert "compute_dtype" not in tables.read_cells(old)
    shipped = sorted(Path(tables.__file__).parents[2].glob("results/precollected/*/tables"))
    for table in shipped:
        assert len(tables.read_cells(table / "cells.csv")) > 0


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


def test_a_not_run_cell_validates_and_tabulates(tmp_path):
    """A cell a budgeted run never reached: status not_run with its reason, no samples."""
    from ssmbench.figures.style import STATUS_MARKERS

    never = make_record(
        status="not_run",
        reason="budget",
        samples_ms=[],
        n_samples=0,
        time_ms_median=None,
        time_ms_p95=None,
        seq_len=128,
    )
    path = tmp_path / "never.json"
    records.write_record(path, never)
    assert records.read_record(path).status == "not_run"
    cells = tables.cells_table([make_record(), never])
    assert list(cells.status) == ["ok", "not_run"]
    assert "not_run" in records.STATUSES and "not_run" in STATUS_MARKERS
    schema_statuses = records.schema()["properties"]["status"]["enum"]
    assert schema_statuses == list(records.STATUSES)
    with pytest.raises(ValueError, match="reason"):
        records.validate_record({**never.to_dict(), "reason": ""})


def test_ops_table_takes_status_rows_and_old_files(tmp_path):
    keys = {
        "run": "t",
        "model": "mamba3",
        "backend": "fused",
        "phase": "prefill",
        "batch": 1,
        "seq_len": 64,
        "d_state": 16,
        "dtype": "bf16",
        "device": "cpu",
        "device_name": "",
    }
    status_row = {**keys, "status": "unavailable", "reason": "needs a CUDA device"}
    profiled = {
        **keys,
        "backend": "torch",
        "bucket": "gemm",
        "time_ms": 1.5,
        "share": 1.0,
        "n_kernels": 2.0,
        "top_kernels": "aten::mm",
        "time_basis": "cpu_self",
    }
    tables.write_ops([status_row], tmp_path / "a.ops.csv")
    tables.write_ops([{**profiled, "status": "ok", "reason": ""}], tmp_path / "b.ops.csv")
    pd.DataFrame([profiled]).to_csv(tmp_path / "old.ops.csv", index=False)  # no status
    ops = tables.ops_table([tmp_path / "a.ops.csv", tmp_path / "b.ops.csv"])
    assert sorted(ops.status) == ["ok", "unavailable"]
    assert ops.set_index("backend").loc["fused", "reason"] == "needs a CUDA device"
    assert list(tables.read_ops(tmp_path / "old.ops.csv").status) == ["ok"]
    # an ok row without a bucket, or a status row without a reason, is refused
    tables.write_ops([{**status_row, "reason": ""}], tmp_path / "bad.ops.csv")
    with pytest.raises(ValueError, match="why_not_ok"):
        tables.read_ops(tmp_path / "bad.ops.csv")
    tables.write_ops([{**keys, "status": "ok", "reason": ""}], tmp_path / "bad2.ops.csv")
    with pytest.raises(ValueError, match="ok_has_bucket"):
        tables.read_ops(tmp_path / "bad2.ops.csv")
