"""The quality axis's two figures, drawn from synthetic task tables: a panel per scored
split, every seed shown, the study's value and chance marked, seeds that did not run kept as
labelled markers, and the budget cut said; and their notebooks under papermill."""

from __future__ import annotations

import os
import subprocess
import sys

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from ssmbench import figures
from ssmbench.figures.tasks import STUDY_LABEL
from ssmbench.paths import REPO
from ssmbench.registry import FAMILIES
from tests.conftest import NOTEBOOKS

SPLITS = [
    ("parity", "test"),
    ("selective_copy", "test"),
    ("exact_copy", "L32"),
    ("exact_copy", "L64"),
    ("exact_copy", "L128"),
    ("imdb", "test"),
]
CHANCE = {"parity": 0.5, "selective_copy": 1 / 17, "exact_copy": 1 / 26, "imdb": 0.5}
# the study's value where this synthetic study has one: parity and exact_copy L64 only
STUDY = {
    ("parity", "test"): {"attention": 0.61, "mamba": 0.97},
    ("exact_copy", "L64"): {"s4d": 0.3},
}
CUT = "2 epochs of the study's 50; 512 of its 10,000 training sequences"
DEVICE = "cpu (x86_64, 2 cores)"
IMDB_REASON = "IMDb not on disk: put aclImdb/ under data/imdb (https://ai.stanford.edu/)"
# (task, eval, family, seed) -> (status, reason): the seeds that did not run
NOT_OK = {
    ("parity", "test", "hybrid", 2): ("failed", "loss went NaN at step 40"),
    ("selective_copy", "test", "deltanet", 0): ("timeout", "ran past 600 s"),
    ("selective_copy", "test", "deltanet", 1): ("timeout", "ran past 600 s"),
    ("selective_copy", "test", "deltanet", 2): ("timeout", "ran past 600 s"),
    ("exact_copy", "L32", "mamba3", 1): ("diverged", "a status the figure has no marker for"),
}
NO_SPEED = ("mamba3",)  # families whose block cell did not run


def task_table(cut: str = CUT, seeds=(0, 1, 2)) -> pd.DataFrame:
    """quality_vs_speed.csv's columns (task_accuracy.csv's and the speed ones): every
    family x split x seed, IMDb all unavailable, the NOT_OK seeds not run."""
    rng = np.random.default_rng(18)
    rows = []
    for task, ev in SPLITS:
        for family in FAMILIES:
            for seed in seeds:
                status, reason = NOT_OK.get((task, ev, family, seed), ("ok", ""))
                if task == "imdb":
                    status, reason = "unavailable", IMDB_REASON
                k = FAMILIES.index(family)
                fast = family not in NO_SPEED
                rows.append(
                    dict(
                        task=task,
                        eval=ev,
                        metric="accuracy" if task == "imdb" else "token_accuracy",
                        family=family,
                        seed=seed,
                        status=status,
                        reason=reason,
                        value=float(rng.uniform(0.3, 1.0)) if status == "ok" else np.nan,
                        study=STUDY.get((task, ev), {}).get(family, np.nan),
                        chance=CHANCE[task],
                        cut=cut,
                        device=DEVICE,
                        prefill_ms=2.0 * (k + 1) if fast else np.nan,
                        decode_ms=0.1 * (k + 1) if fast else np.nan,
                        speed_T=256,
                        speed_batch=1,
                        speed_backend="torch" if fast else "",
                    )
                )
    return pd.DataFrame(rows)


def accuracy_table(**kw) -> pd.DataFrame:
    """task_accuracy.csv: the task table without the speed columns."""
    speed = ["prefill_ms", "decode_ms", "speed_T", "speed_batch", "speed_backend"]
    return task_table(**kw).drop(columns=speed)


def by_title(fig) -> dict:
    return {ax.get_title(): ax for ax in fig.axes}


def missing_message(ax) -> str:
    """The text a panel that says what is missing centres on its axes, or ""."""
    return "\n".join(
        t.get_text().replace("\n", " ")
        for t in ax.texts
        if t.get_transform() == ax.transAxes and t.get_position() == (0.5, 0.5)
    )


def labelled(ax, label: str) -> list:
    """The marker sets (scatter collections) of ``ax`` labelled ``label``."""
    return [c for c in ax.collections if c.get_label() == label]


def words(fig) -> str:
    """Every text of ``fig`` (title, footnote, panels), newlines as spaces."""
    found = [fig._suptitle.get_text()] + [t.get_text() for t in fig.texts]
    found += [t.get_text() for ax in fig.axes for t in ax.texts]
    return " ".join(found).replace("\n", " ")


