"""The three floors, the bound, the flag and the verdict's floor sentences, on synthetic
records whose every number is worked out by hand here.

The operator count (``n_ops``, ``n_ops_kind``) is a record field of the dispatch branch;
until it is a CellRecord field these tests add it to the cells table as the table will
carry it."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from ssmbench import analysis, floors, tables
from ssmbench.paths import REPO
from tests.conftest import make_record

SHIPPED = REPO / "results" / "precollected"
LLC = 32 << 20  # 33,554,432 bytes
# A device record: copy 40 GB/s (best sample 50), fp32 matmul 0.2 TFLOP/s (best 0.25),
# one eager dispatch 5 us (fastest 4), one kernel inside a graph replay 2 us.
DEVICE = {
    "device": "cpu",
    "device_name": "Test CPU",
    "copy": {"gbps": 40.0, "samples_gbps": [38.0, 40.0, 50.0]},
    "matmul": {"fp32": {"tflops": 0.2, "samples_tflops": [0.19, 0.2, 0.25]}},
    "ceilings": {"bw_gbps": 40.0, "tflops": {"fp32": 0.2}},
    "dispatch": {
        "eager_us": 5.0,
        "eager_spread_us": [4.0, 6.0],
        "samples_us": [4.0, 5.0, 6.0],
        "graph_us": 2.0,
        "graph_spread_us": [1.0, 3.0],
        "graph_samples_us": [1.0, 2.0, 3.0],
        "method": "test",
    },
    "llc_bytes": LLC,
}


def cell(seq_len, time_ms, flop, nbytes, n_ops, backend="torch", kind="aten_ops", **kw):
    """One ok cell's record (fp32, measured against DEVICE's medians) and its op count."""
    record = make_record(
        seq_len=seq_len,
        backend=backend,
        phase="decode" if "graph" in backend else "prefill",
        samples_ms=[time_ms] * 3,
        time_ms_median=time_ms,
        time_ms_p95=time_ms,
        flop=flop,
        bytes=nbytes,
        compute_dtype="fp32",
        ceiling_tflops=0.2,
        ceiling_bw_gbps=40.0,
        llc_bytes=float(LLC),
        **kw,
    )
    return record, n_ops, kind


def table(*cells, device=DEVICE) -> pd.DataFrame:
    records = [c[0] for c in cells]
    base = tables.cells_table(records)
    order = {r.seq_len: (n, k) for r, n, k in cells}
    base["n_ops"] = base.seq_len.map(lambda t: order[t][0]).astype(float)
    base["n_ops_kind"] = base.seq_len.map(lambda t: order[t][1])
    return floors.with_floors(base, device).set_index("seq_len")


def test_floors_bound_and_explained_by_hand():
    # T=64: 3000 ops x 5 us = 15 ms; 2e8 B / 40 GB/s = 5 ms; 2e9 FLOP / 0.2 TFLOP/s = 10 ms
    # T=128: 10 ops = 0.05 ms; 4e8 B = 10 ms; 6e9 FLOP = 30 ms -> compute, 30 / 40
    # T=256: 100 graph kernels x 2 us = 0.2 ms; 8e8 B = 20 ms; 2e8 FLOP = 1 ms -> bandwidth
    t = table(
        cell(64, 20.0, 2e9, 2e8, 3000),
        cell(128, 40.0, 6e9, 4e8, 10),
        cell(256, 25.0, 2e8, 8e8, 100, backend="torch-graph", kind="graph_kernels"),
    )
    expected = {
        64: (15e-3, 5e-3, 10e-3, "dispatch", 0.75),
        128: (0.05e-3, 10e-3, 30e-3, "compute", 0.75),
        256: (0.2e-3, 20e-3, 1e-3, "bandwidth", 0.8),
    }
    for seq_len, (dispatch, bandwidth, compute, bound, explained) in expected.items():
        row = t.loc[seq_len]
        assert row.t_dispatch_s == pytest.approx(dispatch)
        assert row.t_bandwidth_s == pytest.approx(bandwidth)
        assert row.t_compute_s == pytest.approx(compute)
        assert (row.bound, row.floor_flag) == (bound, "")
        assert row.explained == pytest.approx(explained)


def test_a_graph_backend_without_a_kind_pays_the_graph_cost():
    t = table(cell(64, 5.0, 1e6, 1e4, 100, backend="torch-graph", kind=""))
    assert t.loc[64].t_dispatch_s == pytest.approx(100 * 2e-6)


def test_a_record_without_dispatch_data_has_no_dispatch_floor():
    """A shipped run's: no n_ops, no dispatch block; the other floors stand."""
    base = tables.cells_table([cell(64, 20.0, 2e9, 2e8, 0)[0]])
    out = floors.with_floors(base, {k: v for k, v in DEVICE.items() if k != "dispatch"})
    row = out.iloc[0]
    assert math.isnan(row.t_dispatch_s) and row.bound == "compute"
    assert row.explained == pytest.approx(0.5)
    assert floors.dispatch_missing(out)


