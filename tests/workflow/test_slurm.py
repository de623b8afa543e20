"""The workflow on a real SLURM cluster (profiles/slurm): a single-node cluster started by
scripts/slurm_local.sh runs a tiny matrix (one model's cells grouped into one allocation,
and a cell that cannot fit in memory), and the run must give the tables of a local run,
record every job's SLURM id, ask SLURM for a GPU for the jobs that hold one, end a cell
that fails as its own record while its group goes on, resubmit a group cancelled mid-run
without measuring again what it finished, and have nothing left to do the second time.
A tiny cuda preset goes through the same cluster: its GPU jobs ask for the fake gres GPU
and end `unavailable` on the GPU-less node, and the run still makes its tables.  And
scripts/bench_scheduling.py runs on the cluster, grouping its jobs into one allocation per
group (the speed that buys is the script's to print, not a test's to assert).

Needs root and the SLURM packages (installed by the script with apt-get when missing);
skipped otherwise, saying why, unless SSMBENCH_REQUIRE_SLURM is set (.ci/run), where a
cluster that cannot start fails the tests.  The daemons are stopped at the end whatever
happened.  About 6 minutes on 2 cores.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ssmbench.paths import REPO
from tests.conftest import SNAKEMAKE, clone, snakemake

SLURM_LOCAL = REPO / "scripts" / "slurm_local.sh"
BENCH_SCHEDULING = REPO / "scripts" / "bench_scheduling.py"
# the executor plugin's folder (`make slurm`), on PYTHONPATH for the SLURM runs only
PLUGINS = Path(sys.executable).parent.parent / "slurm-plugins"
PARTITION = os.environ.get("SSMBENCH_SLURM_PARTITION") or "ssmbench"
ENV = {"SSMBENCH_SLURM_PARTITION": PARTITION}
ON_SLURM = {
    **ENV,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")])),
}
# The ci preset cut to one model: a prefill and a decode cell, one profiled cell and one
# paired cell, so calibrate, verify (s4d and attention), bench, profile, paired, aggregate;
# and a cell that fails: naive attention at T = 131072 materialises a 137 GB score matrix,
# past ci's 16 GiB address space, so it ends `oom` at once.  The three cells are one group.
TINY = {
    "presets": {
        "ci": {
            "sweeps": [
                {"models": ["s4d"], "phases": ["prefill", "decode"]},
                {"models": ["s4d"], "phases": ["prefill"], "profile": True},
            ],
            "paired": {"sweeps": [{"models": ["s4d"], "phases": ["prefill"]}]},
            "headline": [],  # ci's headline cells are not among these
        }
    }
}
for sweep in TINY["presets"]["ci"]["sweeps"] + TINY["presets"]["ci"]["paired"]["sweeps"]:
    sweep.update(backends=["torch"], batch=[1], seq_len=[32], d_state=[4], dtype=["fp32"])
OOM_CELL = ("attention", "naive", "prefill", 1, 131072, 0, "fp32")
TINY["presets"]["ci"]["sweeps"].append(
    dict(models=["attention"], backends=["naive"], phases=["prefill"], batch=[1],
         seq_len=[131072], d_state=[4], dtype=["fp32"])
)  # fmt: skip
# The smallest cuda preset: two s4d cells at the ci preset's sizes (calibrate, verify,
# two cells in one group, one profiled, aggregate), every measuring job a GPU job.
CUDA_RUN = "cuda-tiny"
CUDA_TINY = {
    "presets": {
        CUDA_RUN: {
            "description": "two cells of a cuda preset, for the SLURM test",
            "device": "cuda",
            "calibrate_quick": True,
            "size": {"d_model": 32, "n_layers": 1, "n_heads": 2, "head_dim": 16, "expand": 2,
                     "d_conv": 4, "chunk": 16},
            "timing": {"warmup": 1, "min_samples": 3, "max_samples": 5, "min_time_s": 0.0,
                       "max_time_s": 1.0, "timeout_s": 30},
            "headline": [],
            "sweeps": [
                {"models": ["s4d"], "backends": ["torch"], "phases": ["prefill", "decode"],
                 "batch": [1], "seq_len": [32], "d_state": [4], "dtype": ["fp32"]},
                # a profiled cell: the op_breakdown figure's config asks for one
                {"models": ["s4d"], "backends": ["torch"], "phases": ["prefill"],
                 "batch": [1], "seq_len": [32], "d_state": [4], "dtype": ["fp32"],
                 "profile": True},
            ],
        }
    }
}  # fmt: skip
TARGET = "results/ci/tables/cells.csv"
# a figure too: its figure_table and figure jobs (papermill) run on the cluster as well
FIGURE = "latency_scaling"
TARGETS = [TARGET, f"figures/ci/{FIGURE}.png"]
# What this cluster differs in from one with slurmdbd: job states come from squeue (kept
# for MinJobAge), and the first status check comes sooner than the plugin's 40 s.  Every
# bench job is marked as a GPU job, which SLURM can place on the fake gres GPU.
PROFILE_ARGS = [
    "--workflow-profile",
    "profiles/slurm",
    "--slurm-status-command",
    "squeue",
    "--slurm-init-seconds-before-status-checks",
    "2",
]
CLUSTER_ARGS = [*PROFILE_ARGS, "--set-resources", "bench:gpu=1"]
KEYS = ["model", "backend", "phase", "batch", "seq_len", "d_state", "dtype"]


def cannot_run() -> str | None:
    """Why this machine cannot start the cluster, or None."""
    if os.geteuid() != 0:
        return "needs root: scripts/slurm_local.sh starts SLURM's daemons and writes /etc/slurm"
    if not (PLUGINS / "snakemake_executor_plugin_slurm").is_dir():
        return f"no snakemake-executor-plugin-slurm in {PLUGINS} (make slurm)"
    if not shutil.which("slurmctld") and not shutil.which("apt-get"):
        return "no SLURM packages and no apt-get to install them"
    return None


def skip_or_fail(reason: str):
    if os.environ.get("SSMBENCH_REQUIRE_SLURM"):
        pytest.fail(f"SSMBENCH_REQUIRE_SLURM is set, but {reason}")
    pytest.skip(reason)


def slurm_local(action: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SLURM_LOCAL), action],
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=900,  # up may install the packages
    )


@pytest.fixture(scope="module")
def cluster(request, pristine_workflow) -> str:
    """A running single-node cluster; its node's name.  Stopped after the module.  (It
    takes the pristine workflow so that every test on it, each starting Snakemake through
    SLURM, is marked slow as tests/conftest.py marks the others.)"""
    reason = cannot_run()
    if reason:
        skip_or_fail(reason)
    request.addfinalizer(lambda: slurm_local("down"))  # before up: also after a failed up
    up = slurm_local("up")
    if up.returncode != 0:
        skip_or_fail(f"scripts/slurm_local.sh up failed: {up.stderr.strip()[-2000:]}")
    return subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, check=True
    ).stdout.split()[0]


def squeue(*args: str) -> list[list[str]]:
    out = subprocess.run(["squeue", "-h", *args], capture_output=True, text=True, check=True)
    return [line.split() for line in out.stdout.splitlines() if line.strip()]


def scontrol_job(job_id: str) -> str:
    return subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True
    ).stdout


def cell_sidecars(wf: Path, run: str = "ci") -> dict[Path, dict]:
    """The sidecars of the run's cell records written so far, by record."""
    found = {}
    for path in (wf / "results" / run / "cells").rglob("*.json.prov.json"):
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):  # being written
            found[path.with_name(path.name.removesuffix(".prov.json"))] = json.loads(
                path.read_text()
            )
    return found


