"""Checking a config (or a task's settings) against its YAML schema, as the plan judges
it: JSON Schema's keywords, an integer written as a float refused rather than rounded,
every number finite, each failure as (path, message).  jsonschema and yaml only; the
config (``ssmbench.config``) and the task matrix (``ssmbench.tasks.matrix``) use it."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import jsonschema
import yaml


def config_key(path) -> str:
    """``presets.cpu.sweeps[0].seq_len[1]``: the config key at ``path`` (keys and indices)."""
    where = ""
    for part in path:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    return where or "<top level>"


def _strict_integer(checker, instance) -> bool:
    """JSON Schema counts 32.0 as an integer; we do not: a length, a count or a seed
    written as a float (``seq_len: [32.0]``, ``--config seed=1e3``) would name a record
    ``t32.0`` or reach torch as a float.  It is refused, not rounded."""
    return isinstance(instance, int) and not isinstance(instance, bool)


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer),
)


def _message(error: jsonschema.ValidationError) -> str:
    """The schema's message, with why a ``oneOf`` failed and what to write for 32.0."""
    if error.context:  # oneOf: what each alternative of the value's own type objects to
        reasons = [e for e in error.context if e.validator != "type"] or error.context
        return "; ".join(_message(e) for e in reasons)
    if error.validator == "type" and isinstance(error.instance, float):
        if error.instance.is_integer():
            return f"{error.message} (an integer is meant: write {int(error.instance)})"
    return error.message


def _not_finite(node, path=()) -> list[tuple[tuple, str]]:
    """(path, message) of each value under ``node`` that is NaN or infinite (YAML's .nan,
    .inf): the schema's bounds let them through (every comparison with NaN is false)."""
    if isinstance(node, float) and not math.isfinite(node):
        return [(tuple(path), f"{node} is not a finite number")]
    if isinstance(node, dict):
        return [e for k, v in node.items() for e in _not_finite(v, (*path, k))]
    if isinstance(node, list):
        return [e for i, v in enumerate(node) for e in _not_finite(v, (*path, i))]
    return []


def schema_errors(schema_path: Path, instance) -> list[tuple[tuple, str]]:
    """(path, message) of every place where ``instance`` breaks the YAML schema at
    ``schema_path``, judged as :func:`validate` judges a config (integers strictly, every
    number finite), sorted by path."""
    validator = _Validator(_schema(str(schema_path)))
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    found = [(tuple(e.absolute_path), _message(e)) for e in errors]
    return found + _not_finite(instance)


@functools.cache
def _schema(path: str) -> dict:
    with open(path) as f:
        return yaml.safe_load(f)
