"""No silent failures: a run says which cells failed and exits non-zero when all did; a
profile is capped like a cell; a record that cannot be saved stops the run."""

from __future__ import annotations

import errno
import io
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from ssmbench import cell as cell_mod
from ssmbench import outcome, paths, records
from ssmbench.lm.matrix import LMCell, LMMatrix
from ssmbench.lm.record import LMRecord, write_lm_record
from ssmbench.matrix import Cell, Size, Timing
from ssmbench.records import CellRecord
from tests.conftest import bare_plan, snakemake

SIZE = dict(d_model=32, n_layers=2, n_heads=2, head_dim=16, expand=2, d_conv=4, chunk=16)
CELLS = [
    Cell("mamba2", "torch", "prefill", 1, 32, 4, "fp32"),
    Cell("attention", "torch", "decode", 1, 64, 0, "fp32"),
    Cell("s4d", "naive", "train", 2, 32, 4, "fp32"),
]


def plan_of(cells, run="r", lm_cells=()):
    return bare_plan(run, cells, lm=LMMatrix(size="ci", cells=tuple(lm_cells)))


def save(c: Cell, status: str, reason: str = "", run: str = "r") -> None:
    timing = dict(samples_ms=[1.0], n_samples=1, time_ms_median=1.0, time_ms_p95=1.0)
    record = CellRecord(
        run=run, **vars(c), device="cpu", size=SIZE, status=status, reason=reason,
        **(timing if status == "ok" else {}),
    )  # fmt: skip
    records.write_record(paths.cell_record(run, c), record)


