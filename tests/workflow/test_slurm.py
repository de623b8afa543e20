"""The workflow on a real SLURM cluster (profiles/slurm): a single-node cluster started by
scripts/slurm_local.sh runs a tiny matrix (one model, 8 jobs), and the run must give the
tables of a local run, record every job's SLURM id, ask SLURM for a GPU for the jobs that
hold one, resubmit a job cancelled mid-run, and have nothing left to do the second time.

Needs root and the SLURM packages (installed by the script with apt-get when missing);
skipped otherwise, saying why, unless SSMBENCH_REQUIRE_SLURM is set (.ci/run), where a
cluster that cannot start fails the tests.  The daemons are stopped at the end whatever
happened.  About 3 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
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
# the executor plugin's folder (`make slurm`), on PYTHONPATH for the SLURM runs only
PLUGINS = Path(sys.executable).parent.parent / "slurm-plugins"
PARTITION = os.environ.get("SSMBENCH_SLURM_PARTITION") or "ssmbench"
ENV = {"SSMBENCH_SLURM_PARTITION": PARTITION}
ON_SLURM = {
    **ENV,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")])),
}
# The ci preset cut to one model: a prefill and a decode cell, one profiled cell and one
# paired cell, so calibrate, verify (s4d and attention), bench, profile, paired, aggregate.
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
TARGET = "results/ci/tables/cells.csv"
# a figure too: its figure_table and figure jobs (papermill) run on the cluster as well
FIGURE = "latency_scaling"
TARGETS = [TARGET, f"figures/ci/{FIGURE}.png"]
# What this cluster differs in from one with slurmdbd: job states come from squeue (kept
# for MinJobAge), and the first status check comes sooner than the plugin's 40 s.  Every
# bench job is marked as a GPU job, which SLURM can place on the fake gres GPU.
CLUSTER_ARGS = [
    "--workflow-profile",
    "profiles/slurm",
    "--slurm-status-command",
    "squeue",
    "--slurm-init-seconds-before-status-checks",
    "2",
    "--set-resources",
    "bench:gpu=1",
]
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
def cluster(request) -> str:
    """A running single-node cluster; its node's name.  Stopped after the module."""
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


def cancel_a_running_bench_job(process: subprocess.Popen, timeout_s: float = 240) -> str:
    """scancel the first bench job seen running; its SLURM job id."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        # %k: the job's comment, which the plugin sets to rule_<rule>_wildcards_<...>
        for job_id, *comment in squeue("-t", "RUNNING", "-o", "%i %k"):
            if comment and comment[0].startswith("rule_bench_"):
                time.sleep(2)  # inside the cell's job, past its start
                subprocess.run(["scancel", job_id], check=True)
                return job_id
        time.sleep(0.5)
    raise AssertionError("no bench job was seen running to cancel")


def sidecars(wf: Path) -> list[dict]:
    """The sidecars of the run's measured records (device, verify, cells, paired, ops)."""
    run = wf / "results" / "ci"
    paths = [p for p in run.rglob("*.prov.json") if "tables" not in p.parts]
    return [json.loads(p.read_text()) for p in paths]


@pytest.fixture(scope="module")
def runs(cluster, pristine_workflow, tmp_path_factory) -> dict:
    """The tiny matrix through SLURM (one bench job cancelled mid-run), then again, and
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
                cancelled = cancel_a_running_bench_job(process)
            except AssertionError as e:
                raise AssertionError(f"{e}; the run said:\n{log.read_text()[-3000:]}") from None
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
        again=again,
        local=local,
    )


def dry_run_jobs(text: str) -> dict[str, list[str]]:
    """A dry run's jobs: rule name -> the text of each of its jobs' blocks."""
    jobs: dict[str, list[str]] = {}
    for block in text.split("\nrule ")[1:]:
        name, _, body = block.partition(":")
        jobs.setdefault(name.strip(), []).append(body.split("\n\n")[0])
    return jobs


def test_the_profile_sizes_each_job(workflow_copy, tmp_path):
    """No cluster needed, only the plugin: a dry run through profiles/slurm gives the
    measuring jobs the run's cores and the preset's memory, the rest one core and 2 GB, all
    on the partition named by SSMBENCH_SLURM_PARTITION."""
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


def test_the_run_completes_through_slurm(runs):
    assert runs["returncode"] == 0, runs["output"][-5000:]
    assert runs["seconds"] < 240, f"the SLURM run took {runs['seconds']:.0f} s"


def test_every_job_ran_as_a_slurm_job_on_the_node(runs):
    found = sidecars(runs["wf"])
    rules = {s["rule"] for s in found}
    assert {"calibrate", "verify", "bench", "paired", "profile"} <= rules
    for sidecar in found:
        assert sidecar["slurm_job_id"] and sidecar["slurm_job_id"].isdigit(), sidecar["output"]
        assert sidecar["node"] == runs["node"], sidecar["output"]
    ids = [s["slurm_job_id"] for s in found if s["rule"] in ("bench", "verify")]
    assert len(set(ids)) == len(ids)  # one job each
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


def test_a_cancelled_job_is_resubmitted(runs):
    cancelled = runs["cancelled"]
    assert "JobState=CANCELLED" in scontrol_job(cancelled)
    assert f"SLURM-job '{cancelled}' failed, SLURM status is: 'CANCELLED'" in runs["output"]
    bench = [s for s in sidecars(runs["wf"]) if s["rule"] == "bench"]
    assert len(bench) == 2 and cancelled not in {s["slurm_job_id"] for s in bench}


def test_the_tables_are_those_of_a_local_run(runs):
    tables = lambda wf: sorted(p.name for p in (wf / "results/ci/tables").iterdir())  # noqa: E731
    assert tables(runs["wf"]) == tables(runs["local"])
    on_slurm = pd.read_csv(runs["wf"] / TARGET).sort_values(KEYS)
    local = pd.read_csv(runs["local"] / TARGET).sort_values(KEYS)
    assert list(on_slurm.columns) == list(local.columns)
    assert on_slurm[KEYS + ["status"]].values.tolist() == local[KEYS + ["status"]].values.tolist()
    assert set(on_slurm.status) == {"ok"}


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
