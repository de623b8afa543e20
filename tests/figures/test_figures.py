"""Figures draw from tables alone and show cells that did not run."""

from __future__ import annotations

import itertools
import json
import re

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from ssmbench import analysis, compare, figures, registry, tables
from ssmbench import claims as ledger
from ssmbench.config import FigureSpec
from ssmbench.figures import style
from ssmbench.figures.utilization import CACHE_RESIDENT_LABEL
from ssmbench.paths import REPO
from ssmbench.tasks import table as task_table
from tests.conftest import NOTEBOOKS, draw_notebook, make_record


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
    fig = figures.draw("latency_scaling", cells(), phase="prefill")
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert sorted(labels) == sorted(
        f"{m} / {b}" for m in ("attention", "mamba") for b in ("naive", "torch")
    )
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert len(ax.collections) == 4 + 1  # four P95 bands, one oom marker set
    assert any("attention: oom" == c.get_label() for c in ax.collections)
    assert "Test CPU" in fig._suptitle.get_text() and "fp32" in ax.get_title()
    figures.save(fig, tmp_path / "f.pdf", tmp_path / "f.png")
    assert (tmp_path / "f.pdf").stat().st_size > 1000 and (tmp_path / "f.png").stat().st_size > 1000


def test_same_table_gives_the_same_pdf(tmp_path):
    for name in ("a.pdf", "b.pdf"):
        figures.save(figures.draw("latency_scaling", cells()), tmp_path / name)
    assert (tmp_path / "a.pdf").read_bytes() == (tmp_path / "b.pdf").read_bytes()


def test_filters_and_errors():
    fig = figures.draw("latency_scaling", cells(), models=["mamba"], backends=["torch"])
    assert [line.get_label() for line in fig.axes[0].get_lines()] == ["mamba / torch"]
    fig = figures.draw("latency_scaling", cells(), phase="decode")
    assert "no cells in the table with phase='decode'" in texts(fig).replace("\n", " ")
    with pytest.raises(ValueError, match="unknown figure"):
        figures.draw("nope", cells())


def test_figures_do_not_import_torch():
    import subprocess
    import sys

    code = "import sys, ssmbench.figures, ssmbench.analysis; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------------------
# The seven figures drawn from the extended cells table (built here, column by column, so the
# tests do not depend on how records become tables).

FAMILIES = ("attention", "mamba", "s4d")
BACKENDS = ("naive", "torch")
LENGTHS = (64, 128, 256)
CEILING_TFLOPS, CEILING_BW_GBPS = 2.0, 40.0
NO_ENERGY = "/sys/class/powercap not present"

# (model, backend, phase, seq_len, status, reason)
NOT_OK = [
    ("attention", "naive", "prefill", 512, "oom", "out of memory"),
    ("attention", "naive", "train", 512, "oom", "out of memory"),
    ("mamba", "naive", "train", 512, "timeout", "ran past 30 s"),
    ("s4d", "fused", "prefill", 64, "unavailable", "fused kernels need CUDA"),
    ("s4d", "fused", "decode", 64, "unavailable", "fused kernels need CUDA"),
]


