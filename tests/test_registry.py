"""The registry is the one list: the schemas' enums match it, every family's module has the
operator and step tables it names, and it imports without torch."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest
import yaml

from ssmbench import config as sbconfig
from ssmbench import ops, records, registry
from ssmbench.paths import REPO

# the registry's list each config axis draws from
AXES = {
    "models": registry.FAMILIES,
    "backends": registry.BACKENDS,
    "phases": registry.PHASES,
    "phase": registry.PHASES,
    "dtype": registry.SWEEP_DTYPES,
}


def _resolve(schema: dict, node: dict) -> dict:
    """``node`` with its ``$ref`` (a ``#/...`` pointer into ``schema``) followed."""
    while "$ref" in node:
        target = schema
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def _axis_enums(schema: dict, where: str) -> dict[str, list]:
    """The enum of each axis key of ``$defs.<where>.properties`` (a list's items' enum)."""
    properties = schema["$defs"][where]["properties"]
    found = {}
    for key in AXES:
        if key in properties:
            node = _resolve(schema, properties[key])
            found[key] = node.get("items", node).get("enum")
    return found


@pytest.mark.parametrize("where", ["sweep", "selector", "figure"])
def test_config_schema_enums_are_the_registrys(where):
    with open(sbconfig.SCHEMA) as f:
        schema = yaml.safe_load(f)
    enums = _axis_enums(schema, where)
    assert enums, where
    for key, names in enums.items():
        assert names is not None and sorted(names) == sorted(AXES[key]), (where, key)


def test_the_config_names_the_figures_of_the_catalogue_a_block_run_draws():
    """The figures key's names (schema enum, config/config.yaml) are the catalogue's
    figures of block runs, and every catalogued figure has its notebook and caption."""
    schema = yaml.safe_load(sbconfig.SCHEMA.read_text())
    named = schema["properties"]["figures"]["propertyNames"]["enum"]
    assert named == list(registry.figures_of("blocks"))
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert set(config["figures"]) <= set(named)
    for name in registry.FIGURES:
        assert (REPO / "notebooks" / f"{name}.ipynb").is_file(), name
        assert (REPO / "workflow" / "report" / f"{name}.rst").is_file(), name


def test_the_task_families_are_the_registrys_families_and_variants():
    with open(sbconfig.SCHEMA) as f:
        schema = yaml.safe_load(f)
    families = schema["$defs"]["task_families"]["items"]["enum"]
    assert sorted(families) == sorted(registry.TASK_FAMILIES)
    from ssmbench.tasks.record import SCHEMA as TASK_RECORD

    record = json.loads(TASK_RECORD.read_text())
    assert sorted(record["properties"]["family"]["enum"]) == sorted(registry.TASK_FAMILIES)
    for variant in registry.VARIANTS.values():
        assert variant.family in registry.FAMILIES and variant.what
        assert registry.base_family(variant.name) == variant.family


def test_record_schema_statuses_are_the_registrys():
    with open(records.SCHEMA) as f:
        schema = json.load(f)
    assert schema["properties"]["status"]["enum"] == list(registry.STATUSES)


@pytest.mark.parametrize("family", registry.OPERATOR_FAMILIES)
def test_family_module_has_the_named_tables(family):
    entry = registry.FAMILY[family]
    module = importlib.import_module(entry.module)
    assert set(registry.UNIVERSAL_BACKENDS) <= set(getattr(module, entry.backends))
    # attention's naive step is its naive operator over a grown cache, not a table entry
    assert "torch" in getattr(module, entry.step_backends)
    assert hasattr(module, entry.mixer) and hasattr(module, "build_mixer")
    assert callable(getattr(ops, entry.operator)) and callable(getattr(ops, entry.step))


def test_hybrid_is_made_of_registered_families():
    hybrid = registry.FAMILY["hybrid"]
    assert hybrid.operator is None and set(hybrid.parts) <= set(registry.OPERATOR_FAMILIES)
    assert hasattr(importlib.import_module(hybrid.module), "build_mixer")


def test_every_backend_has_its_phases_and_base():
    for backend in registry.BACKEND.values():
        assert set(backend.phases) <= set(registry.PHASES)
        if backend.base is not None:
            assert backend.phases == registry.STEP_PHASES
            assert registry.BACKEND[backend.base].graph == backend.name
            assert registry.BACKEND_TIERS[backend.name] == registry.BACKEND_TIERS[backend.base]
    assert "decode" not in registry.BACKEND["compile"].phases
    assert registry.verified_backend("fused-graph") == "fused"


def test_every_family_operator_and_step_has_a_profiler_range():
    for family in registry.OPERATOR_FAMILIES:
        entry = registry.FAMILY[family]
        for op in (entry.operator, entry.step, entry.mixer, f"{entry.mixer}.step"):
            assert registry.range_scope(registry.PROFILER_RANGES[op]) == entry.scope


def test_registry_imports_without_torch_or_pandas():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['pandas'] = None; "
        "import ssmbench.registry, ssmbench.config"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_family_and_backend_has_its_figure_style():
    """One colour per family and one line style per backend, everywhere: the figures' style
    tables name exactly the registry's families and backends."""
    from ssmbench.figures import style

    assert set(style.FAMILY_COLORS) == set(registry.FAMILIES)
    assert set(style.BACKEND_STYLES) == set(registry.BACKENDS)
    assert len(set(style.FAMILY_COLORS.values())) == len(style.FAMILY_COLORS)
