"""Provenance is checked, not only written (ssmbench.provenance): a file against its
sidecar (``check``), a shipped run against its sidecars and its manifest (``verify_run``),
the workflow's precollected figures after that check, a live aggregate after ``check_all``."""

from __future__ import annotations

import contextlib
import json
import runpy
import shutil
import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ssmbench import paths
from ssmbench.paths import REPO
from ssmbench.provenance import (
    MANIFEST,
    ProvenanceError,
    check,
    check_all,
    names,
    read_manifest,
    sha256,
    verify_run,
    write_manifest,
    write_sidecars,
)
from ssmbench.shipped import precollected_runs, shipped_kind
from tests.conftest import snakemake

PRECOLLECTED = REPO / "results" / "precollected"
SHIPPED = precollected_runs(PRECOLLECTED)
TABLE = "tables/cells.csv"


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A copy of the shipped `cpu` run."""
    if "cpu" not in SHIPPED:
        pytest.skip(f"no shipped run at {PRECOLLECTED / 'cpu'}")
    return Path(shutil.copytree(PRECOLLECTED / "cpu", tmp_path / "cpu"))


def flip_a_byte(path: Path) -> tuple[str, str]:
    """Change one byte of ``path`` in place; return its sha256 before and after."""
    before = sha256(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return before, sha256(path)


def records(folder: Path) -> list[str]:
    """The records under ``folder``, without their sidecars."""
    return sorted(str(p) for p in folder.rglob("*.json") if not p.name.endswith(".prov.json"))


def refused(run_dir: Path) -> ProvenanceError:
    with pytest.raises(ProvenanceError) as info:
        verify_run(run_dir)
    return info.value


@pytest.mark.parametrize("run", SHIPPED)
def test_every_committed_manifest_verifies(run):
    """A shipped run whose files, sidecars or manifest drifted apart fails here."""
    digest = verify_run(PRECOLLECTED / run)
    assert digest == sha256(PRECOLLECTED / run / MANIFEST)
    listed = read_manifest(PRECOLLECTED / run / MANIFEST)
    # a block run's cells and calibration, or a whole-model run's lm table
    if shipped_kind(PRECOLLECTED / run) == "blocks":
        needed = [TABLE, f"{TABLE}.prov.json", "device.json"]
    else:
        needed = ["tables/lm.csv", "tables/lm.csv.prov.json", "tables/lm_ops.csv"]
    assert all(name in listed for name in needed), needed


def test_a_copied_run_verifies_clean(run_dir):
    assert verify_run(run_dir) == sha256(run_dir / MANIFEST)


def test_an_edited_table_is_refused_naming_the_file_and_both_hashes(run_dir):
    table = run_dir / TABLE
    before, after = flip_a_byte(table)
    error = refused(run_dir)
    facts = {(m.path, m.expected, m.found) for m in error.mismatches}
    assert facts == {(str(table), before, after)}
    against = sorted(m.against for m in error.mismatches)  # the manifest and the sidecar
    assert against == [str(run_dir / MANIFEST), f"sidecar {table}.prov.json"]
    assert f"{table}: expected sha256 {before}" in str(error) and f"found {after}" in str(error)


def test_an_edited_table_with_its_sidecar_rehashed_is_still_refused(run_dir):
    table, sidecar = run_dir / TABLE, run_dir / f"{TABLE}.prov.json"
    flip_a_byte(table)
    prov = json.loads(sidecar.read_text())
    prov["outputs"][prov["output"]] = sha256(table)  # the sidecar now vouches for the edit
    sidecar.write_text(json.dumps(prov, indent=1))
    check(table)  # the sidecar alone is satisfied
    error = refused(run_dir)
    assert sorted(m.path for m in error.mismatches) == [str(table), str(sidecar)]
    assert {m.against for m in error.mismatches} == {str(run_dir / MANIFEST)}


def test_a_file_added_or_removed_is_refused(run_dir):
    record = Path(records(run_dir / "cells")[0])
    expected = sha256(record)
    record.unlink()
    extra = run_dir / "tables" / "extra.csv"
    extra.write_text("model\nmamba\n")
    error = refused(run_dir)
    manifest = run_dir / MANIFEST
    assert {(m.path, m.expected, m.found, m.against) for m in error.mismatches} == {
        (str(record), expected, None, str(manifest)),
        (str(extra), None, sha256(extra), f"not listed in {manifest}"),
        (str(extra), None, sha256(extra), f"no sidecar {extra}.prov.json"),
    }
    assert f"{record}: expected sha256 {expected} ({manifest}), found no file" in str(error)


def test_a_run_without_a_manifest_or_with_a_bad_line_is_refused(run_dir):
    manifest = run_dir / MANIFEST
    lines = manifest.read_text().splitlines()
    manifest.write_text("\n".join([lines[0], "not a digest  tables/cells.csv", *lines[1:]]) + "\n")
    assert f"{manifest}:2: not '<sha256>  <path>'" in str(refused(run_dir))
    manifest.unlink()
    assert f"{manifest}: no manifest" in str(refused(run_dir))


def test_a_sidecar_that_names_another_file_vouches_for_nothing_even_in_the_manifest(run_dir):
    """An edited table whose sidecar was pointed at another file (its ``output``), with
    that entry re-hashed and the manifest's lines updated to match: the sidecar must name
    the file it sits beside, so the check still refuses it."""
    table, sidecar = run_dir / TABLE, run_dir / f"{TABLE}.prov.json"
    flip_a_byte(table)
    prov = json.loads(sidecar.read_text())
    other = prov["output"].replace("cells.csv", "ops.csv")
    prov["output"] = other
    prov["outputs"] = {**prov["outputs"], other: sha256(table)}
    sidecar.write_text(json.dumps(prov, indent=1))
    manifest = run_dir / MANIFEST
    lines = {rel: digest for rel, digest in read_manifest(manifest).items()}
    lines[TABLE], lines[f"{TABLE}.prov.json"] = sha256(table), sha256(sidecar)
    manifest.write_text("".join(f"{d}  {rel}\n" for rel, d in sorted(lines.items())))
    error = refused(run_dir)
    assert [m.path for m in error.mismatches] == [str(table)]
    assert f"it names another file as its output: {other}" in str(error)


@pytest.mark.parametrize("line", ["../cpu/tables/cells.csv", "/etc/hostname"], ids=["up", "abs"])
def test_a_manifest_line_that_leaves_the_run_folder_is_refused_as_such(run_dir, line):
    manifest = run_dir / MANIFEST
    digest = sha256(run_dir / TABLE)
    manifest.write_text(manifest.read_text() + f"{digest}  {line}\n")
    message = str(refused(run_dir))
    assert f"path {line!r} leaves the run folder" in message and "found no file" not in message


def test_a_manifest_is_written_only_over_files_their_sidecars_vouch_for(run_dir):
    before = (run_dir / MANIFEST).read_bytes()
    table = run_dir / TABLE
    expected, found = flip_a_byte(table)
    with pytest.raises(ProvenanceError) as info:
        write_manifest(run_dir)
    assert (info.value.path, info.value.expected, info.value.found) == (str(table), expected, found)
    assert (run_dir / MANIFEST).read_bytes() == before  # left as it was
    write_manifest(run_dir, vouch=False)  # what a lease's packing records, unchecked
    assert read_manifest(run_dir / MANIFEST)[TABLE] == found


def test_the_command_line_names_the_mismatch_and_exits_1(run_dir, capsys):
    from ssmbench.__main__ import main

    assert main(["verify-provenance", str(run_dir.parent)]) == 0
    assert f"ok: {run_dir} matches" in capsys.readouterr().out
    expected, found = flip_a_byte(run_dir / TABLE)
    assert main(["verify-provenance", str(run_dir)]) == 1
    err = capsys.readouterr().err
    assert f"{run_dir / TABLE}: expected sha256 {expected}" in err and f"found {found}" in err
    assert main(["manifest", str(run_dir)]) == 1  # refuses to bless the edit
    assert "no manifest written" in capsys.readouterr().err


def test_a_sidecar_names_the_node_and_the_slurm_job(tmp_path, monkeypatch):
    """Inside a SLURM job the sidecar holds slurmd's node name and the job id; outside
    one, this host and no job id."""
    record = tmp_path / "cell.json"
    record.write_text("{}")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    (local,) = write_sidecars([str(record)], rule="bench")
    local = json.loads(Path(local).read_text())
    assert (local["node"], local["slurm_job_id"]) == (socket.gethostname(), None)
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-node-07")
    (on_slurm,) = write_sidecars([str(record)], rule="bench")
    on_slurm = json.loads(Path(on_slurm).read_text())
    assert (on_slurm["node"], on_slurm["slurm_job_id"]) == ("gpu-node-07", "4242")


def test_check_names_a_changed_or_unvouched_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    record = Path("results/r/cells/x.json")
    record.parent.mkdir(parents=True)
    record.write_text('{"status": "ok"}')
    with pytest.raises(ProvenanceError, match=f"no sidecar {record}.prov.json"):
        check(record)
    write_sidecars([str(record)], rule="bench")
    check(record)
    check(tmp_path / record)  # the same file by another name
    expected, found = flip_a_byte(record)
    with pytest.raises(ProvenanceError) as info:
        check(record)
    assert (info.value.path, info.value.expected, info.value.found) == (
        str(record),
        expected,
        found,
    )
    Path(f"{record}.prov.json").write_text("{not json")
    with pytest.raises(ProvenanceError, match=f"sidecar {record}.prov.json unreadable"):
        check(record)
    record.unlink()
    with pytest.raises(ProvenanceError, match="found no file"):
        check_all([record])


class _Named(list):
    """Just enough of a Snakemake job's named lists (input, output, params, wildcards) for
    a rule's script: the values in order (lists spliced in), each also an attribute."""

    def __init__(self, **named):
        super().__init__(x for v in named.values() for x in (v if isinstance(v, list) else [v]))
        self.__dict__.update(named)

    def items(self):
        return vars(self).items()


