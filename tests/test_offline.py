"""The offline install on a GPU machine without internet: `make wheels` builds the closure
for CPython 3.12 less the machine's packages, and scripts/offline_install.sh puts it on
PYTHONPATH with --target, where a venv made from the machine's venv would hide its torch."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ssmbench import offline
from ssmbench.paths import REPO

INSTALL = REPO / "scripts" / "offline_install.sh"


def install(target: Path, wheel_dir: Path, python: Path | str = sys.executable):
    env = {**offline.isolated_pip_env(), "PYTHON": str(python)}
    return subprocess.run(
        ["bash", str(INSTALL), str(target), str(wheel_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_device_list_has_the_machine_versions_and_the_lock_for_the_rest():
    device = offline.device_packages()
    lock = offline.read_pins(offline.LOCK)
    read_there = {"torch": "2.11.0", "triton": "3.6.0", "numpy": "2.5.2", "transformers": "5.17.0"}
    assert {name: device[name] for name in read_there} == read_there
    assumed = {name: version for name, version in device.items() if name not in read_there}
    assert assumed == {name: lock[name] for name in assumed}
    assert not {"snakemake", "papermill", "pandera", "fla-core", "mamba-ssm"} & set(device)


def test_a_written_wheel_records_every_file_with_its_digest(tmp_path):
    wheel = offline.write_wheel(tmp_path, "Tiny.Mod", "1.0", {"tiny_mod.py": "X = 1\n"})
    assert wheel.name == "tiny_mod-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        record = zf.read("tiny_mod-1.0.dist-info/RECORD").decode().splitlines()
        for line in record:
            path, digest, size = line.rsplit(",", 2)
            if path.endswith("RECORD"):
                assert (digest, size) == ("", "")
                continue
            data = zf.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert digest == f"sha256={expected.decode()}" and int(size) == len(data)
        assert {line.split(",")[0] for line in record} == set(zf.namelist())
        assert (
            "Name: Tiny.Mod\nVersion: 1.0\n" in zf.read("tiny_mod-1.0.dist-info/METADATA").decode()
        )


def test_prune_deletes_the_machine_packages_whatever_the_case_of_their_file_names(tmp_path):
    """The Makefile's old `rm -f pyyaml-*.whl` missed PyYAML-6.0.2-....whl."""
    names = [
        "PyYAML-6.0.4-cp312-cp312-manylinux_2_17_x86_64.whl",
        "MarkupSafe-3.0.4-cp312-cp312-manylinux_2_17_x86_64.whl",
        "typing_extensions-4.16.0-py3-none-any.whl",
        "snakemake-9.27.1-py3-none-any.whl",
    ]
    for name in names:
        (tmp_path / name).touch()
    removed = offline.prune(tmp_path, offline.device_packages())
    assert sorted(removed) == sorted(names[:3])
    assert [w.name for w in offline.wheels(tmp_path)] == ["snakemake-9.27.1-py3-none-any.whl"]


def test_offline_install_refuses_a_wheel_dir_without_wheels(tmp_path):
    (tmp_path / "empty").mkdir()
    out = install(tmp_path / "site", tmp_path / "empty")
    assert out.returncode == 2 and out.stdout == ""
    assert f"error: no wheels in {tmp_path / 'empty'}/" in out.stderr
    assert "make wheels" in out.stderr
    assert not (tmp_path / "site").exists()


def test_offline_install_refuses_a_folder_it_did_not_make(tmp_path):
    offline.write_wheel(tmp_path / "wheels", "tiny-mod", "1.0", {"tiny_mod.py": "X = 1\n"})
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep\n")
    out = install(tmp_path / "mine", tmp_path / "wheels")
    assert out.returncode == 2
    assert "is not empty and was not made by this script" in out.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep\n"


def run(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, check=True, timeout=120, **kwargs
    )


