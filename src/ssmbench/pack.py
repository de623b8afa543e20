"""Pack what a run made into a few files that any transfer takes home.

A lent machine gives back a handful of files of bounded size from one flat folder (this
project's GPU leases: at most 8 files of at most 16 MiB each, no deeper than two folders),
so ``scripts/gpu_check.sh`` ends with :func:`pack`.  What goes, most important first:

1. ``cells.csv`` (the run's cells table, also inside the archive) and the script's log;
2. ``ssmbench-<run>.tar.gz``: the run's tables, records, verify and prewarm records,
   calibrations (device.json, or devices/<gpu>.json per GPU), operator profiles, every
   provenance sidecar, the run's manifest (``results/<run>/MANIFEST.sha256``: every file
   of the run folder with its sha256, traces included, written here:
   ``ssmbench.provenance.write_manifest``), the job logs, then the figures (PNG, then PDF
   and the executed notebooks);
3. ``traces-<run>.tar.gz``: the gzipped Chrome traces of the operator profiles.

An archive over the size limit is cut into ``.partNN`` pieces (``cat`` them back together
before ``tar xzf``).  When the pieces would exceed the file count, the least important
members are left out (traces first, then figures) and ``manifest.txt`` says what was
left out and why; it also lists every file sent with its size and sha256.
"""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from ssmbench.provenance import sha256, write_manifest

MAX_FILES = 8
MAX_BYTES = 16 << 20
MANIFEST = "manifest.txt"
ARCHIVE_SUFFIXES = tuple([".tar.gz"] + [f".part{i:02d}" for i in range(MAX_FILES)])


@dataclass
class Packed:
    files: list[Path] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


def _members(root: Path, run: str) -> dict[str, list[str]]:
    """The run's files by group, most important first, as paths relative to ``root``."""

    def walk(top: str, keep=lambda p: True) -> list[str]:
        base = root / top
        if not base.is_dir():
            return []
        found = []
        for dirpath, _, names in os.walk(base):
            for name in sorted(names):
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                if keep(rel):
                    found.append(rel)
        return sorted(found)

    def is_trace(p: str) -> bool:  # its sidecar stays with the results: small, and vouches
        return p.endswith(".trace.json.gz")

    figures = walk(f"figures/{run}")
    return {
        "results": walk(f"results/{run}", lambda p: not is_trace(p)),
        "logs": walk(f"logs/{run}"),
        "figures-png": [p for p in figures if ".png" in p],
        "figures-other": [p for p in figures if ".png" not in p],
        "traces": walk(f"results/{run}", is_trace),
    }


def _tar(path: Path, root: Path, members: list[str]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for rel in members:
            tar.add(root / rel, arcname=rel, recursive=False)
    os.replace(tmp, path)


def _split(path: Path, max_bytes: int) -> list[Path]:
    """``path`` itself when small enough, else its ``.partNN`` pieces (path removed)."""
    size = path.stat().st_size
    if size <= max_bytes:
        return [path]
    pieces = []
    with open(path, "rb") as f:
        for i in range((size + max_bytes - 1) // max_bytes):
            piece = path.with_name(f"{path.name}.part{i:02d}")
            piece.write_bytes(f.read(max_bytes))
            pieces.append(piece)
    path.unlink()
    return pieces


def pack(
    dest: str | os.PathLike,
    run: str,
    root: str | os.PathLike = ".",
    extra: list[str | os.PathLike] = (),
    max_files: int = MAX_FILES,
    max_bytes: int = MAX_BYTES,
) -> Packed:
    """Write the run's archives into ``dest`` (flat) beside the ``extra`` files already
    there or copied in (the log, the summary), and ``manifest.txt``; never more than
    ``max_files`` files of ``max_bytes`` each, the manifest included."""
    dest, root = Path(dest), Path(root)
    dest.mkdir(parents=True, exist_ok=True)
    packed = Packed()
    for item in extra:
        src = Path(item)
        if not src.is_file():
            continue
        target = dest / src.name
        if src.resolve() != target.resolve():
            target.write_bytes(src.read_bytes())
        if target.stat().st_size > max_bytes:  # a log that grew too long: keep its end
            data = target.read_bytes()[-max_bytes + 200 :]
            target.write_bytes(b"[... cut to its last bytes ...]\n" + data)
        packed.files.append(target)

    # What the machine had, unchecked: a lease's transfer never fails on a file without a
    # sidecar; shipping the run (results/precollected/) checks them (verify_run).
    if (root / "results" / run).is_dir():
        write_manifest(root / "results" / run, vouch=False)
    groups = _members(root, run)
    budget = max_files - len(packed.files) - 1  # the manifest is one
    main_groups = ["results", "logs", "figures-png", "figures-other"]
    archives = [
        (dest / f"ssmbench-{run}.tar.gz", main_groups),
        (dest / f"traces-{run}.tar.gz", ["traces"]),
    ]
    for path, names in archives:
        names = [n for n in names if groups[n]]
        while names:
            members = [m for n in names for m in groups[n]]
            _tar(path, root, members)
            pieces = _split(path, max_bytes)
            if len(pieces) <= budget:
                packed.files += pieces
                budget -= len(pieces)
                break
            for piece in pieces:
                piece.unlink()
            dropped = names.pop()  # the least important group of this archive
            packed.left_out.append(
                f"{dropped} ({len(groups[dropped])} files): over the limit of {max_files} "
                f"files of {max_bytes >> 20} MiB"
            )

    lines = [f"run {run}: {len(packed.files) + 1} files (at most {max_files})"]
    for f in packed.files:  # the copied files (the log) may still grow: no digest
        digest = f"  sha256 {sha256(f)}" if f.name.endswith(ARCHIVE_SUFFIXES) else ""
        lines.append(f"{f.name}  {f.stat().st_size} bytes{digest}")
    if any(".part" in f.name for f in packed.files):
        lines.append("pieces: cat NAME.tar.gz.part* > NAME.tar.gz, then tar xzf NAME.tar.gz")
    for note in packed.left_out:
        lines.append(f"left out: {note}")
    manifest = dest / MANIFEST
    manifest.write_text("\n".join(lines) + "\n")
    packed.files.append(manifest)
    return packed
