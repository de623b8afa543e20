"""The model zoo: ``config/models.yaml`` read into frozen entries, torch-free.

Each entry names a transformers configuration class and causal-LM class and the config
fields that set its size, with their sources and the published parameter count
(``config/models.yaml`` describes the keys).  :func:`load` validates the file and raises
:class:`ZooError` naming the entry and key at fault; :meth:`ModelEntry.config_kwargs`
gives the fields of one preset (``full``, ``reduced``, ``ci``), which
:mod:`ssmbench.lm.build` turns into a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

MODELS_YAML = Path(__file__).resolve().parents[3] / "config" / "models.yaml"

FAMILIES = ("transformer", "ssm", "hybrid")
# full: the published model; reduced: the size that is timed where the full one is out of
# reach (falls back to full); ci: the tiny, structurally real preset of `make test`
PRESETS = ("full", "reduced", "ci")

REQUIRED = ("family", "config_class", "model_class", "source", "config", "params", "ci")
OPTIONAL = ("quoted_in", "unverified", "reduced")
UNAVAILABLE_KEYS = ("family", "source", "unavailable")


class ZooError(ValueError):
    """config/models.yaml is malformed; the message names the entry and the key."""


@dataclass(frozen=True)
class ModelEntry:
    name: str
    family: str
    source: str
    config_class: str | None = None
    model_class: str | None = None
    config: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    params: float | None = None  # the published parameter count
    params_source: str | None = None
    reduced: MappingProxyType | None = None
    reduced_why: str | None = None
    ci: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    unverified: str | None = None
    unavailable: str | None = None  # why the model cannot be built, or None

    def config_kwargs(self, preset: str = "full") -> dict[str, Any]:
        """The config fields of ``preset``: the full model's, with the preset's overrides."""
        if preset not in PRESETS:
            raise ZooError(f"{self.name}: unknown preset {preset!r}; known: {list(PRESETS)}")
        if self.unavailable:
            raise ZooError(f"{self.name} is unavailable: {self.unavailable}")
        overrides = {"full": {}, "reduced": self.reduced or {}, "ci": self.ci}[preset]
        return {**self.config, **overrides}


def _fail(where: str, key: str, why: str) -> ZooError:
    return ZooError(f"{where}: key {key!r}: {why}")


def _mapping(value: Any, where: str, key: str) -> MappingProxyType:
    if not isinstance(value, dict) or not value:
        raise _fail(where, key, f"must be a non-empty mapping, got {value!r}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise _fail(where, key, f"field names must be strings, got {bad!r}")
    return MappingProxyType(dict(value))


def _text(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(where, key, f"must be a non-empty string, got {value!r}")
    return value


def parse_entry(name: str, raw: Any, path: Path = MODELS_YAML) -> ModelEntry:
    """One entry of models.yaml, validated."""
    where = f"{path.name}: {name}"
    if not isinstance(raw, dict):
        raise ZooError(f"{where}: must be a mapping of keys, got {type(raw).__name__}")
    family = raw.get("family")
    if family not in FAMILIES:
        raise _fail(where, "family", f"must be one of {list(FAMILIES)}, got {family!r}")
    if "unavailable" in raw:
        extra = sorted(set(raw) - set(UNAVAILABLE_KEYS))
        if extra:
            only = ", ".join(UNAVAILABLE_KEYS)
            raise _fail(where, extra[0], f"an unavailable entry has only {only}")
        return ModelEntry(
            name=name,
            family=family,
            source=_text(raw.get("source"), where, "source"),
            unavailable=_text(raw["unavailable"], where, "unavailable"),
        )
    for key in REQUIRED:
        if key not in raw:
            raise _fail(where, key, "missing")
    unknown = sorted(set(raw) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise _fail(where, unknown[0], f"unknown; known: {[*REQUIRED, *OPTIONAL]}")
    params = raw["params"]
    if not isinstance(params, dict) or set(params) != {"count", "source"}:
        raise _fail(where, "params", "must be a mapping of `count` and `source`")
    count = params["count"]
    if isinstance(count, str):  # YAML 1.1 reads 0.49e9 as a float but 130e6 as a string
        try:
            count = float(count)
        except ValueError:
            raise _fail(where, "params.count", f"must be a number, got {count!r}") from None
    if isinstance(count, bool) or not isinstance(count, int | float) or count <= 0:
        raise _fail(where, "params.count", f"must be a positive number, got {count!r}")
    reduced, reduced_why = None, None
    if "reduced" in raw:
        block = raw["reduced"]
        if not isinstance(block, dict) or set(block) != {"why", "config"}:
            raise _fail(where, "reduced", "must be a mapping of `why` and `config`")
        reduced = _mapping(block["config"], where, "reduced.config")
        reduced_why = _text(block["why"], where, "reduced.why")
    config = _mapping(raw["config"], where, "config")
    ci = _mapping(raw["ci"], where, "ci")
    if ci.get("vocab_size") != 512 or ci.get("hidden_size") != 64:
        raise _fail(where, "ci", "the ci preset is hidden_size 64 and vocab_size 512")
    if not 2 <= ci.get("num_hidden_layers", 0) <= 6:
        raise _fail(where, "ci", "the ci preset has 2 to 6 layers (num_hidden_layers)")
    return ModelEntry(
        name=name,
        family=family,
        source=_text(raw["source"], where, "source"),
        config_class=_text(raw["config_class"], where, "config_class"),
        model_class=_text(raw["model_class"], where, "model_class"),
        config=config,
        params=float(count),
        params_source=_text(params["source"], where, "params.source"),
        reduced=reduced,
        reduced_why=reduced_why,
        ci=ci,
        unverified=raw.get("unverified"),
    )


def load(path: Path | str = MODELS_YAML) -> dict[str, ModelEntry]:
    """Every entry of ``path``, by name, in file order."""
    path = Path(path)
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict) or not raw:
        raise ZooError(f"{path.name}: must be a non-empty mapping of model names to entries")
    return {str(name): parse_entry(str(name), entry, path) for name, entry in raw.items()}


@cache
def _default() -> dict[str, ModelEntry]:
    return load(MODELS_YAML)


def entries() -> dict[str, ModelEntry]:
    """The entries of config/models.yaml (read once)."""
    return dict(_default())


def entry(name: str) -> ModelEntry:
    zoo = _default()
    if name not in zoo:
        raise ZooError(f"{MODELS_YAML.name}: no model {name!r}; known: {list(zoo)}")
    return zoo[name]


def available() -> list[str]:
    """The names of the entries that can be built."""
    return [name for name, e in _default().items() if not e.unavailable]
