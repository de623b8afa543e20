"""Shared fixtures: a copy of the workflow in a temporary directory, and a Snakemake runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ssmbench.scripting import copy_workflow

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


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