def expected(task: str, ev: str, family: str) -> np.ndarray:
    table = accuracy_table()
    rows = table[(table.task == task) & (table["eval"] == ev) & (table.family == family)]
    return rows[rows.status == "ok"].value.to_numpy()


# ---------------------------------------------------------------------------------------
# task_accuracy


def test_a_panel_per_split_in_the_study_order():
    fig = figures.draw("task_accuracy", accuracy_table().sample(frac=1.0, random_state=0))
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [
        "parity",
        "selective_copy",
        "exact_copy, L32",
        "exact_copy, L64",
        "exact_copy, L128",
        "imdb",
    ]
    parity = fig.axes[0]
    assert [t.get_text() for t in parity.get_xticklabels()] == list(FAMILIES)
    assert parity.get_ylim()[0] < 0 and parity.get_ylim()[1] > 1  # [0, 1] with a margin
    plt.close(fig)


def test_every_seed_is_a_point_with_the_mean_and_spread_of_its_family():
    fig = figures.draw("task_accuracy", accuracy_table())
    ax = by_title(fig)["exact_copy, L64"]
    for slot, family in enumerate(FAMILIES):
        values = expected("exact_copy", "L64", family)
        (points,) = labelled(ax, family)
        xy = points.get_offsets()
        assert len(xy) == 3  # one per seed
        assert sorted(xy[:, 1]) == pytest.approx(sorted(values))
        assert len(set(np.round(xy[:, 0], 6))) == 3  # seeds side by side, not stacked
        assert np.all(np.abs(xy[:, 0] - slot) < 0.5)  # within the family's slot
        ys = [tuple(line.get_ydata()) for line in ax.get_lines()]
        assert (values.mean(), values.mean()) in ys  # the mean bar
        assert (values.min(), values.max()) in ys  # the spread
    # the offsets are a seed's, not random: drawn again, the points are where they were
    again = by_title(figures.draw("task_accuracy", accuracy_table()))["exact_copy, L64"]
    first = [c.get_offsets().tolist() for c in ax.collections]
    assert first == [c.get_offsets().tolist() for c in again.collections]
    plt.close("all")


def test_the_study_value_is_marked_where_the_study_has_one():
    fig = figures.draw("task_accuracy", accuracy_table())
    panels = by_title(fig)
    for title, split in (
        ("parity", ("parity", "test")),
        ("exact_copy, L64", ("exact_copy", "L64")),
    ):
        marks = labelled(panels[title], STUDY_LABEL)
        at = sorted(tuple(c.get_offsets()[0]) for c in marks)
        want = sorted((FAMILIES.index(f), v) for f, v in STUDY[split].items())
        assert np.allclose(at, want), title
    assert not labelled(panels["selective_copy"], STUDY_LABEL)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert STUDY_LABEL in legend and "chance" in legend and "mean over seeds" in legend
    plt.close(fig)


def test_chance_is_a_dashed_line_at_the_tasks_level():
    fig = figures.draw("task_accuracy", accuracy_table())
    for title, level in (("parity", 0.5), ("selective_copy", 1 / 17), ("exact_copy, L128", 1 / 26)):
        (chance,) = [
            line for line in by_title(fig)[title].get_lines() if line.get_label() == "chance"
        ]
        assert chance.get_linestyle() == "--"
        assert chance.get_ydata()[0] == pytest.approx(level)
    plt.close(fig)


def test_seeds_that_did_not_run_are_labelled_markers_at_the_foot():
    fig = figures.draw("task_accuracy", accuracy_table())
    panels = by_title(fig)
    (failed,) = labelled(panels["parity"], "hybrid: failed")
    assert failed.get_offsets()[:, 1].tolist() == [0.0]
    assert len(labelled(panels["parity"], "hybrid")[0].get_offsets()) == 2  # the two that ran
    # a family none of whose seeds ran keeps its three markers and draws no point
    (timeouts,) = labelled(panels["selective_copy"], "deltanet: timeout")
    assert len(timeouts.get_offsets()) == 3
    assert not labelled(panels["selective_copy"], "deltanet")
    # a status without a marker of its own is still drawn, and named
    assert len(labelled(panels["exact_copy, L32"], "mamba3: diverged")) == 1
    plt.close(fig)


