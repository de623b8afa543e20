"""Wheels for a GPU machine without internet: what `make wheels` puts in ``.whl/`` and how
that is checked before it travels.

The machine (CPython 3.12, x86-64, its own torch) is described once, in
``config/device-packages.txt``.  :func:`build_wheels` downloads the wheels of the workflow's
needs (pyproject's dependencies and the ``fused`` extra, at requirements.lock's versions, the
machine's own packages at the machine's versions) with their dependencies, builds mamba_ssm
without its CUDA extension, and deletes the wheels of what the machine has.
``scripts/offline_install.sh`` then installs every wheel with ``--no-deps``: the closure is
resolved here, never there.

:func:`check` proves the closure here: ``pip install --dry-run --no-index --target`` from the
wheel dir must resolve the needs for CPython 3.12.  ``--target`` ignores what is installed,
so the machine's packages are stood in for by empty wheels of the same names and versions
(:func:`write_stand_ins`); a missing wheel, a version that conflicts with the machine's, a
wheel for the wrong Python, or a wheel that nothing needs fails it.

    python -m ssmbench.offline build DIR    # what `make wheels` runs (needs internet)
    python -m ssmbench.offline check DIR    # the offline resolution, printed as a summary
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
DEVICE_PACKAGES = REPO / "config" / "device-packages.txt"
LOCK = REPO / "requirements.lock"
PYPROJECT = REPO / "pyproject.toml"

# the GPU machine's interpreter and platform, for pip's --python-version and --platform
DEVICE_PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
TARGET_ARGS = (
    "--python-version",
    DEVICE_PYTHON,
    "--implementation",
    "cp",
    "--only-binary=:all:",
    *(arg for platform in PLATFORMS for arg in ("--platform", platform)),
)
# published without a wheel (pure Python): built here, then found by the download
SDIST_ONLY = ("connection-pool",)
# installed with --no-deps and checked on its own: its metadata declares tilelang,
# apache-tvm-ffi, quack-kernels, transformers, ... which the Triton kernels that the fused
# wrappers import (ssmbench.models.kernels, bypassing mamba_ssm/__init__.py) never load
MAMBA = "mamba-ssm"
MAMBA_RUNTIME = ("torch", "triton", "einops")
MAX_TOTAL_MB = 50


class OfflineError(RuntimeError):
    """The wheel dir would not install offline on the GPU machine; the message says why."""


def read_pins(path: Path) -> dict[str, str]:
    """``name==version`` lines (comments and blank lines skipped), by canonical name."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def device_packages() -> dict[str, str]:
    return read_pins(DEVICE_PACKAGES)


def constraints() -> list[str]:
    """requirements.lock's pins, with the machine's versions for the machine's packages."""
    pins = {**read_pins(LOCK), **device_packages()}
    return [f"{name}=={version}" for name, version in sorted(pins.items())]


def needs() -> list[str]:
    """What the workflow imports there, by name: pyproject's dependencies and the `fused`
    extra.  Names only: the ranges in pyproject are for our own environments, and the
    machine's versions (numpy 2.5.2, triton 3.6.0) are what they are."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    texts = project["dependencies"] + project["optional-dependencies"]["fused"]
    return sorted({canonicalize_name(Requirement(text).name) for text in texts})


def dist_name(wheel: Path) -> str:
    return canonicalize_name(parse_wheel_filename(wheel.name)[0])


def wheels(wheel_dir: Path) -> list[Path]:
    return sorted(Path(wheel_dir).glob("*.whl"))


def prune(wheel_dir: Path, packages: dict[str, str]) -> list[str]:
    """Delete the wheels of ``packages`` (the machine has them); return their file names."""
    removed = [w.name for w in wheels(wheel_dir) if dist_name(w) in packages]
    for name in removed:
        (Path(wheel_dir) / name).unlink()
    return removed


def write_wheel(
    wheel_dir: Path,
    name: str,
    version: str,
    files: dict[str, str] | None = None,
    requires: tuple[str, ...] = (),
) -> Path:
    """A valid pure-Python wheel of ``files`` (path in the wheel -> text): METADATA, WHEEL
    and a RECORD with every file's sha256.  Empty ``files`` makes a stand-in."""
    stem = f"{canonicalize_name(name).replace('-', '_')}-{Version(version)}"
    info = f"{stem}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    contents = {
        **(files or {}),
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: ssmbench.offline\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in contents.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = "\n".join(record) + "\n"
    Path(wheel_dir).mkdir(parents=True, exist_ok=True)
    out = Path(wheel_dir) / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, text in contents.items():
            zf.writestr(path, text)
    return out


