"""Shared fixtures: a copy of the workflow in a temporary directory, and a Snakemake runner."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
# What a clean clone has: everything but environments and generated files.
IGNORE = shutil.ignore_patterns(".venv*", ".git", "figures", "logs", ".snakemake", "__pycache__",
                                ".pytest_cache", ".ruff_cache", "*.egg-info")  # fmt: skip


def copy_workflow(dest: Path, precollected: bool = True) -> Path:
    """Copy the repository's tracked layout to ``dest`` (results: only precollected)."""
    shutil.copytree(REPO, dest, ignore=IGNORE)
    results = dest / "results"
    for child in results.iterdir() if results.is_dir() else []:
        if child.name != "precollected" or not precollected:
            shutil.rmtree(child)
    return dest


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
