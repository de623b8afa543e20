"""Provenance sidecars: ``<output>.prov.json`` beside every file the workflow writes.

One helper, :func:`write_sidecars`, called by every script (docs/ARCHITECTURE.md, "Provenance").  A
sidecar records the rule, its wildcards and params, the command line, sha256 of inputs and
outputs, the git commit and whether the tracked tree was clean, package versions, device,
seed, host, the node and SLURM job id (:func:`where_it_ran`) and start/end times.  Nothing
here imports torch: versions come from package metadata, and device details from torch only
when the caller has imported it already.

The sidecars are checked, not only written: :func:`check` compares a file's bytes with its
sidecar, and :func:`verify_run` checks a shipped run (``results/precollected/<run>/``)
file by file against the sidecars and the run's manifest, ``MANIFEST.sha256``
(:func:`write_manifest`), whose own sha256 the run's figures record.
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
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ssmbench.gpulease import current_gpu
from ssmbench.paths import PROV_SUFFIX, REPO, prov
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
    """CPU model always; CUDA device, CUDA and driver versions when torch is already loaded;
    ``gpu``, the physical GPU the job ran on (index in PCI bus order, UUID, PCI bus id,
    name: :func:`ssmbench.gpulease.current_gpu`), or None."""
    info = {"cpu": cpu_model(), "cuda_device": None, "cuda": None, "driver": None, "gpu": None}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    gpu = current_gpu()
    info["gpu"] = gpu.to_dict() if gpu is not None else None
    try:
        first = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
        info["driver"] = first.split("Kernel Module")[-1].split()[0]
    except (OSError, IndexError):
        pass
    return info


def where_it_ran() -> dict:
    """The node a job ran on and its SLURM job id (None outside a SLURM job): SLURM's own
    name for the node (``SLURMD_NODENAME``) where it gives one, else the hostname.  Both
    are read from the job's environment, which slurmd sets and the executor passes on to
    the job step."""
    return {
        "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }


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
        **where_it_ran(),
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


@dataclass(frozen=True)
class Mismatch:
    """One file whose bytes are not those that ``against`` (its sidecar, or a run's
    manifest) records: ``expected`` is None where it records none, ``found`` None where the
    file is absent."""

    path: str
    expected: str | None
    found: str | None
    against: str

    def __str__(self) -> str:
        return (
            f"{self.path}: expected sha256 {self.expected or 'none'} ({self.against}), "
            f"found {self.found or 'no file'}"
        )


class ProvenanceError(ValueError):
    """Files that their provenance does not vouch for, each named with the sha256 expected
    and the one found (``mismatches``; ``path``, ``expected`` and ``found`` are the first's)."""

    SHOWN = 20  # mismatches the message lists; a botched copy can have hundreds

    def __init__(self, mismatches: list[Mismatch], message: str | None = None):
        self.mismatches = list(mismatches)
        if message is None:
            lines = [str(m) for m in self.mismatches[: self.SHOWN]]
            if len(self.mismatches) > self.SHOWN:
                lines.append(f"... and {len(self.mismatches) - self.SHOWN} more")
            message = "\n".join(lines)
        super().__init__(message)

    @property
    def path(self) -> str | None:
        return self.mismatches[0].path if self.mismatches else None

    @property
    def expected(self) -> str | None:
        return self.mismatches[0].expected if self.mismatches else None

    @property
    def found(self) -> str | None:
        return self.mismatches[0].found if self.mismatches else None


def _recorded(path: Path, sidecar: Path) -> str | None:
    """The sha256 that ``sidecar`` records for ``path``: the digest of the file it names as
    its ``output`` (where the job wrote it, which a shipped copy keeps), else of the entry
    that resolves to ``path``; OSError or ValueError when the sidecar cannot be read."""
    data = json.loads(sidecar.read_text())
    outputs = data.get("outputs") if isinstance(data, dict) else None
    if not isinstance(outputs, dict):
        raise ValueError("no outputs")
    if data.get("output") in outputs:
        if not names(data["output"], path):
            raise ValueError(f"it names another file as its output: {data['output']}")
        return outputs[data["output"]]
    return {str(Path(p).resolve()): d for p, d in outputs.items()}.get(str(path.resolve()))


def names(output: str, path: Path) -> bool:
    """Whether a sidecar's ``output`` is ``path``: the same file, the file at that path
    under any workflow root (a sidecar names its output relative to the root it ran in),
    or its shipped copy (a run's ``results/<run>/<rel>`` kept as
    ``<precollected>/<run>/<rel>``: the run and the path inside it must match)."""
    out = Path(output)
    if out.resolve() == path.resolve():
        return True
    if out.is_absolute():
        return False
    # relative to the workflow's root, which need not be the working directory
    if len(out.parts) >= 3 and out.parts[0] == "results":
        out = Path(*out.parts[1:])
    return path.absolute().as_posix().endswith("/" + out.as_posix())


def _sidecar_mismatch(path: Path, found: str | None = None) -> Mismatch | None:
    """None when ``path``'s sidecar records its bytes (``found``: their sha256, if known)."""
    sidecar = Path(prov(str(path)))
    if found is None and path.is_file():
        found = sha256(path)
    try:
        expected, against = _recorded(path, sidecar), f"sidecar {sidecar}"
    except FileNotFoundError:
        expected, against = None, f"no sidecar {sidecar}"
    except (OSError, ValueError, TypeError) as e:
        expected, against = None, f"sidecar {sidecar} unreadable: {e}"
    if found is not None and found == expected:
        return None
    return Mismatch(str(path), expected, found, against)


def check(path: str | os.PathLike) -> None:
    """Raise :class:`ProvenanceError` (naming ``path``, the sha256 its sidecar records and
    the one found) unless ``path`` exists and its sidecar records its exact bytes."""
    mismatch = _sidecar_mismatch(Path(path))
    if mismatch is not None:
        raise ProvenanceError([mismatch])


def check_all(paths: list[str | os.PathLike]) -> None:
    """:func:`check` of every one of ``paths``; one :class:`ProvenanceError` names them all."""
    mismatches = [m for p in paths if (m := _sidecar_mismatch(Path(p))) is not None]
    if mismatches:
        raise ProvenanceError(mismatches)


def vouched(path: str | os.PathLike) -> bool:
    """Whether ``path`` exists and its sidecar, written after it was complete, records its
    exact bytes: an output without one (its job was killed or is still running) or changed
    since does not count as finished."""
    return _sidecar_mismatch(Path(path)) is None


# A shipped run's manifest: every file of the run folder but itself, one line each in
# sha256sum's format (`sha256sum -c MANIFEST.sha256` in the folder checks it too).
MANIFEST = "MANIFEST.sha256"


def hash_tree(run_dir: str | os.PathLike) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``run_dir`` but its manifest."""
    root = Path(run_dir)
    found = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            rel = (Path(dirpath) / name).relative_to(root).as_posix()
            if rel != MANIFEST:
                found[rel] = sha256(root / rel)
    return dict(sorted(found.items()))


def write_manifest(run_dir: str | os.PathLike, vouch: bool = True) -> Path:
    """Write ``<run_dir>/MANIFEST.sha256`` from the files there now; return its path.

    With ``vouch`` (shipping a run) every file but a sidecar must match its sidecar first
    (:class:`ProvenanceError` otherwise): a manifest never blesses a file its provenance
    does not vouch for.  A lease's packing (``ssmbench.pack``) records what it has."""
    root = Path(run_dir)
    digests = hash_tree(root)
    if vouch:
        mismatches = [
            m
            for rel, digest in digests.items()
            if not rel.endswith(PROV_SUFFIX)
            and (m := _sidecar_mismatch(root / rel, digest)) is not None
        ]
        if mismatches:
            raise ProvenanceError(mismatches)
    manifest = root / MANIFEST
    tmp = manifest.with_name(manifest.name + ".tmp")
    tmp.write_text("".join(f"{digest}  {rel}\n" for rel, digest in digests.items()))
    os.replace(tmp, manifest)
    return manifest


def read_manifest(manifest: str | os.PathLike) -> dict[str, str]:
    """``{relative path: sha256}`` as ``manifest`` lists them (ValueError naming a bad line)."""
    listed = {}
    for n, line in enumerate(Path(manifest).read_text().splitlines(), 1):
        digest, sep, rel = line.partition("  ")
        if not (sep and rel and re.fullmatch(r"[0-9a-f]{64}", digest)):
            raise ValueError(f"{manifest}:{n}: not '<sha256>  <path>': {line!r}")
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ValueError(
                f"{manifest}:{n}: path {rel!r} leaves the run folder (a manifest lists the "
                "run's own files, by their paths inside it)"
            )
        listed[rel] = digest
    return listed


def verify_run(run_dir: str | os.PathLike) -> str:
    """Check a shipped run: every file's sha256 against the run's manifest (a file it does
    not list, or lists but is absent, is a mismatch too) and, but for the sidecars
    themselves, against its sidecar.  Return the manifest's own sha256; raise
    :class:`ProvenanceError` naming every mismatch."""
    root = Path(run_dir)
    manifest = root / MANIFEST
    if not manifest.is_file():
        raise ProvenanceError(
            [],
            f"{manifest}: no manifest, so nothing vouches for the run's files "
            "(python -m ssmbench manifest DIR writes one from files their sidecars vouch for)",
        )
    try:
        listed = read_manifest(manifest)
    except (OSError, ValueError) as e:
        raise ProvenanceError([], str(e)) from None
    present = hash_tree(root)
    mismatches = []
    for rel in sorted(listed.keys() | present.keys()):
        expected, found = listed.get(rel), present.get(rel)
        if expected != found:
            against = str(manifest) if rel in listed else f"not listed in {manifest}"
            mismatches.append(Mismatch(str(root / rel), expected, found, against))
        if found is not None and not rel.endswith(PROV_SUFFIX):
            mismatch = _sidecar_mismatch(root / rel, found)
            if mismatch is not None:
                mismatches.append(mismatch)
    if mismatches:
        raise ProvenanceError(mismatches)
    return sha256(manifest)


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