def test_the_end_of_a_run_names_every_failed_cell(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    save(CELLS[0], "ok")
    save(CELLS[1], "failed", "RuntimeError: shapes do not match\nTraceback (most recent ...")
    save(CELLS[2], "timeout", "the cell's budget of timeout_s=1 s ran out")
    outcome.at_end(plan_of(CELLS), succeeded=True)
    err = capsys.readouterr().err
    assert "ssm-bench: r: 3 cells: failed 1, ok 1, timeout 1" in err
    assert "ssm-bench: 2 of 3 measured cells failed:" in err
    assert "  attention/torch/decode b1 t64: failed: RuntimeError: shapes do not match\n" in err
    assert "  s4d/naive/train b2 t32: timeout: the cell's budget of timeout_s=1 s ran out" in err
    assert "Traceback" not in err  # the reason's first line only


def test_a_whole_model_run_names_its_failed_cells_and_exits_non_zero_when_all_did(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    cells = [
        LMCell("mamba-130m", "hf-eager", "prefill", 1, 16, 1, "fp32"),
        LMCell("qwen2.5-0.5b", "hf-eager", "decode", 1, 16, 4, "fp32"),
        LMCell("hymba-1.5b", "hf-eager", "prefill", 1, 16, 1, "fp32"),
    ]
    for c, status, reason in zip(
        cells,
        ["failed", "oom", "unavailable"],
        [
            "correctness gate failed for mamba-130m",
            "MemoryError: ",
            "remote code imports flash_attn",
        ],
        strict=True,
    ):
        record = LMRecord(
            run="r", **vars(c), device="cpu", preset="ci", status=status, reason=reason
        )
        write_lm_record(paths.lm_cell_record("r", c), record)
    with pytest.raises(SystemExit, match="every measured cell of r failed"):
        outcome.at_end(plan_of([], lm_cells=cells), succeeded=True)
    err = capsys.readouterr().err
    assert "ssm-bench: r: 3 cells: failed 1, oom 1, unavailable 1" in err
    assert "  mamba-130m/hf-eager/prefill b1 t16 g1 fp32: failed: correctness gate failed" in err
    assert "  qwen2.5-0.5b/hf-eager/decode b1 t16 g4 fp32: oom: MemoryError:" in err


def test_a_run_whose_every_measured_cell_failed_exits_non_zero(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    save(CELLS[0], "unavailable", "needs a CUDA device")  # not measured: not a failure
    save(CELLS[1], "oom", "MemoryError: ")
    save(CELLS[2], "failed", "ValueError: bad size")
    with pytest.raises(SystemExit, match="every measured cell of r failed") as stop:
        outcome.at_end(plan_of(CELLS), succeeded=True)
    assert stop.value.code != 0
    assert "2 of 2 measured cells failed" in capsys.readouterr().err


def test_a_run_of_unavailable_cells_only_is_said_but_not_a_failure(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for c in CELLS:
        save(c, "unavailable", "needs a CUDA device")
    outcome.at_end(plan_of(CELLS), succeeded=True)
    assert "3 cells: unavailable 3" in capsys.readouterr().err


def test_an_unreadable_record_counts_as_a_failure_naming_its_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    save(CELLS[0], "ok")
    path = paths.cell_record("r", CELLS[1])
    Path(path).parent.mkdir(parents=True)
    Path(path).write_text('{"status": ')
    outcome.at_end(plan_of(CELLS[:2]), succeeded=False)
    assert f"unreadable: {path}: not valid JSON" in capsys.readouterr().err


def test_a_record_with_nan_counts_as_unreadable_not_ok(tmp_path, monkeypatch, capsys):
    """What the summary counts is what the tables can use: a record its reader refuses
    (here a NaN median, its sidecar aside) is not an ok cell."""
    monkeypatch.chdir(tmp_path)
    save(CELLS[0], "ok")
    save(CELLS[1], "ok")
    path = Path(paths.cell_record("r", CELLS[1]))
    path.write_text(path.read_text().replace('"time_ms_median": 1.0', '"time_ms_median": NaN'))
    outcome.at_end(plan_of(CELLS[:2]), succeeded=False)
    err = capsys.readouterr().err
    assert "2 cells: ok 1, unreadable 1" in err
    assert f"unreadable: {path}: field time_ms_median: nan is not a finite number" in err


# --- a failed job never costs the previous tables ---


def test_tables_a_failed_run_could_not_make_again_are_the_previous_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = plan_of(CELLS)
    tables = Path(paths.table("r", "cells.csv")).parent
    (tables / "figures").mkdir(parents=True)
    old = {
        tables / "cells.csv": "old cells\n",
        tables / "cells.csv.prov.json": "{}",
        tables / "claims.csv": "old claims\n",
        tables / "figures" / "roofline.csv": "old figure table\n",
    }
    for path, text in old.items():
        path.write_text(text)
    outcome.keep_tables(plan)
    # the run: aggregate made claims.csv again, then failed (Snakemake deleted cells.csv
    # and its sidecar); the figure table went with a failed job too
    (tables / "claims.csv").unlink()
    (tables / "claims.csv").write_text("new claims\n")
    for path in (
        tables / "cells.csv",
        tables / "cells.csv.prov.json",
        tables / "figures" / "roofline.csv",
    ):
        path.unlink()
    log = io.StringIO()
    restored = outcome.restore_tables(plan, log)
    assert sorted(restored) == sorted(
        str(p)
        for p in (
            tables / "cells.csv",
            tables / "cells.csv.prov.json",
            tables / "figures" / "roofline.csv",
        )
    )
    assert (tables / "cells.csv").read_text() == "old cells\n"
    assert (tables / "claims.csv").read_text() == "new claims\n"  # a new one stays
    assert "2 tables could not be made again and are the previous run's" in log.getvalue()
    assert not (outcome.KEPT / "r").exists()
    # a run that succeeds drops what it kept
    outcome.keep_tables(plan)
    assert (outcome.KEPT / "r" / "cells.csv").is_file()
    outcome.drop_kept_tables(plan)
    assert not (outcome.KEPT / "r").exists()
    assert outcome.restore_tables(plan) == []


# --- a record that cannot be saved ---


def test_a_record_that_cannot_be_saved_stops_the_run(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(records.json, "dump", disk_full)
    path = paths.cell_record("r", CELLS[0])
    record = CellRecord(run="r", **vars(CELLS[0]), device="cpu", size=SIZE, status="failed",
                        reason="x")  # fmt: skip
    with pytest.raises(outcome.RunStopped, match=rf"cannot save {path}: .*No space left"):
        with outcome.saving("r", path):
            records.write_record(path, record)
    assert list(Path(path).parent.iterdir()) == []  # no half-written file
    assert "No space left on device" in outcome.stopped("r")
    assert "ssm-bench: the run stops: cannot save" in capfd.readouterr().err  # to Snakemake's
    # the next job refuses to measure, naming why; a new run clears the mark
    with pytest.raises(
        outcome.RunStopped, match=r"the run stopped: cannot save .* is not measured"
    ):
        outcome.refuse_if_stopped("r", paths.cell_record("r", CELLS[1]))
    outcome.clear_stop("r")
    assert outcome.stopped("r") == ""
    outcome.refuse_if_stopped("r", paths.cell_record("r", CELLS[1]))


def test_a_nearly_full_disk_refuses_to_measure(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(outcome.shutil, "disk_usage", lambda p: SimpleNamespace(free=4096))
    with pytest.raises(outcome.RunStopped, match="4096 bytes free on the disk of"):
        outcome.refuse_if_stopped("r", paths.cell_record("r", CELLS[0]))
    assert "4096 bytes free" in outcome.stopped("r")


# --- profile jobs are capped ---


def profile_spec(timeout_s: float | None) -> cell_mod.CellSpec:
    timing = Timing(warmup=0, min_samples=1, max_samples=1, min_time_s=0.0, max_time_s=1.0,
                    timeout_s=timeout_s)  # fmt: skip
    return cell_mod.CellSpec("r", CELLS[0], "cpu", Size(**SIZE), timing)


def test_a_profile_past_its_budget_is_a_timeout_row(tmp_path, monkeypatch):
    import ssmbench.measure.timing  # noqa: F401  (importing torch is no part of the budget)
    import ssmbench.models  # noqa: F401

    def slow_profile(*args, **kwargs):
        end = time.monotonic() + 60
        while time.monotonic() < end:  # Python code: the alarm interrupts it
            pass

    monkeypatch.setattr(cell_mod, "profile_cell", slow_profile)
    trace = str(tmp_path / "x.trace.json.gz")
    start = time.monotonic()
    (row,) = cell_mod.profile_or_status(profile_spec(0.2), trace_path=trace)
    assert time.monotonic() - start < 30
    assert row["status"] == "timeout" and "timeout_s=0.2" in row["reason"]
    import gzip

    assert json.loads(gzip.open(trace).read()) == {"traceEvents": []}


def test_a_profile_out_of_memory_is_an_oom_row(monkeypatch):
    def greedy(*args, **kwargs):
        raise MemoryError("cannot allocate 64 GiB")

    monkeypatch.setattr(cell_mod, "profile_cell", greedy)
    (row,) = cell_mod.profile_or_status(profile_spec(None))
    assert row["status"] == "oom" and "cannot allocate" in row["reason"]


# --- the workflow ---


def tiny_preset(wf: Path, **timing) -> list[str]:
    """A two-cell preset of ci's sizes (``timing`` overrides ci's) with the one figure it
    can draw, written into the copy's config, and the arguments that run it to its cells
    table."""
    path = wf / "config" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    preset = dict(config["presets"]["ci"])
    preset.pop("paired", None)
    preset.pop("headline", None)  # ci's headline cells are not among these two
    preset["timing"] = {**preset["timing"], **timing}
    preset["sweeps"] = [
        dict(models=["attention", "mamba2"], backends=["torch"], phases=["prefill"],
             batch=[1], seq_len=[32], d_state=[4], dtype=["fp32"]),
    ]  # fmt: skip
    config["presets"]["tiny"] = preset
    config["figures"] = {"latency_scaling": {"phase": "prefill"}}
    path.write_text(yaml.safe_dump(config))
    return ["results/tiny/tables/cells.csv", "--config", "preset=tiny"]


def test_a_matrix_of_timeouts_exits_non_zero_with_its_summary(workflow_copy):
    # timeout_s is checked only to be positive: at 1 ms every cell times out
    out = snakemake(workflow_copy, *tiny_preset(workflow_copy, timeout_s=0.001))
    assert out.returncode != 0
    assert "ssm-bench: 2 of 2 measured cells failed:" in out.stderr
    assert "  mamba2/torch/prefill b1 t32: timeout: " in out.stderr
    assert "every measured cell of tiny failed" in out.stderr
    assert (workflow_copy / "results/tiny/tables/cells.csv").exists()  # the outputs stay


FAKE_FULL_DISK = """\
import errno, tempfile

_mkstemp = tempfile.mkstemp


def mkstemp(*args, dir=None, **kwargs):  # a full disk under results/*/cells/
    if dir is not None and "/cells/" in str(dir):
        raise OSError(errno.ENOSPC, "No space left on device (a test's fake)")
    return _mkstemp(*args, dir=dir, **kwargs)


tempfile.mkstemp = mkstemp
"""


def test_a_full_disk_stops_the_run_before_the_next_cell(workflow_copy, tmp_path):
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "sitecustomize.py").write_text(FAKE_FULL_DISK)
    args = tiny_preset(workflow_copy)
    out = snakemake(workflow_copy, *args, env={"PYTHONPATH": str(fake)})
    assert out.returncode != 0
    logs = sorted((workflow_copy / "logs/tiny/bench").rglob("*.log"))
    measured = [log for log in logs if "median=" in log.read_text()]
    refused = [log for log in logs if "the run stopped: cannot save" in log.read_text()]
    assert len(measured) == 1 and len(refused) == len(logs) - 1 >= 1
    assert "ssm-bench: the run stopped early: cannot save results/tiny/cells/" in out.stderr
    assert "No space left on device" in out.stderr
    # with room again, a plain rerun clears the mark and measures both cells
    again = snakemake(workflow_copy, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "ssm-bench: the last run stopped early: cannot save" in again.stderr
    assert not (workflow_copy / paths.stopped("tiny")).exists()
    assert len(list((workflow_copy / "results/tiny/cells").rglob("*-fp32.json"))) == 2