def synthetic_cells(energy: bool = True) -> pd.DataFrame:
    """Every (family, backend, phase, T) of the constants above as an ok cell with plausible
    derived columns, plus the NOT_OK cells with empty measurements."""
    rows = []
    for i, (model, backend, phase, t) in enumerate(
        itertools.product(FAMILIES, BACKENDS, ("prefill", "decode", "train"), LENGTHS)
    ):
        time_ms = (1 + i % 5) * t / 100
        tokens = 1 if phase == "decode" else t
        flop, nbytes = 1e6 * t * (1 + i % 3), 1e4 * t
        tflops, bw_gbps = flop / (time_ms / 1e3) / 1e12, nbytes / (time_ms / 1e3) / 1e9
        rows.append(
            dict(
                model=model,
                backend=backend,
                phase=phase,
                seq_len=t,
                status="ok",
                reason="",
                time_ms_median=time_ms,
                time_ms_p95=time_ms * 1.1,
                tokens=float(tokens),
                flop=flop,
                bytes=nbytes,
                intensity=flop / nbytes,
                tflops=tflops,
                bw_gbps=bw_gbps,
                compute_util=tflops / CEILING_TFLOPS,
                bw_util=bw_gbps / CEILING_BW_GBPS,
                peak_bytes=3e6 + 2e4 * t,
                weights_bytes=2e6,
                cache_bytes=1e4 * t,
                activations_bytes=1e4 * t,
                energy_j=time_ms * 0.01 if energy else np.nan,
                energy_j_per_token=time_ms * 0.01 / tokens if energy else np.nan,
                energy_method="rapl" if energy else "",
                energy_reason="" if energy else NO_ENERGY,
            )
        )
    for model, backend, phase, t, status, reason in NOT_OK:
        rows.append(
            dict(
                model=model,
                backend=backend,
                phase=phase,
                seq_len=t,
                status=status,
                reason=reason,
                tokens=float(1 if phase == "decode" else t),
                energy_reason="" if energy else NO_ENERGY,
            )
        )
    df = pd.DataFrame(rows)
    df = df.assign(
        run="t",
        batch=1,
        d_state=np.where(df.model == "attention", 0, 4),
        dtype="fp32",
        device="cpu",
        device_name="Test CPU",
        ceiling_tflops=CEILING_TFLOPS,
        ceiling_bw_gbps=CEILING_BW_GBPS,
        compute_util_datasheet=np.nan,
        bw_util_datasheet=np.nan,
        n_samples=np.where(df.status == "ok", 10, 0),
        git_commit="0" * 40,
    )
    return df


def synthetic_ops() -> pd.DataFrame:
    buckets = list(style.BUCKET_COLORS)
    rows = []
    for model, backend, t in itertools.product(("attention", "mamba"), BACKENDS, LENGTHS):
        times = {b: (1 + k) * t / 1000 for k, b in enumerate(buckets) if b != "attention"}
        if model == "attention":
            times["attention"] = t / 100
        total = sum(times.values())
        for bucket, time_ms in times.items():
            rows.append(
                dict(
                    run="t",
                    model=model,
                    backend=backend,
                    phase="prefill",
                    batch=1,
                    seq_len=t,
                    dtype="fp32",
                    device_name="Test CPU",
                    bucket=bucket,
                    time_ms=time_ms,
                    share=time_ms / total,
                    n_kernels=3,
                    top_kernels="aten::mm; aten::add",
                    time_basis="CPU self time",
                )
            )
    return pd.DataFrame(rows)


def texts(fig) -> str:
    """Every piece of text in ``fig``: titles, labels, annotations, legend entries."""
    found = [t.get_text() for t in fig.findobj(matplotlib.text.Text)]
    return "\n".join(found)


def marker_labels(ax) -> set[str]:
    return {c.get_label() for c in ax.collections}


NEW_FIGURES = [
    "bandwidth_utilization",
    "compute_utilization",
    "roofline",
    "floors",
    "memory_footprint",
    "energy_per_token",
    "op_breakdown",
    "efficiency_sweep",
]


@pytest.mark.parametrize(
    "name", ["bandwidth_utilization", "compute_utilization", "energy_per_token"]
)
def test_metric_figures_have_a_panel_per_phase_and_mark_cells_that_did_not_run(name):
    fig = figures.draw(name, synthetic_cells())
    prefill, decode, train = fig.axes
    assert [ax.get_title() for ax in fig.axes] == [
        f"{p}, batch 1, fp32" for p in ("prefill", "decode", "train")
    ]
    lines = {line.get_label() for line in prefill.get_lines()}
    assert {f"{m} / {b}" for m in FAMILIES for b in BACKENDS} <= lines
    assert prefill.get_xscale() == "log" and prefill.get_yscale() == "log"
    assert {"attention: oom", "s4d: unavailable"} <= marker_labels(prefill)
    assert marker_labels(decode) == {"s4d: unavailable"}
    assert {"attention: oom", "mamba: timeout"} <= marker_labels(train)
    title = fig._suptitle.get_text()
    assert "Test CPU" in title and "fp32" in title and "batch 1" in title and "naive" in title
    legend = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"attention: oom", "mamba: timeout", "s4d: unavailable"} <= legend


