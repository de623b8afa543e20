"""The device catalogue, ``config/devices.yaml``: vendor peaks, memory, caches and power of
the devices this benchmark knows, each number with its source, torch-free.

A run measures its own ceilings (``ssmbench.measure.ceilings``); the catalogue is what
readers compare against, and what names a run's device across runs: :func:`match` maps the
name CUDA gives a GPU (``torch.cuda.get_device_name()``) or ``/proc/cpuinfo``'s CPU model to
an entry, so that the tables (``device_kind``) and the cross-device figures say "H100 SXM"
for "NVIDIA H100 80GB HBM3".  Units live in the field names: ``peak_TFLOPs`` (dense, 1e12
flop/s), ``bandwidth_GBps`` (1e9 B/s), ``memory_GB`` and ``l2_MB`` as the vendor prints
them, ``tdp_W``; the file's header says what each means.

The file is checked on load: against ``workflow/schemas/devices.schema.yaml``, then what a
schema cannot say: every number has a source naming a document of the file, every null a
note saying why, every pattern compiles.  A bad file raises :class:`CatalogueError` naming
the key.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import yaml

from ssmbench.errors import ConfigError
from ssmbench.paths import REPO
from ssmbench.schemas import config_key, schema_errors

__all__ = [
    "DEVICES_YAML",
    "CatalogueError",
    "Device",
    "device",
    "device_kind",
    "load",
    "match",
]

DEVICES_YAML = REPO / "config" / "devices.yaml"
SCHEMA = REPO / "workflow" / "schemas" / "devices.schema.yaml"
KINDS = ("gpu", "cpu")
DTYPES = ("bf16", "fp16", "fp32", "tf32")  # the keys of peak_TFLOPs
# the numbers of an entry, each with a source or, when null, a note
FIELDS = ("peak_TFLOPs", "bandwidth_GBps", "memory_GB", "l2_MB", "tdp_W")


class CatalogueError(ConfigError):
    """config/devices.yaml is malformed; the message names the file and the key."""


@dataclass(frozen=True)
class Device:
    """One device of the catalogue.  ``peak_TFLOPs`` maps each of DTYPES to a dense peak in
    1e12 flop/s or None (no such mode, or not known: ``notes`` says which); ``sources``
    maps each field holding a number to "title (where), url"; ``notes`` maps a field (or
    ``peak_TFLOPs.<dtype>``) to why it is null or what it means."""

    name: str
    kind: str  # "gpu" | "cpu"
    peak_TFLOPs: MappingProxyType  # noqa: N815  (the unit in the name, as in the file)
    bandwidth_GBps: float | None  # noqa: N815
    memory_GB: float | None  # noqa: N815
    l2_MB: float | None  # noqa: N815
    tdp_W: float | None  # noqa: N815
    sources: MappingProxyType
    notes: MappingProxyType
    patterns: tuple[re.Pattern, ...] = ()
    excludes: tuple[re.Pattern, ...] = ()

    def matches(self, name: str) -> bool:
        """Whether the lower-cased ``name`` matches one of this entry's patterns and none of
        its exclusions (look-alikes with other peaks)."""
        name = name.lower()
        return any(p.search(name) for p in self.patterns) and not any(
            p.search(name) for p in self.excludes
        )


def _fail(path: Path, key: tuple, why: str) -> CatalogueError:
    return CatalogueError(f"{path}: key {config_key(key)}: {why}")


def _source_text(documents: dict, source: dict) -> str:
    doc = documents[source["doc"]]
    return f"{doc['title']} ({source['where']}), {doc['url']}"


def _values(spec: dict) -> dict[str, object]:
    """The entry's numbers by note key: ``peak_TFLOPs.<dtype>`` and the other fields."""
    values = {f"peak_TFLOPs.{d}": spec["peak_TFLOPs"][d] for d in DTYPES}
    values.update({f: spec[f] for f in FIELDS if f != "peak_TFLOPs"})
    return values


def _sources(path: Path, name: str, spec: dict, documents: dict) -> dict[str, str]:
    """Each field holding a number -> its source's text; a number without a source, or a
    source naming no document of the file, is refused."""
    where = ("devices", name)
    for key, source in [("source", spec.get("source")), *spec.get("sources", {}).items()]:
        if source is not None and source["doc"] not in documents:
            raise _fail(path, (*where, key, "doc"), f"{source['doc']!r} is not in documents")
    values = _values(spec)
    sources = {}
    for field in FIELDS:
        held = [v for k, v in values.items() if k.split(".")[0] == field and v is not None]
        if not held:
            continue
        source = spec.get("sources", {}).get(field) or spec.get("source")
        if source is None:
            raise _fail(path, (*where, field), "a number without a source (source or sources)")
        sources[field] = _source_text(documents, source)
    return sources