def test_the_ceilings_spread_is_the_best_sample_over_the_median():
    allowance = floors.slack(DEVICE)
    assert allowance.bandwidth == pytest.approx(40 / 50)
    assert allowance.compute_for("fp32") == pytest.approx(0.2 / 0.25)
    assert allowance.dispatch == pytest.approx(4 / 5)
    assert allowance.dispatch_graph == pytest.approx(1 / 2)
    assert floors.slack(None) == floors.Slack()


@pytest.mark.parametrize(
    "seq_len, time_ms, nbytes, n_ops, flag",
    [
        # the bandwidth floor is 5 ms, 4 ms at the copy's best sample: 4.5 ms is within it
        (64, 4.5, 2e8, 0, ""),
        # 3 ms beats 4 ms; 2e8 bytes do not fit a 32 MiB cache
        (128, 3.0, 2e8, 0, "below_floor: bandwidth"),
        # 1e7 bytes fit: floor 0.25 ms (0.2 at best), measured 0.1 ms
        (256, 0.1, 1e7, 0, "cache_resident: bandwidth"),
        # 1000 ops x 5 us = 5 ms (4 ms at the fastest sample), measured 3 ms; and 1e7 bytes
        # fit the cache, but a dispatch floor is never explained by a cache
        (512, 3.0, 1e7, 1000, "below_floor: dispatch"),
    ],
)
def test_a_cell_below_its_floor_is_flagged(seq_len, time_ms, nbytes, n_ops, flag):
    t = table(cell(seq_len, time_ms, 1e3, nbytes, n_ops))
    assert t.loc[seq_len].floor_flag == flag
    lines = floors.flagged_lines(t.reset_index())
    assert len(lines) == bool(flag)
    if flag:
        assert flag in lines[0] and f"T = {seq_len}" in lines[0]


def test_a_graph_cell_is_judged_by_the_graph_kernels_spread():
    # 1000 graph kernels x 2 us = 2 ms, 1 ms at the fastest sample: 1.5 ms passes, 0.9 not
    passes = table(cell(64, 1.5, 1e3, 1e3, 1000, backend="torch-graph", kind="graph_kernels"))
    fails = table(cell(64, 0.9, 1e3, 1e3, 1000, backend="torch-graph", kind="graph_kernels"))
    assert passes.loc[64].floor_flag == ""
    assert fails.loc[64].floor_flag == "below_floor: dispatch"


def test_the_flag_of_a_cell_below_compute_and_bandwidth_names_both():
    # 2e9 FLOP: 10 ms (8 at best); 2e8 B: 5 ms (4 at best); measured 1 ms
    t = table(cell(64, 1.0, 2e9, 2e8, 0))
    assert t.loc[64].floor_flag == "below_floor: bandwidth+compute"


def test_the_cells_table_keeps_its_floors_through_csv(tmp_path):
    records = [cell(64, 20.0, 2e9, 2e8, 0)[0], cell(128, 3.0, 1e3, 2e8, 0)[0]]
    written = tables.cells_table(records, device=DEVICE)
    written.to_csv(tmp_path / "cells.csv", index=False)
    read = tables.read_cells(tmp_path / "cells.csv")
    assert list(read.bound) == ["compute", "bandwidth"]
    assert list(read.floor_flag) == ["", "below_floor: bandwidth"]
    assert floors.has_floors(read) and floors.ensure_floors(read) is read


def test_a_table_without_floor_columns_gets_them_from_its_own():
    """A shipped table from before the floors (the task run's block cells) gets its
    bandwidth and compute floors from its own columns, and no dispatch floor."""
    shipped = tables.read_cells(SHIPPED / "tasks-cpu" / "tables" / "cells.csv")
    assert not floors.has_floors(shipped)
    filled = floors.ensure_floors(shipped)
    row = filled[filled.status == "ok"].iloc[0]
    assert row.t_bandwidth_s == pytest.approx(row.bytes / (row.ceiling_bw_gbps * 1e9))
    assert row.t_compute_s == pytest.approx(row.flop / (row.ceiling_tflops * 1e12))
    assert floors.dispatch_missing(filled)