def _aggregate(run_dir: Path, out: Path, cells: list[str]) -> None:
    """workflow/scripts/aggregate.py as the aggregate job of ``cells`` (with the run's
    verify records and device.json) runs it, its tables and log written into ``out``."""
    job = SimpleNamespace(
        rule="aggregate",
        input=_Named(
            cells=cells,
            paired=[],
            verify=records(run_dir / "verify"),
            ops=[],
            device=[str(run_dir / "device.json")],
            claims=str(REPO / "config" / "claims.yaml"),
            tasks=[],
        ),
        output=_Named(**{n.replace(".", "_"): str(out / n) for n in paths.TABLES}),
        params=_Named(planned=[], planned_paired=[], stopped="", size={}, device="cpu"),
        wildcards=_Named(run="cpu"),
        log=[str(out / "aggregate.log")],
    )
    runpy.run_path(
        str(REPO / "workflow" / "scripts" / "aggregate.py"), init_globals={"snakemake": job}
    )


def test_a_live_aggregate_refuses_a_record_unlike_its_sidecar(run_dir, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "workflow" / "scripts"))  # as Snakemake does
    cells = records(run_dir / "cells" / "mamba" / "torch")
    intact, tampered = tmp_path / "intact", tmp_path / "tampered"
    intact.mkdir(), tampered.mkdir()
    _aggregate(run_dir, intact, cells)  # the records as their jobs wrote them
    assert (intact / "cells.csv").is_file() and (intact / "cells.csv.prov.json").is_file()

    record = Path(cells[0])
    expected, found = flip_a_byte(record)
    with pytest.raises(ProvenanceError) as info:
        _aggregate(run_dir, tampered, cells)
    assert (info.value.path, info.value.expected, info.value.found) == (
        str(record),
        expected,
        found,
    )
    assert sorted(p.name for p in tampered.iterdir()) == ["aggregate.log"]  # no table
    assert f"{record}: expected sha256 {expected}" in (tampered / "aggregate.log").read_text()


