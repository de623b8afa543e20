"""Per-device calibration on a node of two kinds of GPU, rehearsed on a CPU with fake GPUs
(tests/gpufakes.py: two H100s and two A100s).

Every Python process of the run (Snakemake's, each job's, each script's) starts with a
``sitecustomize`` that replaces the node's GPU list (``ssmbench.devices.gpus``) with the
four fakes, so the plan, the ``gpu`` resource and the lease all see that node.  The cuda
preset's plan then has one calibration per GPU, and each ``calibrate_gpu`` job leases the
GPU it is named after.  There is no CUDA here, so each record is ``unavailable``, but it
names the GPU its job held, which is what a cell's record is joined by
(``ssmbench.records.ceilings_for``); the measuring itself is exercised on the CPU by
tests/measure/test_ceilings.py.

No name here says "gpu": a GPU machine's `pytest -k gpu` (scripts/gpu_check.sh) runs the
checks only a GPU can make, not this CPU rehearsal."""

from __future__ import annotations

import json

import yaml

from ssmbench import paths, records
from tests.conftest import snakemake, succeeded
from tests.gpufakes import MIXED, fake_gpus

RUN = "mixed-node"
PRESET = {
    "device": "cuda",
    "calibrate_quick": True,
    "size": {"d_model": 32, "n_layers": 1, "n_heads": 2, "head_dim": 16, "expand": 2,
             "d_conv": 4, "chunk": 16},
    "timing": {"warmup": 1, "min_samples": 3, "max_samples": 5, "min_time_s": 0.0,
               "max_time_s": 1.0, "timeout_s": 30},
    "sweeps": [  # the cells every figure of the config needs; only calibrated here
        {"models": ["attention", "mamba2"], "backends": ["torch"], "phases": ["prefill"],
         "batch": [1], "seq_len": [32], "d_state": [4], "dtype": ["bf16"], "profile": True},
        {"models": ["mamba2"], "backends": ["torch", "torch-graph"], "phases": ["decode"],
         "batch": [1], "seq_len": [32], "d_state": [4], "dtype": ["bf16"]},
    ],
}  # fmt: skip
# imported by every Python process of the run before anything else: the node's GPUs
SITECUSTOMIZE = """
from ssmbench import devices
from tests.gpufakes import MIXED, fake_gpus

_NODE = fake_gpus(4, MIXED)
devices.gpus = lambda root=None: _NODE
"""


def test_a_node_of_two_kinds_is_calibrated_device_by_device(workflow_copy, tmp_path):
    node = fake_gpus(4, MIXED)
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SITECUSTOMIZE)
    overlay = tmp_path / "preset.yaml"
    overlay.write_text(yaml.safe_dump({"presets": {RUN: PRESET}}))
    targets = [paths.device_gpu(RUN, gpu.uuid) for gpu in node]
    out = snakemake(
        workflow_copy, *targets, "--cores", "4", "--configfile", str(overlay),
        "--config", f"preset={RUN}",
        env={
            "PYTHONPATH": f"{shim}:{workflow_copy / 'src'}:{workflow_copy}",
            "SSMBENCH_GPU_LOCKS": str(tmp_path / "locks"),
            "CUDA_VISIBLE_DEVICES": "0,1,2,3",  # all four, in PCI bus order
            "SLURM_JOB_GPUS": "",
            "SLURM_STEP_GPUS": "",
        },
        timeout=600,
    )  # fmt: skip
    succeeded(out)
    assert not (workflow_copy / paths.device(RUN)).exists()  # no run-wide calibration
    calibrations = [records.read_device(workflow_copy / target) for target in targets]
    for gpu, calibration, target in zip(node, calibrations, targets, strict=True):
        # each job held the GPU it is named after (no CUDA here: unavailable, but named)
        assert calibration["gpu"] == gpu.to_dict(), target
        assert calibration["status"] == "unavailable"
        sidecar = json.loads((workflow_copy / paths.prov(target)).read_text())
        assert sidecar["device"]["gpu"] == gpu.to_dict()
        log = (workflow_copy / f"logs/{RUN}/calibrate/{gpu.uuid}.log").read_text()
        assert f"GPU lease: GPU {gpu.index} ({gpu.name}, {gpu.uuid}," in log
    assert {c["gpu"]["name"] for c in calibrations} == set(MIXED)
    # a cell's record names the GPU it ran on: it is joined to that GPU's calibration
    for gpu, calibration in zip(node, calibrations, strict=True):
        assert records.ceilings_for(gpu.to_dict(), calibrations[::-1]) is calibration