def test_the_shipped_cpu_run_carries_its_floors():
    """The shipped cpu run was aggregated with its operator counts and dispatch cost: its
    dispatch floors are n_ops times the device record's cost, and ensure_floors keeps
    the table as it is."""
    import json

    shipped = tables.read_cells(SHIPPED / "cpu" / "tables" / "cells.csv")
    assert floors.has_floors(shipped) and floors.ensure_floors(shipped) is shipped
    device = json.loads((SHIPPED / "cpu" / "device.json").read_text())
    counted = shipped[(shipped.status == "ok") & (shipped.n_ops_kind == "aten_ops")]
    assert len(counted) > 100
    expected = counted.n_ops * device["dispatch"]["eager_us"] * 1e-6
    assert (counted.t_dispatch_s - expected).abs().max() < 1e-9
    assert set(counted.bound) <= {"dispatch", "bandwidth", "compute"}


def test_projected_floors_use_the_devices_numbers():
    base = table(cell(64, 20.0, 2e9, 2e8, 3000)).reset_index()
    out = floors.projected(base, 100.0, {"fp32": 1.0}, 1.0)
    row = out.iloc[0]  # 3000 x 1 us, 2e8 / 1e11 s, 2e9 / 1e12 s
    assert (row.t_dispatch_s, row.t_bandwidth_s, row.t_compute_s) == pytest.approx(
        (3e-3, 2e-3, 2e-3)
    )
    assert row.bound == "dispatch"
    assert math.isnan(floors.projected(base, 100.0, {"fp32": None}, None).iloc[0].t_compute_s)


# --- the verdict ---------------------------------------------------------------------


def verdict_tables():
    """Decode at T = 4096: attention 10 ms (dispatch 1, bandwidth 6, compute 0.5), mamba2
    2 ms (dispatch 1.5, bandwidth 0.2, compute 0.1); paired ratio 5.0, FLOP ratio 25."""
    rows = []
    for model, time_ms, (d, b, c) in (
        ("attention", 10.0, (1e-3, 6e-3, 0.5e-3)),
        ("mamba2", 2.0, (1.5e-3, 0.2e-3, 0.1e-3)),
    ):
        rows.append(
            dict(
                model=model, family=model, backend="torch", phase="decode", batch=1,
                dtype="fp32", seq_len=4096, status="ok", time_ms_median=time_ms,
                t_dispatch_s=d, t_bandwidth_s=b, t_compute_s=c, floor_flag="",
            )
        )  # fmt: skip
    cells = pd.DataFrame(rows)
    times = cells[floors.FLOOR_TIMES]
    cells["bound"] = floors.bound_of(times)
    cells["explained"] = times.max(axis=1) / (cells.time_ms_median * 1e-3)
    go = pd.DataFrame(
        [
            dict(
                phase="decode", batch=1, dtype="fp32", seq_len=4096, ssm="mamba2",
                attention_backend="torch", ssm_backend="torch", flop_ratio=25.0,
                latency_ratio=5.0,
            )
        ]
    )  # fmt: skip
    return cells, go


def test_the_verdict_explains_a_pair_by_its_floors():
    cells, go = verdict_tables()
    (sentence,) = analysis.floor_sentences(go, cells)
    # taking the SSM's bound (dispatch) out: attention max(10 - 1, 6) = 9 ms (x 0.9),
    # mamba2 max(2 - 1.5, 0.2) = 0.5 ms (x 0.25): 5.0 x 0.9 / 0.25 = 18.00, 18 / 25 = 0.72
    assert sentence.startswith("Floors, decode at T = 4096, batch 1 (arithmetic on measured")
    assert "attention bandwidth-bound (that floor 0.60 of its 10 ms)" in sentence
    assert "mamba2 dispatch-bound (that floor 0.75 of its 2 ms)" in sentence
    assert "without the dispatch floor the ratio would be 18.00x" in sentence
    assert "0.72 of the FLOP ratio as speed (measured: 0.20)" in sentence


def test_the_verdict_lists_flagged_cells_and_says_nothing_without_floors():
    cells, go = verdict_tables()
    cells.loc[1, "floor_flag"] = "below_floor: dispatch"
    sentences = analysis.floor_sentences(go, cells)
    assert "below_floor: dispatch" in sentences[-1] and "mamba2/torch decode" in sentences[-1]
    assert analysis.floor_sentences(go, cells.drop(columns=["bound"])) == []