def test_a_split_whose_rows_are_all_unavailable_says_why():
    fig = figures.draw("task_accuracy", accuracy_table())
    message = missing_message(by_title(fig)["imdb"])
    assert message.startswith("imdb: unavailable:") and "IMDb not on disk" in message
    assert not by_title(fig)["imdb"].collections  # no points in it
    assert not any(missing_message(ax) for ax in fig.axes if ax.get_title() != "imdb")
    plt.close(fig)


def test_a_missing_task_or_family_is_said_not_drawn():
    table = accuracy_table()
    fig = figures.draw("task_accuracy", table, families=["rwkv"])
    assert len(fig.axes) == 1
    assert missing_message(fig.axes[0]) == "no task rows in the table with family=['rwkv']"
    fig = figures.draw("task_accuracy", table, tasks=["parity", "listops"])
    assert [ax.get_title() for ax in fig.axes] == ["parity", "listops"]
    assert missing_message(fig.axes[1]) == "no rows of task 'listops' in the table"
    fig = figures.draw("task_accuracy", table, families=["mamba", "rwkv"])
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["mamba"]
    assert "no rows of family 'rwkv'" in words(fig)
    # a family trained on some tasks only leaves its slot in the others saying so
    fig = figures.draw("task_accuracy", table[(table.family != "s4d") | (table.task == "parity")])
    assert "no row" in [t.get_text() for t in by_title(fig)["selective_copy"].texts]
    assert "no row" not in [t.get_text() for t in by_title(fig)["parity"].texts]
    plt.close("all")


def test_the_title_names_the_device_and_the_footnote_the_cut():
    fig = figures.draw("task_accuracy", accuracy_table())
    title = fig._suptitle.get_text()
    assert DEVICE in title and "seeds 0, 1, 2" in title and "budget cut" in title
    assert f"budget cut: {CUT}" in words(fig)
    fig = figures.draw("task_accuracy", accuracy_table(cut=""))
    assert "the case study's budget" in fig._suptitle.get_text()
    assert "budget: as the case study's" in words(fig) and "budget cut" not in words(fig)
    plt.close("all")


@pytest.mark.parametrize("name", ["task_accuracy", "quality_vs_speed"])
def test_a_table_without_task_rows_is_a_panel_saying_so(name):
    cells_like = pd.DataFrame({"model": ["mamba"], "phase": ["prefill"], "device": [DEVICE]})
    for table in (pd.DataFrame(), pd.DataFrame(columns=task_table().columns), cells_like):
        fig = figures.draw(name, table)
        assert [missing_message(ax) for ax in fig.axes] == ["no task rows in the table"]
        plt.close(fig)


# ---------------------------------------------------------------------------------------
# quality_vs_speed


def points(ax) -> dict:
    """family -> (x, y, (low, high)) of each error-barred point of ``ax``."""
    found = {}
    for bars in ax.containers:
        line, _, (spread,) = bars.lines
        (x,), (y,) = line.get_xdata(), line.get_ydata()
        (segment,) = spread.get_segments()
        found[bars.get_label()] = (x, y, (segment[0][1], segment[1][1]))
    return found


def test_quality_vs_speed_a_prefill_and_a_decode_row_per_split():
    fig = figures.draw("quality_vs_speed", task_table())
    assert len(fig.axes) == 2 * len(SPLITS)
    assert fig.axes[0].get_title() == "parity vs prefill"
    assert fig.axes[len(SPLITS)].get_title() == "parity vs decode"
    parity, parity_decode = fig.axes[0], fig.axes[len(SPLITS)]
    assert parity.get_xscale() == "log" and parity_decode.get_xscale() == "log"
    found, decode = points(parity), points(parity_decode)
    assert set(found) == set(FAMILIES) - set(NO_SPEED)  # hybrid: two of its seeds ran
    for family, (x, y, (low, high)) in found.items():
        values = expected("parity", "test", family)
        k = FAMILIES.index(family)
        assert x == pytest.approx(2.0 * (k + 1)) and decode[family][0] == pytest.approx(
            0.1 * (k + 1)
        )
        assert (y, low, high) == pytest.approx((values.mean(), values.min(), values.max()))
    texts = [t.get_text() for t in parity.texts]
    assert "no speed cell: mamba3" in texts and "mamba" in texts  # listed; points labelled
    plt.close(fig)


