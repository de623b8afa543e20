"""The workload table: its analytic columns worked out by hand for a small hybrid (one
Mamba-2 layer, one attention layer), the sequential steps by form, and the table's shape
on a synthetic record set."""

from __future__ import annotations

import pytest

from ssmbench import counts, tables, workload
from ssmbench.matrix import Size
from tests.conftest import RECORD_SIZE, make_record

# d_model 32, expand 2 -> E = 64; head_dim 16 -> H = 4 Mamba-2 heads, 2 attention heads
HYBRID = {**RECORD_SIZE, "n_layers": 2, "hybrid_pattern": "MA"}
N = 8  # d_state
# Mamba-2 layer state per sequence: conv over E + 2N = 80 channels x d_conv 4 = 320, plus
# H P N = 4 x 16 x 8 = 512: 832 fp32 elements
STATE_BYTES = 832 * 4


def hybrid_records():
    """A prefill at T = 64 and a decode step after T = 64, batch 2, of the hybrid."""
    return [
        make_record(model="hybrid", phase=phase, batch=2, d_state=N, size=HYBRID)
        for phase in ("prefill", "decode")
    ]


def test_state_and_kv_bytes_by_hand():
    size = Size(**HYBRID)
    state, kv = counts.cache_split("hybrid", size, 1, 64, N)
    assert state * 4 == STATE_BYTES and kv == 2 * 1 * 64 * 2 * 16
    state, kv = counts.cache_split("hybrid", size, 2, 64, N, decode=True)  # T + 1 slots
    assert state == 2 * 832 and kv == 2 * 2 * 65 * 2 * 16


def test_bytes_read_and_written_add_up_and_split_by_hand():
    size = Size(**HYBRID)
    c = counts.counts("hybrid", "prefill", size, 2, 64, N, "fp32")
    y = 2 * 64 * 32 * 4  # the output, batch x T x d_model fp32
    cache = 2 * STATE_BYTES + 2 * 2 * 64 * 2 * 16 * 4  # both sequences' state, the KV
    assert c.bytes_written == y + cache
    assert c.bytes_read == c.weights_bytes + y  # the input is the output's size
    assert c.bytes_read + c.bytes_written == c.bytes


@pytest.mark.parametrize(
    "model, backend, phase, steps",
    [
        ("attention", "torch", "prefill", 2),  # all tokens at once, 2 layers
        ("hybrid", "torch", "prefill", 2),  # attention 1 + chunked SSD 1
        ("mamba", "naive", "prefill", 2 * 64),  # a loop over tokens
        ("mamba", "torch", "prefill", 2 * 4),  # 64 / 16-token blocks
        ("mamba", "torch", "train", 2 * 2 * 64),  # per-token forward and backward
        ("mamba", "fused", "prefill", 2 * 1),  # one 2048-token chunk
        ("mamba2", "fused", "prefill", 2 * 4),  # 64 / chunk 16
        ("deltanet", "torch", "prefill", 2 * 4),  # a loop over 4 chunks
        ("deltanet", "torch", "train", 2 * 2 * 4),
        ("s4d", "torch", "prefill", 2),  # the FFT
        ("mamba2", "torch-graph", "decode", 2),  # one token per layer
    ],
)
def test_sequential_steps_by_form(model, backend, phase, steps):
    assert workload.sequential_steps(model, backend, phase, 64, Size(**HYBRID)) == steps


def test_the_mamba_block_length_is_the_models():
    from ssmbench.models.mamba import TIME_BLOCK

    assert workload.MAMBA_TIME_BLOCK == TIME_BLOCK


def test_the_workload_table_of_a_synthetic_run(tmp_path):
    records = hybrid_records()
    cells = tables.cells_table(records)
    sizes = {tuple(getattr(r, k) for k in tables.KEYS): workload.size_of(r.size) for r in records}
    table = workload.workload_table(cells, sizes).set_index("phase")
    assert list(table.reset_index()[workload.WORKLOAD_COLUMNS[:8]].columns) == tables.KEYS
    assert table.loc["prefill", "state_bytes_per_seq"] == STATE_BYTES
    assert table.loc["decode", "state_bytes_per_seq"] == STATE_BYTES
    assert table.loc["prefill", "kv_cache_bytes"] == 2 * 2 * 64 * 2 * 16 * 4
    assert table.loc["decode", "kv_cache_bytes"] == 2 * 2 * 65 * 2 * 16 * 4
    assert table.loc["prefill", "sequential_steps"] == 2
    assert table.loc["prefill", "time_s"] == pytest.approx(2e-3)  # make_record's 2 ms
    assert table.loc["prefill", "bound"] == ""  # make_record has no ceilings
    table.reset_index()[workload.WORKLOAD_COLUMNS].to_csv(tmp_path / "w.csv", index=False)
    back = workload.read_workload(tmp_path / "w.csv")
    assert len(back) == 2 and back.n_ops.isna().all()


def test_a_row_without_a_size_keeps_its_measured_columns():
    """An imported model: no size preset, no analytic columns; the row stays."""
    cells = tables.cells_table([make_record(model="attention", d_state=0)])
    cells[tables.SIZE_COLUMNS] = None
    row = workload.workload_table(cells).iloc[0]
    assert row.model == "attention" and row.flop == 1e6
    assert row[["bytes_read", "state_bytes_per_seq"]].isna().all()
