"""Provenance sidecars: ``<output>.prov.json`` beside every file the workflow writes.

One helper, :func:`write_sidecars`, called by every script (docs/ARCHITECTURE.md, "Provenance").  A
sidecar records the rule, its wildcards and params, the command line, sha256 of inputs and
outputs, the git commit and whether the tracked tree was clean, package versions, device,
seed, host and start/end times.  Nothing here imports torch: versions come from package
metadata, and device details from torch only when the caller has imported it already.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from ssmbench.config import REPO
from ssmbench.paths import prov
from ssmbench.records import write_json_atomic

PACKAGES = (
    "ssmbench",
    "torch",
    "triton",
    "numpy",
    "pandas",
    "matplotlib",
    "snakemake",
    "papermill",
    "mamba_ssm",
    "fla-core",
    "flash_attn",
    "nvidia-ml-py",
)


def now() -> str:
    """The current UTC time in ISO 8601, to the millisecond."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@functools.cache
def git_state(repo: Path = REPO) -> dict:
    """``{"commit": sha or "", "clean": bool or None}``; clean ignores untracked files."""

    def git(*args: str) -> str:
        out = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30
        )
        if out.returncode != 0:
            raise OSError(out.stderr.strip())
        return out.stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        clean = git("status", "--porcelain", "--untracked-files=no") == ""
    except (OSError, subprocess.SubprocessError):
        return {"commit": "", "clean": None}
    return {"commit": commit, "clean": clean}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def package_versions() -> dict:
    """Versions of :data:`PACKAGES` (None when absent), read from the ``*.dist-info``
    folder names on ``sys.path``: a directory listing, not a parse of every METADATA file
    (which costs a job a fifth of a second)."""
    found: dict[str, str] = {}
    for entry in sys.path:
        if not os.path.isdir(entry):
            continue
        for info in Path(entry).glob("*.dist-info"):
            name, _, version = info.name.removesuffix(".dist-info").partition("-")
            found.setdefault(_canonical(name), version)
    versions = {"python": platform.python_version()}
    versions.update({name: found.get(_canonical(name)) for name in PACKAGES})
    return versions


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info() -> dict:
    """CPU model always; CUDA device, CUDA and driver versions when torch is already loaded."""
    info = {"cpu": cpu_model(), "cuda_device": None, "cuda": None, "driver": None}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    try:
        first = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
        info["driver"] = first.split("Kernel Module")[-1].split()[0]
    except (OSError, IndexError):
        pass
    return info


def write_sidecars(
    outputs: list[str],
    *,
    rule: str,
    inputs: list[str] = (),
    wildcards: dict | None = None,
    params: dict | None = None,
    seed: int | None = None,
    started: str | None = None,
    extra: dict | None = None,
) -> list[str]:
    """Write ``<output>.prov.json`` for each of ``outputs``; return the sidecar paths.

    Call it after the outputs are complete; ``started`` is when the work began (:func:`now`).
    """
    ended = now()
    common = {
        "rule": rule,
        "wildcards": dict(wildcards or {}),
        "params": params or {},
        "command": sys.argv,
        "inputs": {str(p): sha256(p) for p in inputs},
        "outputs": {str(p): sha256(p) for p in outputs},
        "git": git_state(),
        "packages": package_versions(),
        "device": device_info(),
        "seed": seed,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "started": started or ended,
        "ended": ended,
        **(extra or {}),
    }
    sidecars = []
    for path in outputs:
        sidecar = prov(str(path))
        write_json_atomic(sidecar, {"output": str(path), **common})
        sidecars.append(sidecar)
    return sidecars


def vouched(path: str | os.PathLike) -> bool:
    """Whether ``path`` exists and its sidecar, written after it was complete, records its
    exact bytes: an output without one (its job was killed or is still running) or changed
    since does not count as finished."""
    path = Path(path)
    sidecar = Path(prov(str(path)))
    if not (path.is_file() and sidecar.is_file()):
        return False
    try:
        outputs = json.loads(sidecar.read_text())["outputs"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if not isinstance(outputs, dict):
        return False
    recorded = {str(Path(p).resolve()): digest for p, digest in outputs.items()}
    return recorded.get(str(path.resolve())) == sha256(path)


def from_snakemake(snakemake, outputs: list[str] | None = None, **kwargs) -> list[str]:
    """:func:`write_sidecars` for a Snakemake ``script:`` job: rule, inputs, wildcards and
    params come from the ``snakemake`` object; sidecars that are themselves declared
    outputs are skipped as outputs."""
    if outputs is None:
        outputs = [p for p in snakemake.output if not str(p).endswith(".prov.json")]
    params = {k: v for k, v in snakemake.params.items()}
    return write_sidecars(
        [str(p) for p in outputs],
        rule=snakemake.rule,
        inputs=[str(p) for p in snakemake.input],
        wildcards=dict(snakemake.wildcards.items()),
        params=params,
        **kwargs,
    )