def test_quality_vs_speed_keeps_seeds_that_did_not_run_and_says_what_is_missing():
    fig = figures.draw("quality_vs_speed", task_table())
    panels = by_title(fig)
    # deltanet has a speed cell but no seed of selective_copy ran: a marker at the foot
    assert "deltanet" not in points(panels["selective_copy vs prefill"])
    (timeouts,) = labelled(panels["selective_copy vs prefill"], "deltanet: timeout")
    assert timeouts.get_offsets()[:, 1].tolist() == [0.0]
    assert labelled(panels["parity vs decode"], "hybrid: failed")
    assert missing_message(panels["imdb vs prefill"]).startswith("imdb: unavailable:")
    title = fig._suptitle.get_text()
    for said in (DEVICE, "T 256", "batch 1", "backend torch", "budget cut"):
        assert said in title, said
    assert f"budget cut: {CUT}" in words(fig)
    plt.close(fig)


def test_quality_vs_speed_with_no_speed_cell_and_filters():
    table = task_table()
    table[["prefill_ms", "decode_ms"]] = np.nan
    fig = figures.draw("quality_vs_speed", table, tasks=["parity"])
    assert len(fig.axes) == 2
    message = missing_message(fig.axes[0])
    assert message.startswith("no family of parity has a prefill_ms speed cell")
    assert "attention" in message and "hybrid" in message
    fig = figures.draw("quality_vs_speed", task_table(), tasks="exact_copy", evals=["L64", "L256"])
    assert [ax.get_title() for ax in fig.axes] == [
        "exact_copy, L64 vs prefill",
        "exact_copy, L64 vs decode",
    ]
    assert "no rows of eval 'L256'" in words(fig)
    fig = figures.draw("quality_vs_speed", task_table(), evals=["L256"])
    assert missing_message(fig.axes[0]) == "no task rows in the table with eval=['L256']"
    plt.close("all")


# ---------------------------------------------------------------------------------------
# The notebooks, and what the module imports


def draw_task_notebook(name: str, table: pd.DataFrame, out_dir) -> None:
    """Execute ``notebooks/<name>.ipynb`` on ``table`` with the parameters rule figure gives
    (the table's path, the outputs, and every figure's filters)."""
    import papermill

    table.to_csv(out_dir / "table.csv", index=False)
    papermill.execute_notebook(
        str(NOTEBOOKS / f"{name}.ipynb"),
        str(out_dir / "executed.ipynb"),
        parameters=dict(
            tasks_path=str(out_dir / "table.csv"),
            phase=None,
            models=None,
            backends=None,
            out_pdf=str(out_dir / "fig.pdf"),
            out_png=str(out_dir / "fig.png"),
        ),
        kernel_name="python3",
        cwd=str(NOTEBOOKS),
        progress_bar=False,
    )


@pytest.mark.parametrize(
    "name, table",
    [("task_accuracy", accuracy_table), ("quality_vs_speed", task_table)],
    ids=["task_accuracy", "quality_vs_speed"],
)
def test_the_notebook_draws_its_table_under_papermill(name, table, tmp_path):
    draw_task_notebook(name, table(), tmp_path)
    assert (tmp_path / "fig.pdf").read_bytes().startswith(b"%PDF")
    assert (tmp_path / "fig.png").stat().st_size > 10_000
    source = (NOTEBOOKS / f"{name}.ipynb").read_text()
    assert f"../results/precollected/tasks-cpu/tables/{name}.csv" in source


def test_importing_the_task_figures_does_not_import_torch():
    code = (
        "import sys, ssmbench.figures.tasks\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ["task_accuracy", "quality_vs_speed"])
def test_the_same_table_gives_the_same_pdf(name, tmp_path):
    for pdf in ("a.pdf", "b.pdf"):
        fig = figures.draw(name, task_table())
        figures.save(fig, tmp_path / pdf)
        plt.close(fig)
    assert (tmp_path / "a.pdf").read_bytes() == (tmp_path / "b.pdf").read_bytes()


def test_a_cut_per_task_is_said_per_task_and_close_latencies_keep_tick_labels():
    table = task_table()
    table["cut"] = table.task.map({"parity": "epochs 20 -> 1"}).fillna("epochs 6 -> 2")
    table["decode_ms"] = 0.47 + 0.005 * table.family.map(FAMILIES.index)  # within 7%
    fig = figures.draw("quality_vs_speed", table)
    assert "budget cut: parity: epochs 20 -> 1; selective_copy: epochs 6 -> 2;" in words(fig)
    decode = by_title(fig)["parity vs decode"]
    fig.canvas.draw()
    labels = [t.get_text() for t in decode.get_xticklabels() if t.get_text()]
    assert labels and all("10^" not in label for label in labels), labels
    plt.close(fig)