def _check_notes(path: Path, name: str, spec: dict) -> None:
    """Every null needs a note saying why it is null."""
    notes = spec.get("notes", {})
    for key, value in _values(spec).items():
        if value is None and key not in notes:
            raise _fail(path, ("devices", name, key), "null without a note saying why")


def _patterns(path: Path, name: str, spec: dict, key: str) -> tuple[re.Pattern, ...]:
    compiled = []
    for i, pattern in enumerate(spec.get(key, [])):
        try:
            compiled.append(re.compile(pattern))
        except re.error as error:
            raise _fail(path, ("devices", name, key, i), f"bad pattern: {error}") from None
    return tuple(compiled)


def _device(path: Path, name: str, spec: dict, documents: dict) -> Device:
    _check_notes(path, name, spec)
    return Device(
        name=name,
        kind=spec["kind"],
        peak_TFLOPs=MappingProxyType({d: spec["peak_TFLOPs"][d] for d in DTYPES}),
        bandwidth_GBps=spec["bandwidth_GBps"],
        memory_GB=spec["memory_GB"],
        l2_MB=spec["l2_MB"],
        tdp_W=spec["tdp_W"],
        sources=MappingProxyType(_sources(path, name, spec, documents)),
        notes=MappingProxyType(dict(spec.get("notes", {}))),
        patterns=_patterns(path, name, spec, "match"),
        excludes=_patterns(path, name, spec, "exclude"),
    )


@functools.cache
def _load(path: str) -> MappingProxyType:
    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text())
    except OSError as error:
        raise CatalogueError(f"device catalogue {file}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise CatalogueError(f"device catalogue {file}: not YAML: {error}") from None
    errors = schema_errors(SCHEMA, data)
    if errors:
        key, why = errors[0]
        raise _fail(file, key, why)
    documents = data["documents"]
    return MappingProxyType(
        {name: _device(file, name, spec, documents) for name, spec in data["devices"].items()}
    )


def load(path: str | Path | None = None) -> dict[str, Device]:
    """The catalogue at ``path`` (default ``config/devices.yaml``), name -> Device, in the
    file's order (the order :func:`match` tries them in).  Read and checked once per path."""
    return dict(_load(str(Path(path or DEVICES_YAML).resolve())))


def device(name: str, path: str | Path | None = None) -> Device:
    """The entry called ``name``; a KeyError listing the known names otherwise."""
    devices = load(path)
    if name not in devices:
        raise KeyError(f"no device {name!r} in the catalogue; known: {sorted(devices)}")
    return devices[name]


def match(
    device_name: str, kind: str | None = None, path: str | Path | None = None
) -> Device | None:
    """The first entry (in the file's order) whose patterns match ``device_name`` (the name
    ``torch.cuda.get_device_name()`` gives, or a CPU model), of ``kind`` ("gpu" or "cpu")
    when given; None for a device the catalogue does not know, and for look-alikes an entry
    excludes (GH200 is no H200, an RTX 4090 D no RTX 4090)."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown device kind {kind!r}; known: {list(KINDS)}")
    if not device_name:
        return None
    for entry in load(path).values():
        if (kind is None or entry.kind == kind) and entry.matches(device_name):
            return entry
    return None


# a record's ``device`` (cpu, cuda) -> the kind of catalogue entry it can be
KIND_OF_DEVICE = {"cuda": "gpu", "cpu": "cpu"}


def device_kind(device: str, device_name: str | None, gpu_name: str | None = None) -> str:
    """What a record's device is, the same words in every run: the catalogue's name for it
    (:func:`match` of the kind ``device`` is, on the physical GPU's name ``gpu_name`` where
    the record has one, else ``device_name``); else the name as recorded (a GPU or a CPU
    model the catalogue does not know); else ``device`` itself ("cpu" for a cell that never
    ran and so recorded no name)."""
    name = gpu_name or device_name or ""
    entry = match(name, kind=KIND_OF_DEVICE.get(device))
    if entry is not None:
        return entry.name
    return name or device