def test_utilization_is_plotted_as_the_tables_fraction():
    fig = figures.draw("bandwidth_utilization", synthetic_cells(), phase="decode", models=["mamba"])
    (ax,) = fig.axes
    cells = synthetic_cells()
    want = cells[(cells.model == "mamba") & (cells.phase == "decode") & (cells.backend == "torch")]
    (line,) = [line for line in ax.get_lines() if line.get_label() == "mamba / torch"]
    np.testing.assert_allclose(line.get_ydata(), want.sort_values("seq_len").bw_util)
    assert "measured ceiling 40 GB/s" in fig._suptitle.get_text()


def test_cells_that_fit_in_the_last_level_cache_are_ringed_on_the_bandwidth_figure(tmp_path):
    cells = synthetic_cells()
    mamba_decode = (cells.model == "mamba") & (cells.phase == "decode")
    cells["cache_resident"] = mamba_decode & (cells.seq_len == cells.seq_len.min())
    path = tmp_path / "cells.csv"  # through a CSV file: the column comes back as objects
    cells.to_csv(path, index=False)
    fig = figures.draw("bandwidth_utilization", pd.read_csv(path), phase="decode")
    rings = [c for ax in fig.axes for c in ax.collections if c.get_label() == CACHE_RESIDENT_LABEL]
    resident = cells[cells.cache_resident & cells.status.eq("ok")]
    assert sum(len(c.get_offsets()) for c in rings) == len(resident) > 0
    # a table of a run from before the column (the shipped ones) still draws
    fig = figures.draw("bandwidth_utilization", synthetic_cells(), phase="decode")
    assert not any(c.get_label() == CACHE_RESIDENT_LABEL for ax in fig.axes for c in ax.collections)


def test_energy_without_any_value_quotes_the_reason():
    fig = figures.draw("energy_per_token", synthetic_cells(energy=False))
    assert len(fig.axes) == 1
    assert f"energy not measured here: {NO_ENERGY}" in texts(fig).replace("\n", " ")


def test_roofline_draws_measured_roofs_ridge_and_one_marker_per_ok_cell():
    cells = synthetic_cells()
    fig = figures.draw("roofline", cells)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    roof = next(line for line in ax.get_lines() if line.get_label() == "measured roof")
    x, y = roof.get_xdata(), roof.get_ydata()
    np.testing.assert_allclose(y, np.minimum(CEILING_TFLOPS, CEILING_BW_GBPS * x / 1e3))
    ridge = next(line for line in ax.get_lines() if line.get_label() == "ridge point")
    np.testing.assert_allclose(ridge.get_xdata(), [CEILING_TFLOPS * 1e3 / CEILING_BW_GBPS])
    points = [c for c in ax.collections if c.get_label().startswith("_")]
    assert sum(len(c.get_offsets()) for c in points) == (cells.status == "ok").sum()
    legend = {t.get_text() for t in fig.legends[0].get_texts()}
    assert set(FAMILIES) | {"prefill (phase)", "decode (phase)", "train (phase)"} <= legend
    assert "compute roof 2 TFLOP/s" in texts(fig) and "memory roof 40 GB/s" in texts(fig)
    assert "Test CPU" in fig._suptitle.get_text() and "fp32" in fig._suptitle.get_text()


def test_memory_footprint_stacks_parts_per_family_and_marks_oom():
    fig = figures.draw("memory_footprint", synthetic_cells(), backends=["naive"])
    assert [ax.get_title() for ax in fig.axes] == list(FAMILIES)
    attention = fig.axes[0]
    assert len(attention.patches) == 3 * len(LENGTHS)  # weights, cache, activations per T
    assert [t.get_text() for t in attention.get_xticklabels()] == ["64", "128", "256", "512"]
    assert marker_labels(attention) >= {"attention: oom", "measured peak"}
    assert "oom" in [t.get_text() for t in attention.texts]
    assert len(fig.axes[1].texts) == 0  # mamba ran everywhere: no status labels
    assert attention.get_ylabel() == "memory (MiB)"
    np.testing.assert_allclose(attention.patches[0].get_height(), 2e6 / 2**20)
    title = fig._suptitle.get_text()
    assert "prefill, backend naive" in title and "Test CPU" in title and "fp32" in title
    assert "torch" in figures.draw("memory_footprint", synthetic_cells())._suptitle.get_text()