@pytest.mark.slow
def test_a_venv_made_from_a_venv_hides_its_packages_and_the_target_install_keeps_them(tmp_path):
    # venv A stands for the GPU machine's /opt/torch/.venv: its own package, and pip
    a = tmp_path / "a"
    run(sys.executable, "-m", "venv", a)
    a_python = a / "bin" / "python"
    purelib = run(a_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    (Path(purelib.stdout.strip()) / "parent_marker.py").write_text("WHERE = 'venv a'\n")
    run(a_python, "-c", "import parent_marker")

    # bug 1: venv B from A's python, --system-site-packages, sees the base's packages only
    b = tmp_path / "b"
    run(a_python, "-m", "venv", "--system-site-packages", "--without-pip", b)
    hidden = subprocess.run(
        [str(b / "bin" / "python"), "-c", "import parent_marker"], capture_output=True, text=True
    )
    assert hidden.returncode == 1
    assert "ModuleNotFoundError: No module named 'parent_marker'" in hidden.stderr

    # the fix: --target and PYTHONPATH; a numpy wheel is never installed over the machine's
    wheels = tmp_path / "wheels"
    offline.write_wheel(wheels, "tiny-carried", "1.0", {"tiny_carried.py": "WHERE = 'wheel'\n"})
    offline.write_wheel(wheels, "numpy", "1.0", {"numpy/__init__.py": "WHERE = 'wheel'\n"})
    target = tmp_path / "site"
    first = install(target, wheels, python=a_python)
    assert first.returncode == 0, first.stderr
    assert "skipping" in first.stderr and "numpy" in first.stderr
    line = first.stdout.strip()
    assert line.startswith(f"export PYTHONPATH={target}")
    assert len(first.stdout.splitlines()) == 1
    assert not (target / "numpy").exists()

    def imports(env_line: str, modules: str) -> str:
        """What A's python prints of each module's WHERE, after ``env_line``."""
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        code = f"import {modules}; print(*(m.WHERE for m in ({modules},)))"
        return run("bash", "-c", f'{env_line}\nexec "$0" -c "$1"', a_python, code, env=env).stdout

    assert imports(line, "parent_marker, tiny_carried") == "venv a wheel\n"

    # idempotent: the same wheels and python install nothing the second time
    installed = target / "tiny_carried.py"
    before = installed.stat().st_mtime_ns
    second = install(target, wheels, python=a_python)
    assert second.returncode == 0 and second.stdout == first.stdout
    assert "up to date" in second.stderr and installed.stat().st_mtime_ns == before

    # another wheel list installs afresh
    offline.write_wheel(wheels, "tiny-later", "2.0", {"tiny_later.py": "WHERE = 'later'\n"})
    third = install(target, wheels, python=a_python)
    assert third.returncode == 0 and "up to date" not in third.stderr
    assert imports(line, "parent_marker, tiny_carried, tiny_later") == "venv a wheel later\n"


@pytest.fixture(scope="module")
def wheel_dir(tmp_path_factory) -> Path:
    """`make wheels` once, into a temporary folder (needs the package index; the venv of
    this test run builds, as `make wheels` does in a checkout)."""
    wheels = tmp_path_factory.mktemp("offline") / "whl"
    tree = ["git", "-C", str(REPO), "status", "--porcelain"]
    before = subprocess.run(tree, capture_output=True, text=True).stdout
    venv = Path(sys.prefix)
    out = subprocess.run(
        ["make", "-C", str(REPO), "-o", f"{venv}/.installed", "wheels"]
        + [f"VENV={venv}", f"WHEELS={wheels}"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
    assert subprocess.run(tree, capture_output=True, text=True).stdout == before
    return wheels


@pytest.mark.slow
def test_make_wheels_is_the_closure_for_python_3_12_less_what_the_machine_has(wheel_dir):
    closure = offline.check(wheel_dir)  # raises on a missing, extra or conflicting wheel
    carried = {offline.dist_name(w) for w in offline.wheels(wheel_dir)}
    assert set(closure.carried) | {"mamba-ssm"} == carried
    assert {"snakemake", "papermill", "pandera", "ipykernel", "fla-core"} <= carried
    assert not carried & set(offline.device_packages())
    assert closure.from_device["numpy"] == "2.5.2" and "pandas" in closure.from_device
    assert closure.total_mb < offline.MAX_TOTAL_MB
    # mamba_ssm: pure Python for any python 3; its metadata cannot resolve offline
    assert closure.mamba.name.endswith("-py3-none-any.whl")
    declared = {canonicalize_name(Requirement(r).name) for r in closure.mamba_requires}
    assert {"tilelang", "quack-kernels", "torch", "triton", "einops"} <= declared


@pytest.mark.slow
def test_the_offline_resolve_fails_on_a_missing_a_conflicting_or_an_extra_wheel(
    wheel_dir, tmp_path
):
    def broken(edit) -> str:
        copy = tmp_path / f"whl-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(wheel_dir, copy)
        edit(copy)
        with pytest.raises(offline.OfflineError) as e:
            offline.check(copy)
        return str(e.value)

    def drop(name):
        return lambda d: next(w for w in offline.wheels(d) if offline.dist_name(w) == name).unlink()

    message = broken(drop("snakemake-interface-common"))
    assert "offline resolution failed" in message and "snakemake-interface-common" in message

    def numpy_1(d):  # a pandera that the machine's numpy 2.5.2 does not satisfy
        drop("pandera")(d)
        offline.write_wheel(d, "pandera", "0.35.0", requires=("numpy<2",))

    message = broken(numpy_1)
    assert "offline resolution failed" in message and "numpy" in message

    def cp311(d):  # a mamba_ssm built with its CUDA extension under python 3.11
        wheel = next(w for w in offline.wheels(d) if offline.dist_name(w) == "mamba-ssm")
        wheel.rename(d / wheel.name.replace("py3-none-any", "cp311-cp311-linux_x86_64"))

    assert "no mamba_ssm wheel for CPython 3.12" in broken(cp311)
    extra = broken(lambda d: offline.write_wheel(d, "left-over", "1.0"))
    assert "nothing needs" in extra and "left_over-1.0-py3-none-any.whl" in extra
    assert "would shadow" in broken(lambda d: offline.write_wheel(d, "numpy", "2.5.2"))
