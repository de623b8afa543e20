"""``python -m ssmbench floors``: a run's floors projected onto a catalogue device, on the
shipped cpu run.  The catalogue entry is a stand-in with round numbers (the catalogue's
own entries are tested against it where ``ssmbench.catalogue`` exists)."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from ssmbench import projection
from ssmbench.__main__ import main
from ssmbench.paths import REPO

RUN = REPO / "results" / "precollected" / "cpu"
# the shipped run's device is "Intel(R) Xeon(R) Processor" (device.json): this entry
# matches it
HERE = SimpleNamespace(
    name="This CPU",
    kind="cpu",
    peak_TFLOPs={"fp32": 1.0, "bf16": None, "fp16": None, "tf32": None},
    bandwidth_GBps=100.0,
    memory_GB=None,
    l2_MB=None,
    tdp_W=None,
    sources={"bandwidth_GBps": "a stand-in for the tests"},
    notes={},
    matches=lambda name: name == "Intel(R) Xeon(R) Processor",
)
ELSEWHERE = SimpleNamespace(**{**vars(HERE), "name": "Other CPU", "matches": lambda name: False})
# a class entry without datasheet numbers (as the catalogue's CPU classes are)
CLASS = SimpleNamespace(
    **{
        **vars(HERE),
        "name": "A CPU class",
        "peak_TFLOPs": {"fp32": None, "bf16": None, "fp16": None, "tf32": None},
        "bandwidth_GBps": None,
        "sources": {},
        "notes": {"bandwidth_GBps": "a class, not a product"},
    }
)


@pytest.fixture
def catalogue(monkeypatch):
    entries = {e.name: e for e in (HERE, ELSEWHERE, CLASS)}
    monkeypatch.setattr(projection, "catalogue_device", lambda name: entries[name])


def line_of(text: str, cell: str) -> str:
    (line,) = [x for x in text.splitlines() if x.startswith(cell + " ")]
    return line


def shipped_row(model, backend, phase, seq_len):
    cells = pd.read_csv(RUN / "tables" / "cells.csv")
    return cells[
        (cells.model == model)
        & (cells.backend == backend)
        & (cells.phase == phase)
        & (cells.seq_len == seq_len)
        & (cells.batch == 1)
    ].iloc[0]


def test_the_projection_on_the_device_the_run_was_measured_on(catalogue, capsys):
    assert main(["floors", "--device", "This CPU", "--dispatch-us", "5"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("PROJECTION onto This CPU (cpu): the floors at the numbers below")
    assert "bandwidth 100 GB/s (datasheet)" in text and "fp32 peak 1 TFLOP/s (datasheet)" in text
    assert "dispatch: 5 us per op, stated on the command line (--dispatch-us)" in text
    assert "measured on this device: measured floors and median beside" in text
    row = shipped_row("mamba2", "torch", "decode", 65536)
    line = line_of(text, "mamba2/torch decode b1 T65536 fp32")
    projected, measured = line.split("|")[1:]
    # projected: n_ops x 5 us, bytes / 100 GB/s and flop / 1 TFLOP/s, in ms
    assert projected.split()[:3] == [
        f"{row.n_ops * 5e-3:.4g}",
        f"{row.bytes / 1e8:.4g}",
        f"{row.flop / 1e9:.4g}",
    ]
    assert projected.split()[3] == "dispatch"  # 162 ops at 5 us outweigh 3.4 MB at 100 GB/s
    # measured: the median, then the floors at the run's own dispatch cost and ceilings
    assert measured.split()[0] == f"{row.time_ms_median:.4g}"
    assert measured.split()[1] == f"{row.t_dispatch_s * 1e3:.4g}"
    assert measured.split()[2] == f"{row.bytes / (row.ceiling_bw_gbps * 1e6):.4g}"
    assert measured.split()[4] == row.bound


def test_the_projection_elsewhere_has_no_measured_columns(catalogue, capsys):
    assert main(["floors", "--device", "Other CPU", "--run", str(RUN)]) == 0
    text = capsys.readouterr().out
    assert "not measured on this device: projected floors only" in text
    assert "dispatch: -, unknown: no --dispatch-us, and no run on Other CPU measured it" in text
    assert "measured:" not in text


def test_a_class_without_datasheet_numbers_takes_the_runs_measured_ceilings(catalogue):
    """The catalogue's CPU classes have no vendor figure: where the run was on the device,
    its measured ceilings stand in, and the header says so."""
    text = projection.report("A CPU class", RUN)
    row = shipped_row("mamba2", "torch", "decode", 65536)
    assert f"bandwidth {row.ceiling_bw_gbps:.4g} GB/s (no datasheet number" in text
    projected, measured = line_of(text, "mamba2/torch decode b1 T65536 fp32").split("|")[1:]
    assert projected.split()[1:3] == measured.split()[2:4]  # the same ceilings
    elsewhere = SimpleNamespace(**{**vars(CLASS), "matches": lambda name: False})
    roof = projection.roofs(elsewhere, None, measured_here=False)
    assert roof.bandwidth_gbps is None and "bandwidth: none (a class, not a product)" in roof.said


def test_bad_input_is_refused(catalogue, capsys):
    assert main(["floors", "--device", "This CPU", "--dispatch-us", "0"]) == 2
    assert "must be positive" in capsys.readouterr().err
    assert main(["floors", "--device", "This CPU", "--run", str(REPO / "nowhere")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_a_stated_dispatch_cost_gives_a_dispatch_floor(catalogue):
    name = "Intel(R) Xeon(R) Processor"
    record = {"device": "cpu", "device_name": name, "dispatch": {"eager_us": 3.0}}
    measured = projection.dispatch_for(HERE, record, None, "")
    assert measured.us == 3.0 and "measured on Intel(R) Xeon(R) Processor" in measured.source
    stated = projection.dispatch_for(HERE, record, 7.0, "a vendor's note")
    assert (stated.us, stated.source) == (7.0, "a vendor's note")
    assert projection.dispatch_for(ELSEWHERE, record, None, "").us is None


def test_the_catalogues_cpu_entries_project_the_shipped_run():
    catalogue = pytest.importorskip("ssmbench.catalogue")
    entry = catalogue.match("Intel(R) Xeon(R) Processor", "cpu")  # the shipped run's device_name
    assert entry is not None, "the catalogue has no CPU entry for the shipped run"
    text = projection.report(entry.name, RUN, 5.0, "assumed for the test")
    assert text.startswith(f"PROJECTION onto {entry.name} (cpu)")
    assert "measured on this device" in text
    assert "mamba2/torch decode b1 T65536 fp32" in text
