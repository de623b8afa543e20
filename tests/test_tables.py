"""The tables built from records: columns, schema checks, old tables, the ops table."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pandera.pandas as pa
import pytest

from ssmbench import records, tables
from tests.conftest import make_record


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
    # one row per record (sorted by the keys) holding its values, the size spread into columns
    assert len(cells) == len(recs)
    for rec in recs:
        (row,) = cells[
            (cells.backend == rec.backend)
            & (cells.seq_len == rec.seq_len)
            & (cells.status == rec.status)
        ].itertuples()
        assert row.d_model == rec.size["d_model"] and row.flop == rec.flop
        assert row.reason == rec.reason
        if rec.time_ms_median is None:
            assert pd.isna(row.time_ms_median)
        else:
            assert row.time_ms_median == rec.time_ms_median
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
    for table in [t for t in shipped if (t / "cells.csv").is_file()]:  # block runs
        assert len(tables.read_cells(table / "cells.csv")) > 0


def test_device_kind_names_each_cell_by_the_device_catalogue(tmp_path):
    """device_kind: the catalogue's entry for the leased GPU's name (the record's ``gpu``)
    before torch's ``device_name``, for a CPU model; the name itself where no entry
    matches; the device where the cell recorded no name.  Tables without it still read."""
    h200 = {"index": 0, "uuid": "GPU-0", "pci_bus_id": "00000000:01:00.0", "name": "NVIDIA H200"}
    cells = tables.cells_table(
        [
            make_record(seq_len=64, device="cuda", device_name="NVIDIA H200", gpu=h200),
            make_record(seq_len=128, device="cuda", device_name="NVIDIA H100 80GB HBM3"),
            make_record(seq_len=256, device="cuda", device_name="NVIDIA A10"),
            make_record(seq_len=512, device="cpu", device_name="AMD EPYC"),
            make_record(seq_len=1024, device="cpu", device_name="Intel(R) Xeon(R) Gold 6338"),
            make_record(seq_len=2048, device="cpu", device_name=""),
        ]
    )
    assert list(cells.device_kind) == [
        "H200 SXM", "H100 SXM", "NVIDIA A10", "AMD EPYC VM", "x86 server core", "cpu",
    ]  # fmt: skip
    tables.write_tables({"cells": cells}, {"cells.csv": str(tmp_path / "cells.csv")})
    assert list(tables.read_cells(tmp_path / "cells.csv").device_kind) == list(cells.device_kind)
    cells.drop(columns=["device_kind"]).to_csv(tmp_path / "old.csv", index=False)
    assert "device_kind" not in tables.read_cells(tmp_path / "old.csv")


def test_tables_refuse_duplicate_cells_and_p95_below_median(tmp_path):
    with pytest.raises(pa.errors.SchemaError, match="p95_ge_median"):
        tables.cells_table([make_record(time_ms_p95=1.0)])
    with pytest.raises(ValueError, match="two records of one process"):
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