def cancel_the_group_after_an_ok_cell(
    process: subprocess.Popen, wf: Path, timeout_s: float = 300
) -> str:
    """scancel the allocation of the cells' group as soon as it has written an ok record
    (its other cells still to run); its SLURM job id."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        for record, sidecar in cell_sidecars(wf).items():
            if json.loads(record.read_text())["status"] == "ok":
                job_id = sidecar["slurm_job_id"]
                subprocess.run(["scancel", job_id], check=True)
                return job_id
        time.sleep(0.2)
    raise AssertionError("no cell record was seen before the run ended")


def sidecars(wf: Path) -> list[dict]:
    """The sidecars of the run's measured records (device, verify, cells, paired, ops)."""
    run = wf / "results" / "ci"
    paths = [p for p in run.rglob("*.prov.json") if "tables" not in p.parts]
    return [json.loads(p.read_text()) for p in paths]


@pytest.fixture(scope="module")
def runs(cluster, pristine_workflow, tmp_path_factory) -> dict:
    """The tiny matrix through SLURM (the cells' group cancelled mid-run), then again, and
    the same matrix run locally."""
    root = tmp_path_factory.mktemp("slurm")
    tiny = root / "tiny.yaml"
    tiny.write_text(yaml.safe_dump(TINY))
    # the target first: --set-resources and --config take every word after them
    config = ["--configfile", str(tiny), "--config", "preset=ci"]
    wf = clone(pristine_workflow, root / "wf")
    log = root / "slurm-run.log"  # a file, not a pipe nobody reads while we wait
    started = time.monotonic()
    with open(log, "w") as out:
        process = subprocess.Popen(
            [SNAKEMAKE, "--cores", "2", *TARGETS, *CLUSTER_ARGS, *config],
            cwd=wf,
            env={**os.environ, **ON_SLURM},
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            try:
                cancelled = cancel_the_group_after_an_ok_cell(process, wf)
            except AssertionError as e:
                raise AssertionError(f"{e}; the run said:\n{log.read_text()[-3000:]}") from None
            finished_before_cancel = {
                record: sidecar["slurm_job_id"] for record, sidecar in cell_sidecars(wf).items()
            }
            process.wait(timeout=600)
        finally:
            if process.poll() is None:
                process.kill()
    seconds = time.monotonic() - started
    output = log.read_text()
    again = snakemake(wf, *TARGETS, *CLUSTER_ARGS, *config, env=ON_SLURM, timeout=300)
    local = clone(pristine_workflow, root / "local")
    local_run = snakemake(local, *TARGETS, *config, timeout=600)
    assert local_run.returncode == 0, local_run.stderr[-3000:]
    return dict(
        wf=wf,
        node=cluster,
        returncode=process.returncode,
        output=output,
        seconds=seconds,
        cancelled=cancelled,
        finished_before_cancel=finished_before_cancel,
        again=again,
        local=local,
    )


def dry_run_jobs(text: str) -> dict[str, list[str]]:
    """A dry run's jobs: rule name -> the text of each of its jobs' blocks."""
    jobs: dict[str, list[str]] = {}
    for block in re.split(r"\n *rule ", text)[1:]:  # a group's jobs are indented
        name, _, body = block.partition(":")
        jobs.setdefault(name.strip(), []).append(body.split("\n\n")[0])
    return jobs


def test_the_profile_sizes_each_job(workflow_copy, tmp_path):
    """No cluster needed, only the plugin: a dry run through profiles/slurm gives the
    measuring jobs the run's cores and the preset's memory, the rest one core and 2 GB, all
    on the partition named by SSMBENCH_SLURM_PARTITION; the cells are one group (the
    profile's 20 to an allocation), and a local dry run shows no group."""
    if not (PLUGINS / "snakemake_executor_plugin_slurm").is_dir():
        pytest.skip(f"no snakemake-executor-plugin-slurm in {PLUGINS} (make slurm)")
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(yaml.safe_dump(TINY))
    wf = workflow_copy
    env = {**ON_SLURM, "SSMBENCH_SLURM_PARTITION": "short-q"}
    args = ["-n", TARGET, "--workflow-profile", "profiles/slurm", "--configfile", str(tiny)]
    out = snakemake(wf, *args, "--config", "preset=ci", env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = dry_run_jobs(out.stdout)
    assert {"calibrate", "verify", "bench", "aggregate"} <= set(jobs)
    for rule in ("calibrate", "verify", "bench", "paired", "profile"):
        for job in jobs[rule]:
            assert "threads: 2" in job and "mem_mb=8000" in job, (rule, job)
            assert "slurm_partition=short-q" in job and "gpu=0" in job, (rule, job)
    (aggregate,) = jobs["aggregate"]
    assert "threads:" not in aggregate and "mem_mb=2000" in aggregate
    assert "runtime=30" in aggregate and "slurm_partition=short-q" in aggregate
    assert len(jobs["bench"]) == 3
    assert out.stdout.count("Group job cells") == 1
    local = snakemake(wf, "-n", TARGET, "--configfile", str(tiny), "--config", "preset=ci")
    assert local.returncode == 0 and "rule bench:" in local.stdout, local.stderr[-3000:]
    assert "Group job" not in local.stdout


def test_the_run_completes_through_slurm(runs):
    assert runs["returncode"] == 0, runs["output"][-5000:]
    assert runs["seconds"] < 300, f"the SLURM run took {runs['seconds']:.0f} s"


def test_every_job_ran_as_a_slurm_job_on_the_node(runs):
    found = sidecars(runs["wf"])
    rules = {s["rule"] for s in found}
    assert {"calibrate", "verify", "bench", "paired", "profile"} <= rules
    for sidecar in found:
        assert sidecar["slurm_job_id"] and sidecar["slurm_job_id"].isdigit(), sidecar["output"]
        assert sidecar["node"] == runs["node"], sidecar["output"]
    ids = [s["slurm_job_id"] for s in found if s["rule"] == "verify"]
    assert len(set(ids)) == len(ids)  # one job each
    # the three cells in two allocations: the cancelled group's and its resubmission's
    assert len({s["slurm_job_id"] for s in found if s["rule"] == "bench"}) == 2
    local = sidecars(runs["local"])
    assert local and all(s["slurm_job_id"] is None for s in local)


def test_jobs_holding_the_device_asked_slurm_for_one(runs):
    """A job holding `gpu: 1` is submitted with --gpus=1 (SLURM: gres:gpu:1); no other."""
    by_rule = {}
    for sidecar in sidecars(runs["wf"]):
        by_rule.setdefault(sidecar["rule"], set()).add(sidecar["slurm_job_id"])
    for job_id in by_rule["bench"]:
        assert "gres:gpu:1" in scontrol_job(job_id), job_id
    for job_id in by_rule["verify"] | by_rule["calibrate"]:
        assert "gres:gpu" not in scontrol_job(job_id), job_id


def test_a_cancelled_group_is_resubmitted_and_keeps_what_it_finished(runs):
    """The group's allocation, cancelled after a cell's record, is submitted again, and
    its finished records are put back, not measured again: their sidecars still name the
    cancelled allocation, and their jobs' logs say so; the other cells ran in the new one."""
    cancelled, wf = runs["cancelled"], runs["wf"]
    assert "JobState=CANCELLED" in scontrol_job(cancelled)
    # the group's error names its SLURM log, then the group is submitted again
    failed = runs["output"].index(f"slurm_logs/group_cells_bench/{cancelled}.log")
    assert "Trying to restart job" in runs["output"][failed:]
    kept = {r for r, job in runs["finished_before_cancel"].items() if job == cancelled}
    assert kept, runs["finished_before_cancel"]
    now = cell_sidecars(wf)
    assert len(now) == 3
    for record, sidecar in now.items():
        log = (wf / "logs/ci/bench" / record.relative_to(wf / "results/ci/cells")).with_suffix(
            ".log"
        )
        if record in kept:
            assert sidecar["slurm_job_id"] == cancelled, record
            assert "kept from the group's failed allocation" in log.read_text()
        else:
            assert sidecar["slurm_job_id"] != cancelled, record
            assert "kept from" not in log.read_text()
    assert not list(wf.rglob("*.kept"))


def test_a_failing_cell_is_its_own_record_and_its_group_goes_on(runs):
    """The cell past the address space ends `oom` with its reason, and the allocation that
    ran it went on: another cell started there after it, or it ended with exit code 0."""
    found = cell_sidecars(runs["wf"])
    (oom,) = [r for r in found if json.loads(r.read_text())["status"] != "ok"]
    record = json.loads(oom.read_text())
    assert tuple(record[k] for k in KEYS) == OOM_CELL
    assert record["status"] == "oom" and record["reason"], record
    job = found[oom]["slurm_job_id"]
    after = [
        s for r, s in found.items()
        if r != oom and s["slurm_job_id"] == job and s["started"] >= found[oom]["ended"]
    ]  # fmt: skip
    state = scontrol_job(job)
    assert after or ("JobState=COMPLETED" in state and "ExitCode=0:0" in state), state


def test_the_tables_are_those_of_a_local_run(runs):
    tables = lambda wf: sorted(p.name for p in (wf / "results/ci/tables").iterdir())  # noqa: E731
    assert tables(runs["wf"]) == tables(runs["local"])
    on_slurm = pd.read_csv(runs["wf"] / TARGET).sort_values(KEYS)
    local = pd.read_csv(runs["local"] / TARGET).sort_values(KEYS)
    assert list(on_slurm.columns) == list(local.columns)
    assert on_slurm[KEYS + ["status"]].values.tolist() == local[KEYS + ["status"]].values.tolist()
    assert sorted(on_slurm.status) == ["ok", "ok", "oom"]


def test_the_figure_is_that_of_a_local_run(runs):
    """The figure is drawn from a table of the same cells as the local run's (their
    timings differ, so the pixels do; the rows and statuses may not), on the submit host:
    figure_table and figure are local rules, too cheap to queue."""
    prov = json.loads((runs["wf"] / f"figures/ci/{FIGURE}.png.prov.json").read_text())
    assert prov["rule"] == "figure" and prov["slurm_job_id"] is None, prov
    for wf in (runs["wf"], runs["local"]):
        assert (wf / f"figures/ci/{FIGURE}.pdf").stat().st_size > 0
    table = f"results/ci/tables/figures/{FIGURE}.csv"
    on_slurm = pd.read_csv(runs["wf"] / table).sort_values(KEYS)
    local = pd.read_csv(runs["local"] / table).sort_values(KEYS)
    assert on_slurm[KEYS + ["status"]].values.tolist() == local[KEYS + ["status"]].values.tolist()


def test_a_second_run_has_nothing_to_do(runs):
    again = runs["again"]
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Nothing to be done" in again.stdout + again.stderr
    assert "has been submitted with SLURM jobid" not in again.stdout + again.stderr


@pytest.fixture(scope="module")
def cuda_run(cluster, pristine_workflow, tmp_path_factory) -> dict:
    """The tiny cuda preset through SLURM on the GPU-less node (its fake gres GPU)."""
    root = tmp_path_factory.mktemp("slurm-cuda")
    overlay = root / "cuda.yaml"
    overlay.write_text(yaml.safe_dump(CUDA_TINY))
    wf = clone(pristine_workflow, root / "wf")
    target = f"results/{CUDA_RUN}/tables/cells.csv"
    args = [target, *PROFILE_ARGS, "--configfile", str(overlay)]
    out = snakemake(wf, *args, "--config", f"preset={CUDA_RUN}", env=ON_SLURM, timeout=600)
    return dict(wf=wf, out=out, target=target)


def test_a_cuda_preset_asks_slurm_for_a_device_and_ends_unavailable_without_one(cuda_run):
    """Every measuring job of a cuda preset is submitted with --gpus=1 (SLURM:
    gres:gpu:1), runs on the node's fake GPU, and ends `unavailable` with the reason;
    the run still makes its tables."""
    wf, out = cuda_run["wf"], cuda_run["out"]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    table = pd.read_csv(wf / cuda_run["target"])
    assert len(table) == 2 and set(table.status) == {"unavailable"}
    assert all("torch.cuda.is_available() is False" in r for r in table.reason), table.reason
    measured = [
        json.loads(p.read_text())
        for p in (wf / "results" / CUDA_RUN).rglob("*.prov.json")
        if "tables" not in p.parts
    ]
    assert {"calibrate", "verify", "bench", "profile"} <= {s["rule"] for s in measured}
    for job_id in {s["slurm_job_id"] for s in measured}:
        assert "gres:gpu:1" in scontrol_job(job_id), job_id
    # the two cells in one allocation, with one GPU for both
    assert len({s["slurm_job_id"] for s in measured if s["rule"] == "bench"}) == 1


def _bench_scheduling():
    spec = importlib.util.spec_from_file_location("bench_scheduling", BENCH_SCHEDULING)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    if str(BENCH_SCHEDULING.parent) not in sys.path:
        sys.path.insert(0, str(BENCH_SCHEDULING.parent))  # its `import _src`, as when run
    spec.loader.exec_module(module)
    return module


def test_the_scheduling_benchmark_groups_its_jobs_into_one_allocation_per_group(cluster):
    """scripts/bench_scheduling.py on this cluster, one small round (last in the module,
    so it has the node to itself): ungrouped, every job is its own allocation; grouped, a
    group of jobs shares one, which is where the grouped rate comes from; its summary
    prints the rate ratio and the allocations."""
    bench = _bench_scheduling()
    setup = bench.Setup(jobs=6, group_size=3, partition=PARTITION)
    runs = bench.measure(setup, rounds=1, ways=("slurm", "grouped"), report=lambda line: None)
    assert [run.allocations for run in runs["slurm"]] == [6], runs
    assert [run.allocations for run in runs["grouped"]] == [2], runs
    lines = bench.summary(setup, runs)
    assert any(line.startswith("grouped / slurm jobs/min") for line in lines), lines
    assert any(line.startswith("grouped allocations") and "(expected 2)" in line for line in lines)
