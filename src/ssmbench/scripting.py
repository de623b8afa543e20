"""Helpers for the thin ``scripts/`` that Snakemake's ``script:`` directive runs."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
from pathlib import Path

from ssmbench import gpulease
from ssmbench.paths import REPO

# What a clean clone holds: everything but environments and generated files.
NOT_IN_A_CLONE = (
    ".venv*",
    ".git",
    ".snakemake",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    "*.egg-info",
)


@contextlib.contextmanager
def logged(snakemake):
    """Send the job's stdout, stderr and ``logging`` output to its ``log:`` file, and
    hold a GPU of the node for the job's life when it holds Snakemake's ``gpu``
    resource (:mod:`ssmbench.gpulease`; the log names the device): the one its
    ``lease_gpu`` param names (:func:`wanted_gpu`), else the first free one.

    An exception is written to the log too, then re-raised so the job fails."""
    path = snakemake.log[0]
    with open(path, "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        logging.basicConfig(
            stream=log,
            level=logging.INFO,
            force=True,
            format="%(asctime)s %(levelname)s %(message)s",
        )
        lease = None
        try:
            if gpus_held(snakemake):
                lease = gpulease.acquire(wanted=wanted_gpu(snakemake))
                print(f"GPU lease: {describe(lease)}", flush=True)  # a killed job's log too
            yield
        except BaseException:
            import traceback

            traceback.print_exc(file=log)
            log.flush()
            print(f"error: see {path}", file=sys.__stderr__)
            raise
        finally:
            if lease is not None:
                lease.release()


def gpus_held(snakemake) -> int:
    """How many of Snakemake's global ``gpu`` resource a job holds (0 where it names none)."""
    try:
        return int(getattr(snakemake.resources, "gpu", 0) or 0)
    except (AttributeError, TypeError, ValueError):
        return 0


def wanted_gpu(snakemake) -> str | None:
    """The GPU a job must lease, by its :attr:`ssmbench.devices.Gpu.key` (its ``lease_gpu``
    param: a per-device calibration), or None where any free GPU will do."""
    try:
        return str(getattr(snakemake.params, "lease_gpu", "") or "") or None
    except (AttributeError, TypeError):
        return None


def describe(lease: gpulease.Lease) -> str:
    """A lease in words, for the job's log."""
    gpu = lease.gpu
    if gpu is None:
        return f"none ({lease.note}); CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}"
    return (
        f"GPU {gpu.index} ({gpu.name}, {gpu.uuid or 'uuid unknown'}, PCI {gpu.pci_bus_id}), "
        f"lock {lease.path}, CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}"
    )


# folders a run writes at the repository's root (git-ignored there: /figures/, /logs/)
OUTPUTS_AT_THE_ROOT = ("figures", "logs")


def copy_workflow(dest: Path, precollected: bool = True) -> Path:
    """Copy the repository to ``dest`` as a clean clone would hold it; of ``results/`` only
    ``results/precollected/`` is kept, and only when ``precollected`` is true."""
    anywhere = shutil.ignore_patterns(*NOT_IN_A_CLONE)

    def ignore(folder: str, names: list[str]) -> set[str]:
        ignored = set(anywhere(folder, names))
        if Path(folder) == REPO:  # a run's outputs, not the package's figures/ module
            ignored |= {n for n in names if n in OUTPUTS_AT_THE_ROOT}
        return ignored

    shutil.copytree(REPO, dest, ignore=ignore)
    results = Path(dest) / "results"
    for child in results.iterdir() if results.is_dir() else []:
        if child.name != "precollected" or not precollected:
            shutil.rmtree(child)
    return Path(dest)


def positive_int(text: str) -> int:
    """An argparse ``type``: a positive integer, or a usage error that names the value."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """An argparse ``type``: a number >= 0, or a usage error that names the value."""
    value = float(text)
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def group_of(workflow, group: str) -> str | None:
    """A rule's ``group:`` for a workflow run on a cluster: ``group`` when the run sizes
    it (``--group-components <group>=<n>``), else none (a local run ignores groups, but
    its dry run would show one per job).

    Inside an allocation running a group (``--local-groupid`` given), Snakemake's SLURM
    plugin passes no group arguments on, so its invocation there would start each job as
    a job step of its own (an ``srun`` and a Snakemake each, about 2 s); told the group
    takes every job it is given, it starts them all in one."""
    settings = workflow.group_settings
    if settings.local_groupid != "local" and group not in settings.group_components:
        settings.group_components = {**settings.group_components, group: sys.maxsize}
    return group if group in settings.group_components else None
