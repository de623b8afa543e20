"""The join of runs side by side (ssmbench.compare) on two small synthetic runs: one cell
per (family, phase, batch, T) at the run's lowest precision, its go/no-go rows or its own
ratios, ``meets`` where both runs have a point, and the words for what did not meet."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from ssmbench import compare
from ssmbench.compare import NO_INTERVAL, Run, compare_table, read_compare, unmet


def cells(rows: list[tuple], device: str, device_name: str, run: str) -> pd.DataFrame:
    """Cells from (model, backend, dtype, T, time_ms[, compute_util]); prefill, batch 1."""
    return pd.DataFrame(
        [
            dict(
                run=run, model=m, backend=b, phase="prefill", batch=1, seq_len=t, d_state=16,
                dtype=d, device=device, device_name=device_name, status="ok",
                time_ms_median=ms, compute_util=util[0] if util else math.nan,
            )
            for m, b, d, t, ms, *util in rows
        ]
    )  # fmt: skip


# Run "cpu": attention and mamba2 at T 256 and 1024 in fp32, a slow naive backend beside
# torch, a compute utilization, and a go/no-go table with one row.
CPU = Run(
    "cpu",
    cells(
        [
            ("attention", "torch", "fp32", 256, 2.0, 0.5),
            ("attention", "naive", "fp32", 256, 9.0, 0.1),
            ("attention", "torch", "fp32", 1024, 16.0, 0.6),
            ("mamba2", "torch", "fp32", 256, 4.0, 0.3),
            ("mamba2", "torch", "fp32", 1024, 8.0, 0.4),
        ],
        "cpu",
        "AMD EPYC",
        "cpu",
    ),
    go_no_go=pd.DataFrame(
        [
            dict(
                phase="prefill",
                batch=1,
                dtype="fp32",
                seq_len=1024,
                ssm="mamba2",
                attention_backend="torch",
                ssm_backend="torch",
                latency_ratio=2.0,
                latency_lo=1.5,
                latency_hi=2.5,
                interval="hierarchical",
            )
        ]
    ),  # fmt: skip
)
# Run "gpu": no go/no-go table; at T 1024 in bf16 and in (faster) fp32, at T 4096 in bf16;
# mamba, which the cpu run lacks, at T 1024.
GPU = Run(
    "gpu",
    cells(
        [
            ("attention", "torch", "bf16", 1024, 0.9),
            ("attention", "torch", "fp32", 1024, 0.5),
            ("attention", "torch", "bf16", 4096, 4.0),
            ("mamba2", "torch", "bf16", 1024, 0.3),
            ("mamba2", "torch", "fp32", 1024, 0.2),
            ("mamba2", "torch", "bf16", 4096, 1.0),
            ("mamba", "torch", "bf16", 1024, 0.45),
        ],
        "cuda",
        "NVIDIA H100 80GB HBM3",
        "gpu",
    ),
)


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return compare_table([CPU, GPU])


def rows(table, quantity, run):
    part = table[(table.quantity == quantity) & (table.run == run)]
    return {(r.family, r.seq_len): r for r in part.itertuples()}


def test_one_cell_per_point_at_the_lowest_precision_and_fastest_backend(table):
    cpu, gpu = rows(table, "time_ms", "cpu"), rows(table, "time_ms", "gpu")
    assert sorted(cpu) == [
        ("attention", 256),
        ("attention", 1024),
        ("mamba2", 256),
        ("mamba2", 1024),
    ]
    assert cpu[("attention", 256)].value == 2.0 and cpu[("attention", 256)].backend == "torch"
    # bf16 is kept although the fp32 cell is faster: a run is compared at its lowest precision
    assert gpu[("attention", 1024)].value == 0.9 and gpu[("attention", 1024)].dtype == "bf16"
    assert len(gpu) == 5
    counts = table[table.quantity == "ok_cells"]
    assert list(zip(counts.run, counts.value, strict=True)) == [("cpu", 4.0), ("gpu", 5.0)]


def test_device_kind_names_each_run_as_the_catalogue_does(table):
    kinds = table.groupby("run").device_kind.agg(set).to_dict()
    assert kinds == {"cpu": {"AMD EPYC VM"}, "gpu": {"H100 SXM"}}


def test_meets_where_both_runs_have_the_point(table):
    met = table[table.meets & (table.quantity == "time_ms")]
    assert sorted(set(zip(met.family, met.seq_len, strict=True))) == [
        ("attention", 1024),
        ("mamba2", 1024),
    ]
    assert sorted(met.run) == ["cpu", "cpu", "gpu", "gpu"]
    # utilization: only the cpu run has it, so it meets nowhere
    util = table[table.quantity == "compute_util"]
    assert set(util.run) == {"cpu"} and not util.meets.any()
    assert rows(table, "compute_util", "cpu")[("mamba2", 1024)].value == 0.4


def test_ratios_from_the_go_no_go_table_or_from_the_cells(table):
    (cpu,) = rows(table, "latency_ratio", "cpu").values()  # the go/no-go row, with interval
    assert (cpu.family, cpu.seq_len, cpu.value, cpu.lo, cpu.hi) == ("mamba2", 1024, 2.0, 1.5, 2.5)
    assert cpu.interval == "hierarchical" and cpu.meets
    gpu = rows(table, "latency_ratio", "gpu")
    assert sorted(gpu) == [("mamba", 1024), ("mamba2", 1024), ("mamba2", 4096)]
    assert gpu[("mamba2", 1024)].value == pytest.approx(0.9 / 0.3)  # bf16 over bf16
    assert gpu[("mamba", 1024)].value == pytest.approx(0.9 / 0.45)
    assert gpu[("mamba2", 4096)].value == pytest.approx(4.0 / 1.0)
    assert all(r.interval == NO_INTERVAL and math.isnan(r.lo) for r in gpu.values())
    assert gpu[("mamba2", 1024)].meets and not gpu[("mamba", 1024)].meets


def test_what_did_not_meet_is_said(table):
    assert unmet(table, "time_ms") == [
        "cpu: prefill batch 1: T 256",
        "gpu: mamba (no other run has these families)",
        "gpu: prefill batch 1: T 4096",
    ]
    assert unmet(table, "compute_util", ["cpu", "gpu"]) == [
        "cpu: attention, mamba2 (no other run has these families)",
        "gpu: none",
    ]


def test_the_table_survives_its_csv(table, tmp_path):
    table.to_csv(tmp_path / "compare.csv", index=False)
    back = read_compare(tmp_path / "compare.csv")
    assert list(back.columns) == compare.COLUMNS
    assert back.meets.dtype == bool and back.meets.sum() == table.meets.sum()
    pd.testing.assert_frame_equal(back[["run", "value"]], table[["run", "value"]])


def test_runs_must_have_distinct_names():
    with pytest.raises(ValueError, match=r"distinct names, got \['cpu', 'cpu'\]"):
        compare_table([CPU, CPU])


def test_a_run_without_ok_cells_is_named_with_nothing_to_compare():
    failed = Run("failed", GPU.cells.assign(status="oom", time_ms_median=math.nan))
    table = compare_table([CPU, failed])
    assert compare.compared(table) == ["cpu", "failed"] and not table.meets.any()
    assert list(table.value[table.quantity == "ok_cells"]) == [4.0, 0.0]
    assert set(table.run[table.quantity != "ok_cells"]) == {"cpu"}
    assert "failed: none" in unmet(table, "time_ms")
