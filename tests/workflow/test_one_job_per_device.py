"""One job per GPU on a four-GPU node, rehearsed on a CPU with fake GPUs
(tests/gpufakes.py: the node's GPU list, torch's device query, NVML's lookups).

A small Snakefile of twelve GPU jobs runs with ``--cores 8`` and the global ``gpu``
resource at 4, as ``workflow/rules/common.smk`` sets it on such a node (the first four
jobs wait until four have started, so they run side by side however loaded the machine).
Each job enters ``ssmbench.scripting.logged`` as the workflow's scripts do, so it leases a GPU
(ssmbench.gpulease), then holds it about a second and writes a record naming the GPU
torch says it runs on, the energy NVML read for it, and when it started and ended.  One
job kills itself with SIGKILL while it holds its GPU.  A control run without the lease
shows the overlap the lease prevents, so the check can fail.

No name here says "gpu": a GPU machine's `pytest -k gpu` (scripts/gpu_check.sh) runs the
checks only a GPU can make, not this CPU rehearsal."""

from __future__ import annotations

import json
from pathlib import Path

from ssmbench.devices import Gpu
from tests.conftest import snakemake
from tests.gpufakes import fake_gpus

SNAKEFILE = """
VICTIM = config.get("victim", "")
JOBS = [f"j{i:02d}" for i in range(12) if f"j{i:02d}" != VICTIM]


rule all:
    input:
        expand("records/{job}.json", job=JOBS),
        expand("victim/{job}.json", job=[VICTIM] if VICTIM else []),


rule hold:
    output:
        "records/{job}.json",
    log:
        "logs/{job}.log",
    params:
        lease=config["lease"],
        victim=False,
    resources:
        gpu=1,
    script:
        "job.py"


# the job killed while it holds its device, scheduled first so that later jobs take it
rule victim:
    output:
        "victim/{job}.json",
    log:
        "logs/{job}.log",
    params:
        lease=config["lease"],
        victim=True,
    priority: 50
    resources:
        gpu=1,
    script:
        "job.py"
"""

JOB = """
import contextlib, json, os, signal, sys, time

from ssmbench import devices, gpulease, provenance
from ssmbench.measure.energy import EnergyMeter
from ssmbench.scripting import logged
from tests.gpufakes import FakeNVML, FakeTorch, fake_gpus

node = fake_gpus(4)
devices.gpus = lambda root=None: node  # the node's GPU list: four fake GPUs
job, out = snakemake.wildcards.job, snakemake.output[0]
if not snakemake.params.lease:
    open(snakemake.log[0], "w").close()
with logged(snakemake) if snakemake.params.lease else contextlib.nullcontext():
    start = time.time()
    sys.modules["torch"] = FakeTorch(node)  # the job's CUDA, initialised: its device 0
    gpu = gpulease.gpu_record("cuda")
    os.makedirs("started", exist_ok=True)
    if snakemake.params.victim:
        with open(f"killed-{job}.json", "w") as f:
            json.dump({"job": job, "gpu": gpu, "start": start, "end": time.time()}, f)
        os.kill(os.getpid(), signal.SIGKILL)
    open(f"started/{job}", "w").close()  # the victim, dead, is not one of the four
    meter = EnergyMeter("cuda", nvml=FakeNVML(node)).start()
    time.sleep(1.0)
    # the first four jobs hold on until four have started, so they are side by side
    # however slowly a loaded machine starts them (Snakemake runs four at a time)
    while len(os.listdir("started")) < 4 and time.time() < start + 600:
        time.sleep(0.1)
    energy = meter.stop()
    record = {
        "job": job,
        "gpu": gpu,
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "energy_j": energy.energy_j,
        "start": start,
        "end": time.time(),
    }
    with open(out, "w") as f:
        json.dump(record, f)
    provenance.write_sidecars([out], rule="hold", wildcards={"job": job})
"""

VICTIM = "j05"


