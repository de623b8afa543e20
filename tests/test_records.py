"""Records: the schema, atomic writes, statuses."""

from __future__ import annotations

import json
import math

import pytest

from ssmbench import records, tables
from tests.conftest import make_record
from tests.gpufakes import MIXED, fake_gpus


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
    assert "not_run" in STATUS_MARKERS  # the figures mark it (the schema's enum: test_registry)
    with pytest.raises(ValueError, match="reason"):
        records.validate_record({**never.to_dict(), "reason": ""})


def test_every_bound_of_the_cells_table_is_a_bound_of_the_record():
    """A record its schema accepts must make a row the cells table accepts (the fuzz of
    tests/test_fuzz.py found fields where it did not): every lower bound and every set
    of values the table checks is the record schema's, or tighter."""
    from ssmbench import tables

    schema = records.schema()
    for column in tables.CELL_COLUMNS:
        prop = schema["properties"][column]
        prop = schema["$defs"][prop["$ref"].rsplit("/", 1)[1]] if "$ref" in prop else prop
        for check in tables.CELLS_SCHEMA.columns[column].checks:
            stats = check.statistics
            if "min_value" in stats:
                assert prop.get("minimum", -math.inf) >= stats["min_value"], column
            if "allowed_values" in stats and "enum" in prop:
                assert set(prop["enum"]) <= set(stats["allowed_values"]), column


def test_a_record_names_its_gpu_and_older_records_without_one_still_read(tmp_path):
    gpu = {"index": 3, "uuid": "GPU-6e1d7c44", "pci_bus_id": "0000:b3:00.0", "name": "NVIDIA H200"}
    path = tmp_path / "gpu.json"
    records.write_record(path, make_record(device="cuda", gpu=gpu))
    assert records.read_record(path).gpu == gpu
    older = make_record().to_dict()
    del older["gpu"]  # a record written before the lease (results/precollected)
    path.write_text(json.dumps(older))
    assert records.read_record(path).gpu is None
    with pytest.raises(ValueError, match="field gpu"):
        records.write_record(path, make_record(gpu={**gpu, "index": "3"}))
    # one value per cell it is not: the cells table leaves it to the record
    assert "gpu" not in tables.CELL_COLUMNS


def test_a_record_carries_its_op_count_and_older_records_without_one_still_read(tmp_path):
    path = tmp_path / "ops.json"
    counted = make_record(n_ops=27, n_ops_kind="aten_ops", n_ops_method="one untimed call")
    records.write_record(path, counted)
    back = records.read_record(path)
    assert (back.n_ops, back.n_ops_kind, back.n_ops_method) == (27, "aten_ops", "one untimed call")
    older = make_record().to_dict()
    for key in ("n_ops", "n_ops_kind", "n_ops_method"):
        del older[key]  # a record written before the count (results/precollected)
    path.write_text(json.dumps(older))
    assert records.read_record(path).n_ops is None and records.read_record(path).n_ops_kind == ""
    for bad, field in [
        ({"n_ops": 2.0}, "n_ops"),  # an integer, never a float
        ({"n_ops": -1}, "n_ops"),
        ({"n_ops_kind": "kernels"}, "n_ops_kind"),
    ]:
        with pytest.raises(ValueError, match=f"field {field}"):
            records.write_record(path, make_record(**{"n_ops": 3, "n_ops_kind": "aten_ops", **bad}))
    # one value per cell: a column of the cells table, empty for a cell not counted
    cells = tables.cells_table([counted, make_record(seq_len=128)])
    assert list(cells.n_ops.fillna(-1)) == [27, -1] and list(cells.n_ops_kind) == ["aten_ops", ""]


def calibration(gpu, bw_gbps: float) -> dict:
    """A calibration record of ``gpu`` (a fake ``Gpu``; None: the CPU) with its ceilings."""
    return {
        "status": "ok",
        "reason": "",
        "device": "cpu" if gpu is None else "cuda",
        "device_name": "cpu" if gpu is None else gpu.name,
        "gpu": None if gpu is None else gpu.to_dict(),
        "ceilings": {"bw_gbps": bw_gbps, "tflops": {"bf16": bw_gbps / 4}},
    }


def test_each_cell_is_joined_to_the_ceilings_of_its_own_device():
    """Four GPUs of two kinds, four calibrations: a cell's record's ``gpu`` picks its own
    device's, in whatever order the run lists them."""
    node = fake_gpus(4, MIXED)
    bandwidths_gbps = (3300, 3200, 1900, 2000)
    calibrations = [calibration(g, bw) for g, bw in zip(node, bandwidths_gbps, strict=True)]
    for i, gpu in enumerate(node):
        assert records.ceilings_for(gpu.to_dict(), calibrations[::-1]) is calibrations[i]
    # the plan's GPU list may lack a UUID (the driver's, before first use): the bus id joins
    no_uuid = {**node[2].to_dict(), "uuid": ""}
    assert records.ceilings_for(no_uuid, calibrations) is calibrations[2]
    # another node's GPU at the same bus id is not this one
    elsewhere = {**node[0].to_dict(), "uuid": "GPU-elsewhere"}
    assert not records.same_gpu(elsewhere, node[0].to_dict())


def test_a_card_never_takes_another_models_ceilings():
    """One device.json measured on whichever GPU (SLURM chose it): a cell on a GPU of the
    same model takes it, one on the other model has none; a CPU cell takes the record
    that names no GPU, also one from before records named it."""
    h100, _, a100, _ = fake_gpus(4, MIXED)
    run_wide = [calibration(h100, 3300)]
    sibling = {**h100.to_dict(), "index": 1, "uuid": "GPU-sibling", "pci_bus_id": "0000:99:00.0"}
    assert records.ceilings_for(sibling, run_wide) is run_wide[0]
    assert records.ceilings_for(a100.to_dict(), run_wide) is None
    cpu = calibration(None, 20)
    assert records.ceilings_for(None, [*run_wide, cpu]) is cpu
    assert records.ceilings_for(None, run_wide) is None
    shipped = {k: v for k, v in cpu.items() if k != "gpu"}  # a record older than `gpu`
    assert records.ceilings_for(None, [shipped]) is shipped
