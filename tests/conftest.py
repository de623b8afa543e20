"""Shared fixtures: a copy of the workflow in a temporary directory, a Snakemake runner, one
torch thread, and where the seed studies' published data lives."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ssmbench.config import REPO
from ssmbench.scripting import copy_workflow

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
# The seed studies' published data: ../shared/anchors beside the repository, or
# SSMBENCH_ANCHORS.  Tests that need it skip, naming this path, where it is absent.
ANCHORS = Path(os.environ.get("SSMBENCH_ANCHORS") or REPO.parent / "shared" / "anchors")


@pytest.fixture
def one_thread():
    """torch on one thread, seeded, for the test (restored after)."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(saved)


def snakemake(workdir: Path, *args: str, env: dict | None = None, timeout: int = 900):
    """Run Snakemake in ``workdir``; return the CompletedProcess (never raises on failure)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [SNAKEMAKE, "--cores", "2", *args],
        cwd=workdir,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def workflow_copy(tmp_path: Path) -> Path:
    return copy_workflow(tmp_path / "wf")


@pytest.fixture(scope="session")
def ci_run(tmp_path_factory) -> Path:
    """One finished `ci` run in a temporary copy of the workflow, shared by every slow test
    that reads a run (the workflow, the report)."""
    wf = copy_workflow(tmp_path_factory.mktemp("ci") / "wf")
    out = snakemake(wf, "--config", "preset=ci")
    assert out.returncode == 0, f"snakemake failed:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}"
    return wf