def run(wf: Path, name: str, lease: bool) -> tuple[Path, object]:
    """Run the twelve jobs in a folder of their own under the workflow copy ``wf``."""
    folder = wf / name
    folder.mkdir()
    (folder / "Snakefile").write_text(SNAKEFILE)
    (folder / "job.py").write_text(JOB)
    out = snakemake(
        folder, "--cores", "8", "--resources", "gpu=4", "--keep-going",
        "--config", f"lease={int(lease)}", *([f"victim={VICTIM}"] if lease else []),
        env={
            "PYTHONPATH": f"{wf / 'src'}:{wf}",
            "SSMBENCH_GPU_LOCKS": str(folder / "locks"),
            "CUDA_VISIBLE_DEVICES": "0,1,2,3",  # what a four-GPU node allows
            "SLURM_JOB_GPUS": "",
            "SLURM_STEP_GPUS": "",
        },
        timeout=900,
    )  # fmt: skip
    return folder, out


def records(folder: Path) -> list[dict]:
    found = sorted((folder / "records").glob("j??.json"))  # not their sidecars
    return [json.loads(p.read_text()) for p in found]


def trace(spans: list[dict]) -> str:
    """Which job ran on which GPU when (seconds from the first start), for a failure."""
    t0 = min(s["start"] for s in spans)
    return "\n".join(
        f"{s['job']} GPU {s['gpu']['index']} {s['start'] - t0:6.2f}-{s['end'] - t0:6.2f} s"
        for s in sorted(spans, key=lambda s: s["start"])
    )


def side_by_side(spans: list[dict]) -> list[tuple[str, str]]:
    """The pairs of jobs that held one GPU at the same time."""
    return [
        (a["job"], b["job"])
        for i, a in enumerate(spans)
        for b in spans[i + 1 :]
        if a["gpu"]["index"] == b["gpu"]["index"]
        and a["start"] < b["end"]
        and b["start"] < a["end"]
    ]


def most_at_once(spans: list[dict]) -> int:
    return max(sum(s["start"] <= t["start"] < s["end"] for s in spans) for t in spans)


def test_each_job_holds_its_own_device_and_a_killed_job_frees_it(workflow_copy):
    node = fake_gpus(4)
    folder, out = run(workflow_copy, "leased", lease=True)
    assert out.returncode != 0  # the victim failed; --keep-going ran the others
    done = records(folder)
    killed = json.loads((folder / f"killed-{VICTIM}.json").read_text())
    spans = done + [killed]
    assert sorted(r["job"] for r in done) == sorted(f"j{i:02d}" for i in range(12) if i != 5)
    assert side_by_side(spans) == [], trace(spans)
    assert most_at_once(spans) >= 2, trace(spans)  # they ran side by side, on different GPUs
    assert {s["gpu"]["index"] for s in spans} == {0, 1, 2, 3}, trace(spans)
    for record in done:
        gpu = Gpu(**record["gpu"])
        assert gpu == node[gpu.index]  # index, UUID, PCI bus id and name, from torch
        assert record["visible"] == gpu.uuid  # what the lease gave CUDA
        assert record["energy_j"] == gpu.index + 1  # NVML read that GPU, by UUID
        sidecar = json.loads((folder / "records" / f"{record['job']}.json.prov.json").read_text())
        assert sidecar["device"]["gpu"] == record["gpu"]
    # the victim's GPU went to a job that started after it died
    after = [r for r in done if r["gpu"] == killed["gpu"] and r["start"] > killed["end"]]
    assert after, trace(spans)
    log = (folder / "logs" / f"{VICTIM}.log").read_text()
    assert f"GPU lease: GPU {killed['gpu']['index']} (Fake GPU, " in log


def test_without_the_lease_the_jobs_pile_onto_one_device(workflow_copy):
    """The control: the same jobs with the same resource, no lease; every one opens CUDA's
    device 0, the node's first GPU, and they overlap there."""
    folder, out = run(workflow_copy, "control", lease=False)
    assert out.returncode == 0, out.stderr[-3000:]
    spans = records(folder)
    assert len(spans) == 12
    assert {s["gpu"]["index"] for s in spans} == {0}
    assert side_by_side(spans) != [], trace(spans)
