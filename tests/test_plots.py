"""Figures draw from tables alone and show cells that did not run."""

from __future__ import annotations

import pytest

from ssmbench import plots, tables
from tests.test_records import make_record


def cells():
    recs = [
        make_record(
            model=m,
            backend=b,
            seq_len=t,
            time_ms_median=t / 10,
            time_ms_p95=t / 9,
            device_name="Test CPU",
        )
        for m in ("attention", "mamba")
        for b in ("naive", "torch")
        for t in (64, 128, 256)
    ]
    recs.append(
        make_record(
            model="attention",
            backend="naive",
            seq_len=512,
            status="oom",
            reason="out of memory",
            samples_ms=[],
            n_samples=0,
            time_ms_median=None,
            time_ms_p95=None,
        )
    )
    return tables.cells_table(recs)


def test_latency_scaling_lines_band_and_status_markers(tmp_path):
    fig = plots.draw("latency_scaling", cells(), phase="prefill")
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert sorted(labels) == sorted(
        f"{m} / {b}" for m in ("attention", "mamba") for b in ("naive", "torch")
    )
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert len(ax.collections) == 4 + 1  # four P95 bands, one oom marker set
    assert any("attention: oom" == c.get_label() for c in ax.collections)
    assert "Test CPU" in fig._suptitle.get_text() and "fp32" in ax.get_title()
    plots.save(fig, tmp_path / "f.pdf", tmp_path / "f.png")
    assert (tmp_path / "f.pdf").stat().st_size > 1000 and (tmp_path / "f.png").stat().st_size > 1000


def test_same_table_gives_the_same_pdf(tmp_path):
    for name in ("a.pdf", "b.pdf"):
        plots.save(plots.draw("latency_scaling", cells()), tmp_path / name)
    assert (tmp_path / "a.pdf").read_bytes() == (tmp_path / "b.pdf").read_bytes()


def test_filters_and_errors():
    fig = plots.draw("latency_scaling", cells(), models=["mamba"], backends=["torch"])
    assert [line.get_label() for line in fig.axes[0].get_lines()] == ["mamba / torch"]
    with pytest.raises(ValueError, match="no cells with phase='decode'"):
        plots.draw("latency_scaling", cells(), phase="decode")
    with pytest.raises(ValueError, match="unknown figure"):
        plots.draw("nope", cells())


def test_plots_module_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, ssmbench.plots, ssmbench.tables; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