def test_op_breakdown_stacks_bucket_shares_in_fixed_order():
    ops = synthetic_ops()
    fig = figures.draw("op_breakdown", ops)
    assert len(fig.axes) == 4
    ax = fig.axes[0]
    assert ax.get_title() == "attention / naive\n(CPU self time)"
    colors = [matplotlib.colors.to_hex(p.get_facecolor()) for p in ax.patches[:: len(LENGTHS)]]
    assert colors == list(style.BUCKET_COLORS.values())
    first_bar = [p.get_height() for p in ax.patches[:: len(LENGTHS)]]
    assert sum(first_bar) == pytest.approx(1.0)
    mamba = fig.axes[2]
    assert [c.get_label() for c in mamba.containers] == [
        b for b in style.BUCKET_COLORS if b != "attention"
    ]
    assert "CPU self time" in fig._suptitle.get_text() and "Test CPU" in fig._suptitle.get_text()


def test_op_breakdown_leaves_out_cells_that_could_not_be_profiled():
    ops = synthetic_ops().assign(status="ok", reason="")
    unprofiled = dict(ops.iloc[0]) | {"backend": "fused", "bucket": None, "time_ms": None}
    unprofiled |= {"share": None, "status": "unavailable", "reason": "needs a CUDA device"}
    fig = figures.draw("op_breakdown", pd.concat([ops, pd.DataFrame([unprofiled])]))
    assert len(fig.axes) == 4  # the four profiled (model, backend) pairs, no fused panel
    assert not any("fused" in ax.get_title() for ax in fig.axes)


def test_efficiency_sweep_has_four_panels_with_derived_quantities():
    cells = synthetic_cells()
    fig = figures.draw("efficiency_sweep", cells, backends=["torch", "naive"])
    latency, memory, throughput, decode = fig.axes
    assert latency.get_title().startswith("(a) train step latency")
    assert {"attention: oom", "mamba: timeout"} <= marker_labels(latency)
    assert "attention: oom" in marker_labels(memory) and memory.get_ylabel().endswith("(MiB)")
    prefill = cells[
        (cells.model == "mamba") & (cells.backend == "torch") & (cells.phase == "prefill")
    ]
    prefill = prefill.sort_values("seq_len")
    (line,) = [line for line in throughput.get_lines() if line.get_label() == "mamba / torch"]
    np.testing.assert_allclose(line.get_ydata(), prefill.tokens / (prefill.time_ms_median / 1e3))
    assert decode.get_xlabel() == "context length T (tokens)"
    assert "Test CPU" in fig._suptitle.get_text() and "fp32" in fig._suptitle.get_text()


@pytest.mark.parametrize("name", NEW_FIGURES)
def test_new_figures_save_as_pdf_and_png(name, tmp_path):
    table = synthetic_ops() if name == "op_breakdown" else synthetic_cells()
    fig = figures.draw(name, table)
    figures.save(fig, tmp_path / "f.pdf", tmp_path / "f.png")
    assert (tmp_path / "f.pdf").stat().st_size > 1000 and (tmp_path / "f.png").stat().st_size > 1000
    plt.close(fig)


@pytest.mark.parametrize("name", NEW_FIGURES)
def test_empty_selection_draws_a_panel_that_says_so(name):
    table = synthetic_ops() if name == "op_breakdown" else synthetic_cells()
    fig = figures.draw(name, table, models=["nope"])
    assert "no " in texts(fig) and "'nope'" in texts(fig)
    plt.close(fig)


