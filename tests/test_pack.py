"""Packing a run for the trip home (ssmbench.pack) and finishing a stopped run
(ssmbench.finish, ssmbench.provenance.vouched)."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from ssmbench import config, paths
from ssmbench.finish import NOT_REACHED, unfinished_records
from ssmbench.pack import MANIFEST, pack
from ssmbench.paths import REPO
from ssmbench.provenance import vouched, write_sidecars


def _fake_run(root: Path, run: str = "r", trace_bytes: int = 0) -> None:
    """A run's folders: a table with its sidecar, a log, a figure and, optionally, a trace
    of random (incompressible) bytes."""
    rng = __import__("random").Random(0)
    files = {
        f"results/{run}/tables/cells.csv": b"run,model\nr,mamba\n",
        f"results/{run}/tables/cells.csv.prov.json": b"{}",
        f"logs/{run}/aggregate.log": b"done\n",
        f"figures/{run}/roofline.png": b"\x89PNG" + bytes(100),
        f"figures/{run}/roofline.pdf": b"%PDF" + bytes(100),
    }
    if trace_bytes:
        trace = f"results/{run}/profile/m/b/prefill/x.trace.json.gz"
        files[trace] = rng.randbytes(trace_bytes)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def test_a_run_packs_into_flat_files_with_a_manifest(tmp_path):
    _fake_run(tmp_path, trace_bytes=1000)
    (tmp_path / "summary.txt").write_text("== r: 1 cells\n")
    dest = tmp_path / "out"
    packed = pack(dest, "r", root=tmp_path, extra=[tmp_path / "summary.txt"])
    names = sorted(p.name for p in dest.iterdir())
    assert names == sorted([MANIFEST, "summary.txt", "ssmbench-r.tar.gz", "traces-r.tar.gz"])
    assert [p.name for p in packed.files][-1] == MANIFEST and packed.left_out == []
    with tarfile.open(dest / "ssmbench-r.tar.gz") as tar:
        members = set(tar.getnames())
    assert "results/r/tables/cells.csv.prov.json" in members
    assert "figures/r/roofline.pdf" in members and not any("trace" in m for m in members)
    manifest = (dest / MANIFEST).read_text()
    assert "ssmbench-r.tar.gz" in manifest and "sha256" in manifest


def test_an_archive_over_the_size_limit_goes_in_pieces(tmp_path):
    _fake_run(tmp_path, trace_bytes=50_000)
    dest = tmp_path / "out"
    pack(dest, "r", root=tmp_path, max_bytes=20_000)
    pieces = sorted(p for p in dest.iterdir() if p.name.startswith("traces-r.tar.gz.part"))
    assert len(pieces) == 3 and all(p.stat().st_size <= 20_000 for p in pieces)
    joined = tmp_path / "joined.tar.gz"
    joined.write_bytes(b"".join(p.read_bytes() for p in pieces))
    with tarfile.open(joined) as tar:  # the pieces put back together are the archive
        assert any(name.endswith(".trace.json.gz") for name in tar.getnames())
    assert "cat NAME.tar.gz.part*" in (dest / MANIFEST).read_text()


def test_what_does_not_fit_the_file_count_is_left_out_and_said(tmp_path):
    _fake_run(tmp_path, trace_bytes=50_000)
    dest = tmp_path / "out"
    packed = pack(dest, "r", root=tmp_path, max_files=3, max_bytes=20_000)
    files = list(dest.iterdir())
    assert len(files) <= 3
    assert (dest / "ssmbench-r.tar.gz").is_file()  # the results come first
    assert any(note.startswith("traces") for note in packed.left_out)
    assert "left out: traces" in (dest / MANIFEST).read_text()


def test_a_sidecar_vouches_only_for_the_bytes_it_recorded(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = "results/r/cells/x.json"
    Path(out).parent.mkdir(parents=True)
    Path(out).write_text('{"status": "ok"}')
    assert not vouched(out)  # no sidecar yet: its job has not finished
    write_sidecars([out], rule="bench")
    assert vouched(out) and vouched(tmp_path / out)
    Path(out).write_text('{"status": "ok", "half": ')  # changed after its sidecar
    assert not vouched(out)
    Path(paths.prov(out)).write_text("{not json")
    assert not vouched(out)


def test_cells_without_a_finished_record_become_not_run_or_failed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = config.plan(config.load(overrides={"preset": "ci"}))
    done, started, untouched = plan.cells[0], plan.cells[1], plan.cells[2:]
    log = Path(paths.bench_log("ci", started))
    log.parent.mkdir(parents=True)
    log.write_text("")  # its job started, then died without a record
    rows = unfinished_records(
        "ci", plan.cells, [paths.cell_record("ci", done)], vars(plan.size), plan.device
    )
    by_cell = {(r.model, r.backend, r.phase, r.seq_len): r for r in rows}
    assert len(rows) == len(plan.cells) - 1
    key = lambda c: (c.model, c.backend, c.phase, c.seq_len)  # noqa: E731
    assert key(done) not in by_cell
    assert by_cell[key(started)].status == "failed" and str(log) in by_cell[key(started)].reason
    assert {by_cell[key(c)].status for c in untouched} == {"not_run"}
    assert {by_cell[key(c)].reason for c in untouched} == {NOT_REACHED["budget"]}


@pytest.mark.parametrize("bad", ["0", "x"])
def test_the_lease_script_rejects_a_bad_budget(tmp_path, bad):
    import subprocess

    out = subprocess.run(
        ["bash", "scripts/gpu_check.sh", str(tmp_path / "o"), "ci", "--budget-s", bad],
        cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHON": "/nonexistent"},
    )  # fmt: skip
    assert out.returncode == 2
    assert "--budget-s" in out.stderr and not (tmp_path / "o").exists()
