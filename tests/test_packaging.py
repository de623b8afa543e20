"""Dependencies are declared once: conda specs and pyproject agree with requirements.lock."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tomllib
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ssmbench.paths import REPO


def lock() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    return pins


@pytest.mark.parametrize("env", sorted((REPO / "envs").glob("*.yaml")), ids=lambda p: p.name)
def test_conda_specs_carry_the_lock_pins(env: Path):
    spec = yaml.safe_load(env.read_text())
    pip = next(d["pip"] for d in spec["dependencies"] if isinstance(d, dict))
    pins = lock()
    assert pip, f"{env.name} pins nothing"
    for line in pip:
        name, version = line.split("==")
        assert pins[canonicalize_name(name)] == version, f"{env.name}: {line}"
    if env.name == "analysis.yaml":
        assert not any(line.startswith("torch") for line in pip)  # artifact evaluation


def test_pyproject_ranges_admit_the_locked_versions():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [
        r for extra in project["optional-dependencies"].values() for r in extra
    ]
    pins = lock()
    for text in requirements:
        req = Requirement(text)
        locked = pins[canonicalize_name(req.name)]
        assert req.specifier.contains(locked), f"{text} excludes the locked {locked}"


def test_ci_runs_the_readme_test_command():
    assert "make test" in (REPO / ".ci" / "run").read_text()
    readme = (REPO / "README.md").read_text()
    assert readme.index("make reproduce") < readme.index("make test") < 1200


def test_no_script_shadows_a_standard_library_module():
    """``python scripts/x.py`` puts scripts/ first on sys.path (and Snakemake a rule's
    script folder): a scripts/profile.py made torch.compile's ``import profile`` run the
    profile rule's script instead."""
    root = Path(__file__).resolve().parents[1]
    found = [*(root / "scripts").glob("*.py"), *(root / "workflow" / "scripts").glob("*.py")]
    shadowing = [p.name for p in found if p.stem in sys.stdlib_module_names]
    assert len(found) > 20 and not shadowing, shadowing