@pytest.mark.parametrize("name", [n for n in NEW_FIGURES if n != "op_breakdown"])
def test_tables_without_the_new_columns_still_draw(name):
    """The shipped tables predate the ceilings, the memory split and energy: what a figure
    cannot show is said in a panel, not raised."""
    cells = synthetic_cells(energy=False)
    dropped = ["ceiling_tflops", "ceiling_bw_gbps", "energy_method", "energy_reason"]
    cells = cells.drop(columns=dropped).assign(compute_util=np.nan, bw_util=np.nan)
    cells = cells.assign(weights_bytes=np.nan, cache_bytes=np.nan, activations_bytes=np.nan)
    fig = figures.draw(name, cells)
    words = texts(fig).replace("\n", " ")
    expected = {
        "bandwidth_utilization": "no measured ceiling (ceiling_bw_gbps)",
        "compute_utilization": "no measured ceiling (ceiling_tflops)",
        "roofline": "measured ceilings missing",
        "floors": "measured ceilings missing",
        "memory_footprint": "measured peak",
        "energy_per_token": "energy not measured here",
        "efficiency_sweep": "(d) decode cost",
    }[name]
    assert expected in words
    plt.close(fig)


def test_every_figure_has_a_parameterized_notebook():
    for name in figures.FIGURES:
        notebook = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
        tagged = [c for c in notebook["cells"] if "parameters" in c["metadata"].get("tags", [])]
        assert len(tagged) == 1, name
        source = "".join(tagged[0]["source"])
        path = f"{FigureSpec(name).notebook_kind}_path"  # the table, as its notebook is told
        for param in (path, "out_pdf", "out_png", "models", "backends"):
            assert f"{param} = " in source, (name, param)
        code = "".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
        assert re.search(rf'figures\.draw\(\s*"{name}"', code), name
        assert "plots" not in code, name


def test_new_notebook_runs_under_papermill(tmp_path):
    """A cells table with exactly the columns the schema has (what the extended table
    lacks is filled empty), through the efficiency_sweep notebook."""

    cells = synthetic_cells()
    columns = {}
    for col, spec in tables.CELLS_SCHEMA.columns.items():
        if col in cells:
            columns[col] = cells[col]
        elif str(spec.dtype).startswith("int"):
            columns[col] = 1
        elif str(spec.dtype) in ("str", "string", "object"):
            columns[col] = ""
        else:
            columns[col] = np.nan
    pd.DataFrame(columns).to_csv(tmp_path / "cells.csv", index=False)
    draw_notebook("efficiency_sweep", tmp_path / "cells.csv", tmp_path)


def graph_cells() -> pd.DataFrame:
    """Decode cells of torch and torch-graph (ok, graph faster by 2x to 4x), and fused-graph
    cells that did not run."""
    cells = synthetic_cells()
    decode = cells[(cells.phase == "decode") & (cells.backend == "torch")]
    graph = decode.assign(
        backend="torch-graph",
        time_ms_median=decode.time_ms_median / (2 + np.arange(len(decode)) % 3),
    )
    graph = graph.assign(time_ms_p95=graph.time_ms_median * 1.05)
    fused = decode.assign(
        backend="fused-graph", status="unavailable", reason="CUDA graphs need a CUDA device"
    )
    fused = fused.assign(time_ms_median=np.nan, time_ms_p95=np.nan)
    return pd.concat([cells, graph, fused], ignore_index=True)


def test_decode_graph_speedup_draws_ratios_target_and_unavailable_graphs(tmp_path):
    fig = figures.draw("decode_graph_speedup", analysis.speedups_table(graph_cells()))
    torch_ax, fused_ax = fig.axes[:2]
    assert {line.get_label() for line in torch_ax.get_lines()} >= {*FAMILIES, "3x target"}
    # no fused twin ran: that panel says so and marks the graph cells as unavailable
    assert "no ok fused-graph decode cells" in texts(fig)
    assert {f"{m}: unavailable" for m in FAMILIES} <= marker_labels(fused_ax)
    figures.save(fig, tmp_path / "g.pdf")
    plt.close(fig)