def test_precollected_figures_wait_for_the_check_and_record_the_manifest(new_workflow):
    """A tampered table stops the run before any figure; an intact run's figure records
    the sha256 of the manifest it was verified against."""
    if "cpu" not in SHIPPED:
        pytest.skip(f"no shipped run at {PRECOLLECTED / 'cpu'}")
    wf = new_workflow(shipped=("cpu",))  # the cpu run alone: its figures are drawn
    run_dir = wf / "results" / "precollected" / "cpu"
    table = run_dir / TABLE
    saved = table.read_bytes()
    expected, found = flip_a_byte(table)
    out = snakemake(wf, "--config", "source=precollected")
    assert out.returncode != 0
    assert f"{table.relative_to(wf)}: expected sha256 {expected}" in out.stderr
    assert f"found {found}" in out.stderr
    assert not (wf / "figures" / "precollected" / "cpu").exists()  # none of its

    table.write_bytes(saved)
    figure = paths.figure("cpu", "roofline", "png", "precollected")
    out = snakemake(wf, figure, "--config", "source=precollected")
    assert out.returncode == 0, out.stderr[-3000:]
    prov = json.loads((wf / paths.prov(figure)).read_text())
    manifest = f"results/precollected/cpu/{MANIFEST}"
    assert prov["precollected"] == {
        "manifest": manifest,
        "manifest_sha256": sha256(wf / manifest),
    }
    assert prov["inputs"][paths.verified("cpu")] == sha256(wf / paths.verified("cpu"))


def test_nothing_on_the_check_imports_torch(run_dir):
    """Artifact evaluation has no torch: the check and its command stay torch-free."""
    import subprocess

    code = (
        "import sys; from ssmbench.__main__ import main; "
        f"rc = main(['verify-provenance', {str(run_dir)!r}]); "
        "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    "output, path, expected",
    [
        ("figures/ci/roofline.pdf", "/elsewhere/wf/figures/ci/roofline.pdf", True),
        ("figures/ci/roofline.pdf", "/elsewhere/wf/figures/ci/memory.pdf", False),
        ("figures/ci/roofline.pdf", "/elsewhere/wf/old-figures/ci/roofline.pdf", False),
        ("results/cpu/tables/cells.csv", "/wf/results/precollected/cpu/tables/cells.csv", True),
        ("results/cpu/tables/cells.csv", "/wf/results/precollected/cpu2/tables/cells.csv", False),
        ("/abs/results/cpu/tables/cells.csv", "/wf/results/cpu/tables/cells.csv", False),
    ],
)
def test_a_sidecar_names_its_file_from_any_working_directory(output, path, expected, tmp_path):
    """A sidecar names its output relative to the workflow root it ran in; checking from
    another working directory (a test, a script) must still find the file, and only it."""
    with contextlib.chdir(tmp_path):
        assert names(output, Path(path)) is expected
