"""Where SSM-Scope's published data lies in a clone of it, per run, and on what hardware
it was measured: torch-free and pandas-free, so the plan checks a clone (config key
``import_ssm_scope``) before any job, and the workflow names the runs it imports, from
this one list (:mod:`ssmbench.importers.ssm_scope` reads the files)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Run:
    """Where one run's files lie under the clone's root, and the hardware it ran on."""

    device_name: str
    profiles: str
    memory: str
    generation: str | None = None


RUNS = {
    "ssm-scope-rtx4090": Run(
        device_name="NVIDIA GeForce RTX 4090",
        profiles="profile_data",
        memory="ispass_ae/notebooks/memory_footprints.csv",
        generation="ispass_ae/notebooks/generation_times.csv",
    ),
    "ssm-scope-jetson": Run(
        device_name="NVIDIA Jetson Orin Nano (8 GB)",
        profiles="profile_data_jetson",
        memory="ispass_ae/notebooks/memory_footprints_jetson.csv",
    ),
}


def required_files() -> list[str]:
    """The files (relative to the clone) without which an import fails: each run's
    memory table and, where it has one, its generation-time table."""
    return [f for run in RUNS.values() for f in (run.memory, run.generation) if f]
