"""Records that heal: a bad record is named, moved aside and remade; a good one is never lost.

The fast tests build a finished run's records by hand in a temporary folder; the slow one
damages a finished `ci` run (the session's, copied) every way a record can be damaged and
reruns Snakemake once.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from ssmbench import config as sbconfig
from ssmbench import heal, paths, records, runlock
from ssmbench.matrix import Cell
from ssmbench.provenance import vouched, write_sidecars
from ssmbench.records import CellRecord, RecordError
from tests.conftest import bare_plan, snakemake

CI = sbconfig.plan(sbconfig.load(overrides={"preset": "ci"}), cuda=False)
SIZE = dict(d_model=32, n_layers=2, n_heads=2, head_dim=16, expand=2, d_conv=4, chunk=16)


def record_of(cell: Cell, run: str = "ci", **kw) -> CellRecord:
    fields = dict(
        samples_ms=[1.0, 2.0, 3.0],
        n_samples=3,
        time_ms_median=2.0,
        time_ms_p95=2.9,
    )
    fields.update(kw)
    return CellRecord(run=run, **vars(cell), device="cpu", size=SIZE, **fields)


def verify_of(model: str, backend: str) -> dict:
    phases = {p: {"status": "passed", "reason": ""} for p in ("prefill", "decode", "train")}
    return dict(
        model=model,
        backend=backend,
        device="cpu",
        status="passed",
        reason="",
        checks=[],
        phases=phases,
    )


def finish(path: str, write) -> str:
    """Write an output as its job does: the file, then its sidecar."""
    write(path)
    write_sidecars([path], rule="test")
    return path


def save_cell(cell: Cell, run: str = "ci", **kw) -> str:
    path = paths.cell_record(run, cell)
    return finish(path, lambda p: records.write_record(p, record_of(cell, run, **kw)))


@pytest.fixture
def finished(tmp_path, monkeypatch):
    """A ci run's device, verify and cell records, each with its sidecar, in a temporary
    working directory."""
    monkeypatch.chdir(tmp_path)
    device = dict(status="ok", reason="", device="cpu")
    finish(paths.device("ci"), lambda p: records.write_json_atomic(p, device))
    for model, backend in CI.pairs:
        write = functools.partial(records.write_json_atomic, data=verify_of(model, backend))
        finish(paths.verify_record("ci", model, backend), write)
    cells = sorted(CI.cells)
    for c in cells:
        save_cell(c)
    return cells


def flip_a_digit(path: Path | str) -> None:
    """Change one digit of the first timing sample: still a valid record, no longer the bytes
    its sidecar records (a bit flipped on disk, or a hand edit)."""
    blob = bytearray(Path(path).read_bytes())
    i = blob.index(b'"samples_ms"')
    while not chr(blob[i]).isdigit():
        i += 1
    blob[i] = ord(str((int(chr(blob[i])) + 1) % 10))
    Path(path).write_bytes(bytes(blob))


def heal_quietly(plan=CI, argv=("snakemake", "--cores", "2")):
    lines = []
    log = SimpleNamespace(write=lines.append, flush=lambda: None)
    bad = heal.heal_plan(plan, argv=list(argv), log=log)
    return bad, "".join(lines)


def test_a_truncated_record_names_its_file_and_where_it_breaks(tmp_path):
    path = save_cell(Cell("mamba2", "torch", "prefill", 1, 32, 4, "fp32"), run="t")
    text = Path(path).read_text()
    Path(path).write_text(text[: len(text) // 2])
    with pytest.raises(RecordError, match=rf"^{path}: not valid JSON: .* at line \d+ column \d+"):
        records.read_record(path)


def test_a_verify_record_without_a_key_names_the_key(tmp_path):
    data = verify_of("mamba2", "torch")
    del data["status"]
    path = tmp_path / "torch.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RecordError, match=rf"^{path}: key 'status': missing"):
        records.read_verify(path)


def test_every_reader_names_the_file_it_cannot_read(tmp_path):
    from ssmbench import claims
    from ssmbench.aggregate import aggregate
    from ssmbench.paired import read_paired

    truncated = tmp_path / "truncated.json"
    truncated.write_text('{"model": "mamba2", "backend": ')
    for read in (records.read_record, records.read_verify, records.read_device, read_paired):
        with pytest.raises(ValueError, match=rf"^{truncated}: not valid JSON: .* line 1 column"):
            read(truncated)
    with pytest.raises(ValueError, match=rf"^{truncated}: not valid JSON"):
        aggregate([], [truncated], "t")  # the verify records a run's tables read
    no_claims = tmp_path / "claims.yaml"
    no_claims.write_text("claim: []\n")
    with pytest.raises(ValueError, match=rf"^{no_claims}: key 'claims': missing"):
        claims.load(no_claims)
    no_claims.write_text("claims: [\n")
    with pytest.raises(ValueError, match=rf"^{no_claims}: not valid YAML: (.|\n)*line 2, column 1"):
        claims.load(no_claims)


MUTATIONS = {
    "status-unknown": lambda d: d.update(status="great"),
    "batch-a-string": lambda d: d.update(batch="one"),
    "batch-zero": lambda d: d.update(batch=0),
    "field-unknown": lambda d: d.update(speed=1),
    "field-missing": lambda d: d.pop("run"),
    "sample-negative": lambda d: d.update(samples_ms=[-1.0]),
    "ok-without-median": lambda d: d.update(time_ms_median=None),
    "failed-without-reason": lambda d: d.update(status="failed", reason=""),
    "old-schema": lambda d: d.update(schema_version=1),
}


@pytest.mark.parametrize("mutate", MUTATIONS.values(), ids=MUTATIONS.keys())
def test_the_fast_schema_check_refuses_what_jsonschema_refuses(mutate):
    data = record_of(Cell("mamba2", "torch", "prefill", 1, 32, 4, "fp32")).to_dict()
    assert records.valid_record_fast(data)
    mutate(data)
    assert not records.valid_record_fast(data)
    with pytest.raises(RecordError, match=r"^<record>: field "):
        records.validate_record(data)


def test_heal_moves_bad_records_aside_and_keeps_every_good_one(finished):
    truncated, invalid, flipped, unfinished, *good = finished
    text = Path(paths.cell_record("ci", truncated)).read_text()
    Path(paths.cell_record("ci", truncated)).write_text(text[:100])
    # schema-invalid but vouched for: a sidecar made again after the edit
    data = json.loads(Path(paths.cell_record("ci", invalid)).read_text())
    data["status"] = "great"
    finish(paths.cell_record("ci", invalid), lambda p: Path(p).write_text(json.dumps(data)))
    flip_a_digit(paths.cell_record("ci", flipped))
    os.remove(paths.prov(paths.cell_record("ci", unfinished)))
    verify = paths.verify_record("ci", "mamba", "torch")
    Path(verify).write_text("{")
    before = {c: Path(paths.cell_record("ci", c)).read_bytes() for c in good}

    bad, log = heal_quietly()

    damaged = [paths.cell_record("ci", c) for c in (truncated, invalid, flipped)] + [verify]
    assert sorted(bad) == sorted(damaged)
    for path in damaged:
        assert not os.path.exists(paths.prov(path))  # its job reruns
        assert os.path.exists(path + ".corrupt") and os.path.exists(paths.prov(path) + ".corrupt")
        assert f"ssm-bench: {path}: " in log
        assert f"; moved aside to {path}.corrupt, its job reruns" in log
    assert "not valid JSON" in log
    assert "field status: 'great' is not one of" in log
    assert "expected sha256 " in log and "found " in log
    # the cells' records are gone; the verify record's place is held until it is remade
    assert not any(os.path.exists(p) for p in damaged[:3])
    with pytest.raises(RecordError, match="key 'model': missing"):
        records.read_verify(verify)
    assert f"ssm-bench: {verify}: made again before the jobs that read it" in log
    # an unfinished job's record is Snakemake's to rerun; the good ones are untouched
    assert os.path.exists(paths.cell_record("ci", unfinished))
    assert {c: Path(paths.cell_record("ci", c)).read_bytes() for c in good} == before
    assert all(vouched(paths.cell_record("ci", c)) for c in good)


def test_a_resubmitted_group_sets_aside_its_vouched_records_and_puts_them_back(finished):
    """What a SLURM group's retry keeps: each record that is sound and vouched for, set
    aside before Snakemake deletes the group's outputs, and put back by its job with the
    same bytes; an edited, unfinished or missing one is left to be measured again."""
    good, edited, unfinished, missing = (paths.cell_record("ci", c) for c in finished[:4])
    flip_a_digit(edited)
    os.remove(paths.prov(unfinished))
    os.remove(missing)
    before = Path(good).read_bytes()

    kept = heal.keep_for_retry([good, edited, unfinished, missing])

    assert kept == [good]
    assert not os.path.exists(good) and not os.path.exists(paths.prov(good))
    assert os.path.exists(edited) and os.path.exists(unfinished)  # Snakemake deletes these
    assert heal.restore_kept(good, retry=True)
    assert Path(good).read_bytes() == before and vouched(good)
    assert not any(f.endswith(heal.KEPT_SUFFIX) for f in map(str, Path().rglob("*")))
    for path in (edited, unfinished, missing):
        assert not heal.restore_kept(path, retry=True)


@pytest.mark.parametrize(
    "argv, jobs",
    [
        (["snakemake", "--cores", "2"], []),  # the main process
        (["snakemake", "--target-jobs", "bench:run=ci", "--attempt", "1"], []),  # first try
        (
            ["python", "-m", "snakemake", "--target-jobs", "bench:run=ci,model=s4d",
             "bench_replicate:run=ci,replicate=1", "--allowed-rules", "bench", "--attempt", "2"],
            [("bench", {"run": "ci", "model": "s4d"}),
             ("bench_replicate", {"run": "ci", "replicate": "1"})],
        ),
    ],
    ids=["main", "first-attempt", "retry"],
)  # fmt: skip
def test_a_resubmitted_job_is_read_from_its_command_line(argv, jobs):
    assert heal.retried_jobs(argv) == jobs


def test_a_record_set_aside_by_an_earlier_run_or_edited_aside_is_not_put_back(
    finished, monkeypatch
):
    """A first attempt measures afresh (the set-aside record may be an older config's),
    and a record changed while aside no longer vouched for: both are dropped."""
    earlier, edited = (paths.cell_record("ci", c) for c in finished[:2])
    assert heal.keep_for_retry([earlier, edited]) == [earlier, edited]
    flip_a_digit(edited + heal.KEPT_SUFFIX)

    monkeypatch.delenv(heal.RETRY_ENV, raising=False)
    assert not heal.restore_kept(earlier)  # no retry: the environment says none
    monkeypatch.setenv(heal.RETRY_ENV, "2")
    assert not heal.restore_kept(edited)

    leftovers = [f for f in map(str, Path().rglob("*")) if f.endswith(heal.KEPT_SUFFIX)]
    assert leftovers == []
    for path in (earlier, edited):
        assert not os.path.exists(path) and not os.path.exists(paths.prov(path))


def test_a_missing_record_makes_the_tables_stale_so_a_plain_rerun_remakes_it(finished):
    # Snakemake finds nothing to do while the tables exist: their sidecar must go
    table = paths.table("ci", "cells.csv")
    finish(table, lambda p: records.write_json_atomic(p, {}))  # any bytes
    deleted = paths.cell_record("ci", finished[0])
    os.remove(deleted)
    os.remove(paths.prov(deleted))
    _, dry = heal_quietly(argv=("snakemake", "-n"))
    assert os.path.exists(paths.prov(table))
    assert "ssm-bench: planned but missing or unfinished; a run will remake them" in dry
    bad, log = heal_quietly()
    assert bad == [] and f"\n  {deleted}\n" in log
    assert os.path.exists(table) and not os.path.exists(paths.prov(table))


@pytest.mark.parametrize(
    "argv",
    [
        ("snakemake", "-n"),
        ("snakemake", "-np"),
        ("snakemake", "--dry-run"),
        ("snakemake", "--lint"),
    ],
    ids=["n", "np", "dry-run", "lint"],
)
def test_a_command_that_runs_no_job_reports_and_moves_nothing(finished, argv):
    path = paths.cell_record("ci", finished[0])
    Path(path).write_text("{")
    bad, log = heal_quietly(argv=argv)
    assert bad == [path] and os.path.exists(path) and not os.path.exists(path + ".corrupt")
    assert f"ssm-bench: {path}: not valid JSON" in log and "a run will move it aside" in log


def test_nothing_is_moved_while_another_snakemake_holds_the_lock(finished):
    path = paths.cell_record("ci", finished[0])
    Path(path).write_text("{")
    runlock.SNAKEMAKE_LOCKS.mkdir(parents=True)
    (runlock.SNAKEMAKE_LOCKS / "0.input.lock").write_text("")
    bad, _ = heal_quietly()
    assert bad == [path] and os.path.exists(path)


def test_nothing_is_moved_while_another_run_holds_the_checkout(finished, monkeypatch):
    path = paths.cell_record("ci", finished[0])
    Path(path).write_text("{")
    monkeypatch.setattr(heal.runlock, "read", lambda: SimpleNamespace(pid=os.getpid() + 1))
    monkeypatch.setattr(heal.runlock, "alive", lambda holder: True)
    bad, log = heal_quietly()
    assert bad == [path] and os.path.exists(path) and "a run will move it aside" in log


@pytest.mark.parametrize(
    "argv, runs",
    [
        (["snakemake", "--cores", "2", "-p"], True),
        (["snakemake", "-j4", "--config", "preset=ci"], True),
        (["snakemake", "-pn"], False),
        (["snakemake", "--summary"], False),
        (["snakemake", "--unlock"], False),
        (["snakemake", "--touch"], False),
    ],
)
def test_runs_jobs_reads_the_command_line(argv, runs):
    assert heal.runs_jobs(argv) is runs


def test_every_kind_of_record_is_checked():
    gpu = sbconfig.plan(sbconfig.load(overrides={"preset": "gpu"}), cuda=True)
    lm = sbconfig.plan(sbconfig.load(overrides={"preset": "lm-ci"}))
    checked = [path for plan in (CI, gpu, lm) for path, _ in heal.planned_outputs(plan)]
    kinds = ("device.json", "/verify/", "/prewarm/", "/cells/", "/paired/", ".ops.csv", ".trace")
    kinds += ("/lm-verify/", "/lm/", "/lm-profile/")  # whole models
    for kind in kinds:
        assert any(kind in path for path in checked), kind
    assert len(checked) == len(set(checked))


@pytest.mark.slow
def test_ten_thousand_good_records_are_all_kept(tmp_path, monkeypatch):
    """Plan-time healing over a large run keeps every good record (its time is a benchmark's
    business, not a test's: about 2 s for these 10,000 here)."""
    monkeypatch.chdir(tmp_path)
    cells = [Cell("mamba2", "torch", "prefill", 1, t, 4, "fp32") for t in range(1, 10_001)]
    template = record_of(cells[0], run="big").to_dict()
    sidecar = json.loads(Path(paths.prov(save_cell(cells[0], run="big"))).read_text())
    for c in cells[1:]:  # as save_cell writes them, without its cost per file
        path = paths.cell_record("big", c)
        blob = json.dumps({**template, "seq_len": c.seq_len}).encode()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Path(path).write_bytes(blob)
        outputs = {path: hashlib.sha256(blob).hexdigest()}
        Path(paths.prov(path)).write_text(json.dumps({**sidecar, "outputs": outputs}))
    plan = bare_plan("big", cells)
    assert len(plan.bench_jobs) == len(cells)  # one process each
    bad, _ = heal_quietly(plan)
    assert bad == []
    assert all(os.path.exists(paths.cell_record("big", c)) for c in cells)


# --- the workflow ---


@pytest.fixture(scope="module")
def damaged_run(ci_run, tmp_path_factory):
    """A copy of the session's finished ci run, damaged every way, rerun once."""
    wf = tmp_path_factory.mktemp("heal") / "wf"
    shutil.copytree(ci_run, wf, symlinks=True)
    results = wf / "results" / "ci"
    cells = sorted((results / "cells").rglob("*-fp32.json"))
    assert len(cells) == len(CI.cells)
    truncated, invalid, flipped, deleted = (
        results / "cells/mamba/torch/prefill/b1-t32-n4-fp32.json",
        results / "cells/s4d/torch/decode/b1-t64-n4-fp32.json",
        results / "cells/attention/naive/prefill/b1-t64-n0-fp32.json",
        results / "cells/deltanet/torch/train/b1-t32-n0-fp32.json",
    )
    truncated.write_text(truncated.read_text()[:200])
    data = json.loads(invalid.read_text())
    data["batch"] = "one"
    invalid.write_text(json.dumps(data))
    flip_a_digit(flipped)
    deleted.unlink()
    # a NaN median whose sidecar was made again to match: it passes the sidecar's check
    nan = results / "cells/mamba3/torch/prefill/b1-t64-n4-fp32.json"
    blob = with_value(json.loads(nan.read_text()), "time_ms_median", "NaN")
    nan.write_bytes(blob)
    sidecar = json.loads(Path(paths.prov(str(nan))).read_text())
    sidecar["outputs"][sidecar["output"]] = hashlib.sha256(blob).hexdigest()
    Path(paths.prov(str(nan))).write_text(json.dumps(sidecar))
    corrupt_verify = results / "verify/mamba2/torch.json"
    corrupt_verify.write_text(corrupt_verify.read_text()[:50])
    deleted_verify = results / "verify/hybrid/torch.json"
    deleted_verify.unlink()
    damaged = [truncated, invalid, flipped, deleted, nan]
    untouched = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in cells if p not in damaged}
    table = results / "tables" / "cells.csv"
    table_before = table.stat().st_mtime_ns
    # the tables, not the figures: healing is decided as the Snakefile is read, whatever
    # the targets, and 13 figures redrawn would add half a minute to the suite
    tables = [paths.table("ci", name) for name in paths.TABLES]
    out = snakemake(wf, *tables, *map(paths.prov, tables), "--config", "preset=ci")
    return SimpleNamespace(
        wf=wf,
        out=out,
        damaged=damaged,
        verify=(corrupt_verify, deleted_verify),
        untouched=untouched,
        table=table,
        table_before=table_before,
    )


def test_a_damaged_run_heals_in_one_rerun(damaged_run):
    r = damaged_run
    assert r.out.returncode == 0, r.out.stderr[-4000:]
    log = r.out.stderr
    rel = lambda p: str(p.relative_to(r.wf))  # noqa: E731
    truncated, invalid, flipped, deleted, nan = r.damaged
    assert f"ssm-bench: {rel(truncated)}: not valid JSON" in log
    assert f"ssm-bench: {rel(invalid)}: field batch: 'one' is not of type 'integer'" in log
    assert f"ssm-bench: {rel(flipped)}: expected sha256 " in log
    assert f"ssm-bench: {rel(nan)}: field time_ms_median: nan is not a finite number" in log
    assert f"ssm-bench: {rel(r.verify[0])}: not valid JSON" in log
    for path in (truncated, invalid, flipped, nan, r.verify[0]):
        assert f"moved aside to {rel(path)}.corrupt, its job reruns" in log
        assert Path(f"{path}.corrupt").exists()
    # every damaged or deleted record is remade, vouched for by its sidecar (whose paths
    # are the workflow's)
    with contextlib.chdir(r.wf):
        for path in [*r.damaged, *r.verify]:
            assert vouched(rel(path)), path
            if "/cells/" in str(path):
                records.read_record(path)


def test_healing_never_remeasures_or_deletes_a_good_record(damaged_run):
    r = damaged_run
    changed = [
        p
        for p, (blob, mtime) in r.untouched.items()
        if not p.exists() or p.read_bytes() != blob or p.stat().st_mtime_ns != mtime
    ]
    assert changed == []  # the verify records made again (ancient inputs) rerun no cell
    assert r.out.stderr.count("rule bench:") == len(r.damaged)


def test_the_tables_refresh_with_every_remade_record(damaged_run):
    import pandas as pd

    r = damaged_run
    assert r.table.stat().st_mtime_ns > r.table_before
    cells = pd.read_csv(r.table)
    assert len(cells) == len(CI.cells)
    deleted = r.damaged[3]
    assert (
        (cells.model == "deltanet") & (cells.phase == "train") & (cells.seq_len == 32)
    ).sum() == 1
    assert deleted.exists()


# --- non-finite numbers: no record of any kind holds one ---

NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def paired_blob() -> dict:
    from tests.conftest import paired_record

    return paired_record("mamba2", 1.5).to_dict()


def verify_blob() -> dict:
    data = verify_of("mamba2", "torch")
    data["checks"] = [{"name": "ssd.y", "dtype": "fp32", "max_abs_err": 1e-7, "ok": True}]
    return data


# kind -> (heal's check of it, a valid record, the numeric field the edit makes non-finite)
RECORD_KINDS = {
    "cell": (heal._cell, lambda: record_of(Cell("mamba2", "torch", "prefill", 1, 32, 4, "fp32")).to_dict(), "time_ms_median"),  # noqa: E501
    "paired": (heal._paired, paired_blob, "latency_ratio"),
    "verify": (heal._verify, verify_blob, "checks.0.max_abs_err"),
    "device": (heal._device, lambda: dict(status="ok", reason="", device="cpu", copy_gbps=9.5), "copy_gbps"),  # noqa: E501
    "prewarm": (heal._prewarm, lambda: dict(status="ok", reason="", shapes=[], seconds=1.5), "seconds"),  # noqa: E501
}  # fmt: skip


def with_value(data: dict, field: str, token: str) -> bytes:
    """``data`` as JSON with the number at ``field`` (dotted, list indices as digits)
    replaced by the bare token ``token`` (NaN, Infinity): what an edit or a lax writer
    leaves, which Python's json reads as a float."""
    marker = 123456.789
    node = data
    *parents, leaf = field.split(".")
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[int(leaf) if isinstance(node, list) else leaf] = marker
    return json.dumps(data).replace(str(marker), token).encode()


@pytest.mark.parametrize("token", NON_FINITE.values(), ids=NON_FINITE.keys())
@pytest.mark.parametrize("kind", RECORD_KINDS)
def test_a_non_finite_number_in_any_record_is_named_by_field(kind, token):
    check, valid, field = RECORD_KINDS[kind]
    check(json.dumps(valid()).encode(), "r.json")  # the valid record passes
    blob = with_value(valid(), field, token)
    with pytest.raises(RecordError) as refused:
        check(blob, "r.json")
    shown = field.replace(".0.", "[0].")
    assert str(refused.value).startswith(f"r.json: field {shown}: ")
    assert "is not a finite number" in str(refused.value)


def test_heal_moves_a_re_hashed_record_with_nan_aside(finished):
    """The issue's case: a NaN median whose sidecar was made again to match (what a buggy
    measurement or an edit with a re-hash leaves) is named, moved aside and remade."""
    path = paths.cell_record("ci", finished[0])
    data = json.loads(Path(path).read_text())
    finish(path, lambda p: Path(p).write_bytes(with_value(data, "time_ms_median", "NaN")))
    assert vouched(path)  # its sidecar vouches for the bytes
    bad, log = heal_quietly()
    assert bad == [path] and os.path.exists(path + ".corrupt")
    assert f"ssm-bench: {path}: field time_ms_median: nan is not a finite number" in log


def test_a_task_or_whole_model_record_with_nan_is_refused(tmp_path):
    from ssmbench.lm.record import read_lm_record
    from ssmbench.tasks.record import read_task_record

    for reader in (read_task_record, read_lm_record):
        path = tmp_path / "r.json"
        path.write_text('{"run": "t", "seconds": NaN}')
        with pytest.raises(RecordError, match=rf"^{path}: field seconds: nan is not a finite"):
            reader(path)


def test_a_cell_whose_p95_is_below_its_median_is_refused_where_it_is_read(tmp_path):
    data = record_of(Cell("mamba2", "torch", "prefill", 1, 32, 4, "fp32")).to_dict()
    data["time_ms_p95"] = 1.0  # below its median, 2.0: the cells table refuses such a row
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RecordError, match=rf"^{path}: field time_ms_p95: 1.0 is below the"):
        records.read_record(path)
    with pytest.raises(RecordError, match="field time_ms_p95"):
        heal._cell(path.read_bytes(), str(path))


def test_a_failed_aggregate_keeps_the_previous_tables(ci_run, tmp_path):
    """The tables are replaced only by a whole new set: an aggregate that fails (here on
    a claims ledger that is not YAML) leaves the previous tables, each with its sidecar,
    and the run exits non-zero saying so."""
    wf = tmp_path / "wf"
    shutil.copytree(ci_run, wf, symlinks=True)
    tables = wf / "results" / "ci" / "tables"
    before = {p: p.read_bytes() for p in tables.rglob("*") if p.is_file()}
    (wf / "config" / "claims.yaml").write_text("claims: [\n")
    targets = [paths.table("ci", name) for name in paths.TABLES]
    out = snakemake(wf, *targets, "--config", "preset=ci")
    assert out.returncode != 0
    assert "claims.yaml: not valid YAML" in out.stdout + out.stderr
    assert "tables could not be made again and are the previous run's" in out.stderr
    assert {p: p.read_bytes() for p in tables.rglob("*") if p.is_file()} == before
    assert not (wf / ".snakemake" / "ssmbench-kept-tables" / "ci").exists()