def write_stand_ins(wheel_dir: Path, packages: dict[str, str]) -> list[Path]:
    """Empty wheels of the machine's packages at the machine's versions."""
    return [write_wheel(wheel_dir, name, version) for name, version in sorted(packages.items())]


def wheel_requires(wheel: Path) -> list[Requirement]:
    """The Requires-Dist of a wheel, from its METADATA."""
    with zipfile.ZipFile(wheel) as zf:
        path = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        lines = zf.read(path).decode().splitlines()
    return [
        Requirement(line.split(":", 1)[1]) for line in lines if line.startswith("Requires-Dist:")
    ]


def isolated_pip_env() -> dict[str, str]:
    """This environment without pip's settings: no configured find-links or constraints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull}


def _url_path(url: str) -> Path:
    return Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))


def dry_run(
    requirements: list[str], find_links: list[Path], no_deps: bool = False
) -> dict[str, tuple[str, Path]]:
    """Resolve ``requirements`` offline for CPython 3.12 from ``find_links`` only, as
    ``pip install --dry-run --no-index --target``; name -> (version, wheel file)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        args = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "-q"]
        args += [f"--find-links={d}" for d in find_links]
        args += [*TARGET_ARGS, "--target", str(Path(tmp) / "target"), "--report", str(report)]
        args += ["--no-deps"] if no_deps else []
        done = subprocess.run(
            args + requirements, capture_output=True, text=True, env=isolated_pip_env()
        )
        if done.returncode != 0:
            raise OfflineError(f"offline resolution failed:\n{done.stderr.strip()}")
        items = json.loads(report.read_text())["install"]
    return {
        canonicalize_name(item["metadata"]["name"]): (
            item["metadata"]["version"],
            _url_path(item["download_info"]["url"]),
        )
        for item in items
    }


@dataclass(frozen=True)
class Closure:
    carried: dict[str, str]  # name -> version, from the wheel dir
    from_device: dict[str, str]  # name -> version, the machine's own
    mamba: Path
    mamba_requires: list[str]
    total_mb: float


def resolve(wheel_dir: Path) -> tuple[dict[str, tuple[str, Path]], Path]:
    """The offline resolution of :func:`needs` from ``wheel_dir`` and stand-ins of the
    machine's packages (name -> (version, wheel)), and mamba_ssm's wheel, resolved alone."""
    with tempfile.TemporaryDirectory() as tmp:
        write_stand_ins(Path(tmp), device_packages())
        resolved = dry_run(needs(), [wheel_dir, Path(tmp)])
    try:
        mamba = dry_run([MAMBA], [wheel_dir], no_deps=True)[MAMBA][1]
    except OfflineError as e:
        raise OfflineError(
            f"no mamba_ssm wheel for CPython {DEVICE_PYTHON} (one built with its CUDA extension "
            f"is tagged for the python that built it): {e}"
        ) from e
    return resolved, mamba


def unused(wheel_dir: Path, resolved: dict[str, tuple[str, Path]], mamba: Path) -> list[Path]:
    """The wheels in ``wheel_dir`` that the resolution did not pick: the dependencies of the
    machine's own packages (pandas' tzdata: the machine resolved those), stale versions."""
    used = {path for _, path in resolved.values()} | {mamba}
    return [w for w in wheels(wheel_dir) if w not in used]