def test_claims_figure_lists_every_claim_with_its_verdict(tmp_path):
    cells = synthetic_cells().assign(device="cuda", device_name="NVIDIA A100-SXM4-80GB")
    table = ledger.evaluate(cells, "t")
    fig = figures.draw("claims", table)
    (grid,) = fig.axes[0].tables
    words = "\n".join(cell.get_text().get_text() for cell in grid.get_celld().values())
    for claim in ledger.load():
        if not ledger.is_task_claim(claim):  # a run without tasks has no rows for those
            assert claim["claim"].split()[0] in words
    assert "not comparable" in words  # the synthetic run has no fused cells
    figures.save(fig, tmp_path / "c.png")
    plt.close(fig)


# ---------------------------------------------------------------------------------------
# Every figure, from an empty table of its kind and from the shipped precollected run.

PRECOLLECTED = REPO / "results/precollected/cpu/tables"
# the task figures' tables are a run with tasks' (the shipped tasks-cpu run)
PRECOLLECTED_TASKS = PRECOLLECTED.parent.parent / "tasks-cpu" / "tables"
# The columns of each kind of table a figure reads (ssmbench.registry.FIGURES).
TABLE_COLUMNS = {
    "cells": list(tables.CELLS_SCHEMA.columns),
    "ops": tables.OPS_COLUMNS,
    "claims": ledger.COLUMNS,
    "go_no_go": analysis.GO_NO_GO_COLUMNS,
    "speedups": analysis.SPEEDUP_COLUMNS,
    "task_accuracy": task_table.FIGURE_COLUMNS,
    "quality_vs_speed": task_table.FIGURE_COLUMNS + task_table.SPEED_COLUMNS,
    "compare": compare.COLUMNS,
}


def read_precollected(kind: str) -> pd.DataFrame:
    """A table of the shipped CPU run (the task figures': the shipped tasks-cpu run's),
    read as the figure's notebook reads it."""
    path = (PRECOLLECTED_TASKS if kind in registry.TASK_TABLES else PRECOLLECTED) / f"{kind}.csv"
    if kind == "compare":  # the shipped run alone: nothing meets (tests/figures/test_compare.py)
        return compare.compare_table([compare.read_run("cpu", PRECOLLECTED)])
    if kind == "cells":
        return tables.read_cells(path)
    if kind in ("go_no_go", "speedups"):
        return analysis.read_table(path, TABLE_COLUMNS[kind])
    return pd.read_csv(path)


def missing_message(ax) -> str:
    """The message of a panel that says what is missing (text centred on the axes), or ""."""
    centred = [
        t.get_text()
        for t in ax.texts
        if t.get_transform() == ax.transAxes and t.get_position() == (0.5, 0.5)
    ]
    return "\n".join(centred)


def missing_panels(fig) -> list[str]:
    return [m for m in map(missing_message, fig.axes) if m]


def drawn(ax) -> bool:
    """Whether ``ax`` shows data: a line with points, a bar or patch, markers, a table."""
    lines = any(len(line.get_xdata()) for line in ax.get_lines())
    return lines or bool(ax.patches) or bool(ax.collections) or bool(ax.tables)


@pytest.mark.parametrize("name", list(figures.FIGURES))
def test_every_figure_draws_a_labelled_panel_from_an_empty_table(name):
    kind = FigureSpec(name).table
    fig = figures.draw(name, pd.DataFrame(columns=TABLE_COLUMNS[kind]))
    messages = missing_panels(fig)
    assert messages and all(m.startswith("no ") for m in messages), (name, messages)
    assert not any(drawn(ax) for ax in fig.axes), name
    assert fig._suptitle is not None and fig._suptitle.get_text(), name
    plt.close(fig)


@pytest.mark.parametrize("name", list(figures.FIGURES))
def test_every_figure_draws_from_the_precollected_tables(name):
    table = read_precollected(FigureSpec(name).table)
    fig = figures.draw(name, table)
    for ax in fig.axes:
        assert drawn(ax) or missing_message(ax), (name, ax.get_title())
    plt.close(fig)


# ---------------------------------------------------------------------------------------
# The floors figure (ssmbench.figures.floors)

# a device record with a dispatch cost of 2 us per eager op (tests/test_floors.py has the
# arithmetic of every floor)
FLOOR_DEVICE = {"dispatch": {"eager_us": 2.0, "eager_spread_us": [2.0, 2.0], "graph_us": None}}