def check(wheel_dir: Path) -> Closure:
    """Raise :class:`OfflineError` unless ``wheel_dir`` holds exactly the closure of
    :func:`needs` minus the machine's packages, for CPython 3.12, plus mamba_ssm."""
    wheel_dir = Path(wheel_dir).resolve()
    present = wheels(wheel_dir)
    if not present:
        raise OfflineError(f"no wheels in {wheel_dir}")
    device = device_packages()
    shadowing = sorted(w.name for w in present if dist_name(w) in device)
    if shadowing:
        raise OfflineError(f"wheels of packages the machine has (would shadow them): {shadowing}")
    resolved, mamba = resolve(wheel_dir)
    carried = {n: v for n, (v, p) in resolved.items() if p.parent == wheel_dir}
    from_device = {n: v for n, (v, p) in resolved.items() if p.parent != wheel_dir}

    requires = wheel_requires(mamba)
    for req in requires:
        name = canonicalize_name(req.name)
        if name not in MAMBA_RUNTIME:
            continue
        version = device.get(name) or carried.get(name)
        if version is None:
            raise OfflineError(f"mamba_ssm's kernels need {name}: not on the machine, no wheel")
        if not req.specifier.contains(version, prereleases=True):
            raise OfflineError(f"mamba_ssm needs {req}, the machine has {name} {version}")

    extra = sorted(w.name for w in unused(wheel_dir, resolved, mamba))
    if extra:
        raise OfflineError(f"wheels that nothing needs (stale or extra): {extra}")
    total_mb = sum(w.stat().st_size for w in present) / 1e6
    return Closure(carried, from_device, mamba, [str(r) for r in requires], total_mb)


def build_wheels(wheel_dir: Path) -> None:
    """Fill ``wheel_dir`` afresh (needs internet and, for mamba_ssm's setup.py, torch
    here); its old wheels are deleted first, so that no stale version stays."""
    wheel_dir = Path(wheel_dir).resolve()
    wheel_dir.mkdir(parents=True, exist_ok=True)
    for wheel in wheels(wheel_dir):
        wheel.unlink()
    pip = [sys.executable, "-m", "pip"]
    with tempfile.TemporaryDirectory() as tmp:
        pins = Path(tmp) / "constraints.txt"
        pins.write_text("\n".join(constraints()) + "\n")
        c = ["-c", str(pins)]
        subprocess.run(
            [*pip, "wheel", "-q", "--no-deps", "-w", str(wheel_dir), *c, *SDIST_ONLY], check=True
        )
        subprocess.run(
            [*pip, "download", "-q", "-d", str(wheel_dir), f"--find-links={wheel_dir}", *c]
            + [*TARGET_ARGS, *needs()],
            check=True,
        )
        # setup.py imports the installed torch; without the CUDA extension the wheel is
        # py3-none-any (a CUDA build from pip's cache would be cp3XX-linux, and check() says so)
        mamba_env = {**os.environ, "MAMBA_SKIP_CUDA_BUILD": "TRUE", "MAMBA_FORCE_BUILD": "TRUE"}
        subprocess.run(
            [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheel_dir)]
            + [*c, MAMBA],
            check=True,
            env=mamba_env,
        )
    prune(wheel_dir, device_packages())
    for wheel in unused(wheel_dir, *resolve(wheel_dir)):
        wheel.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ssmbench.offline", description=__doc__)
    parser.add_argument("command", choices=("build", "check"))
    parser.add_argument("wheel_dir", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build_wheels(args.wheel_dir)
        closure = check(args.wheel_dir)
    except OfflineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{args.wheel_dir}: {len(closure.carried)} wheels and {closure.mamba.name}")
    print(f"  {closure.total_mb:.1f} MB (at most {MAX_TOTAL_MB})")
    print(f"  from the machine: {', '.join(sorted(closure.from_device))}")
    print(f"  mamba_ssm declares: {'; '.join(closure.mamba_requires)} (installed --no-deps)")
    if closure.total_mb > MAX_TOTAL_MB:
        print(f"error: {closure.total_mb:.1f} MB, over {MAX_TOTAL_MB} MB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