def floor_cells() -> pd.DataFrame:
    """The synthetic cells with 100 ops each and their floors; the mamba torch prefill
    cell at T = 256 measured at a hundredth of its bandwidth floor (flagged)."""
    from ssmbench.floors import with_floors

    cells = synthetic_cells().assign(n_ops=100.0, n_ops_kind="aten_ops")
    fast = ((cells.model == "mamba") & (cells.backend == "torch") & (cells.phase == "prefill")) & (
        cells.seq_len == 256
    )
    cells.loc[fast, "time_ms_median"] = 1e4 * 256 / (CEILING_BW_GBPS * 1e9) * 1e3 / 100
    cells.loc[fast, "time_ms_p95"] = cells.loc[fast, "time_ms_median"]
    return with_floors(cells, FLOOR_DEVICE)


def test_the_floors_figure_draws_each_floor_and_rings_a_cell_below_one():
    from ssmbench.figures.floors import DISPATCH_BAR_LABEL, FLAGGED_LABEL

    cells = floor_cells()
    fig = figures.draw("floors", cells)
    panel = next(ax for ax in fig.axes if ax.get_title() == "mamba, prefill")
    dispatch = [
        line
        for line in panel.get_lines()
        if line.get_color() == style.FLOOR_STYLES["dispatch"]["color"]
    ]
    assert len(dispatch) == 2  # one per backend: 100 ops x 2 us = 0.2 ms at every T
    np.testing.assert_allclose(dispatch[0].get_ydata(), 2e-4)
    bandwidth = [
        line
        for line in panel.get_lines()
        if line.get_color() == style.FLOOR_STYLES["bandwidth"]["color"]
    ]
    np.testing.assert_allclose(
        bandwidth[0].get_ydata(), [1e4 * t / 40e9 for t in LENGTHS]
    )  # bytes / 40 GB/s
    ringed = [c for c in panel.collections if c.get_label() == FLAGGED_LABEL]
    assert len(ringed) == 1 and len(ringed[0].get_offsets()) == 1
    assert ringed[0].get_offsets()[0][0] == 256
    roofline = fig.axes[-1]
    assert any(c.get_label() == DISPATCH_BAR_LABEL for c in roofline.collections)
    assert "dispatch floor missing" not in texts(fig)
    plt.close(fig)


@pytest.mark.parametrize(
    "run, floors_drawn, device",
    [("cpu", 3, "Intel(R) Xeon(R) Processor"), ("tasks-cpu", 2, "AMD EPYC")],
)
def test_the_floors_figure_from_the_shipped_run_without_torch(tmp_path, run, floors_drawn, device):
    """The artifact path: a shipped run's cells.csv in a process where torch cannot be
    imported.  The cpu run carries its operator counts and dispatch cost: all three floors
    are drawn.  The task run is from before them (no floor columns, no counts): the
    bandwidth and compute floors are drawn and the title says the dispatch floor is
    missing."""
    import subprocess
    import sys

    out_png = tmp_path / "floors.png"
    table = REPO / "results" / "precollected" / run / "tables" / "cells.csv"
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from ssmbench import figures, tables\n"
        "from ssmbench.figures.style import FLOOR_STYLES\n"
        f"cells = tables.read_cells({str(table)!r})\n"
        "fig = figures.draw('floors', cells)\n"
        f"figures.save(fig, {str(out_png)!r})\n"
        "ax = [a for a in fig.axes if a.get_title() == 'mamba2, decode'][0]\n"
        "colors = [l.get_color() for l in ax.get_lines()]\n"
        "print(sum(c == FLOOR_STYLES[f]['color'] for c in colors for f in FLOOR_STYLES))\n"
        "print(fig._suptitle.get_text().replace(chr(10), ' '))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    drawn, title = out.stdout.strip().splitlines()
    assert drawn == str(floors_drawn)
    assert ("dispatch floor missing" in title) == (floors_drawn == 2), title
    assert device in title
    assert out_png.stat().st_size > 10000
