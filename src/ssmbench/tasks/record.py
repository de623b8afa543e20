"""Task records on disk: checked against ``workflow/schemas/task_record.schema.json`` on
write and on read, written atomically.  No torch."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import jsonschema

from ssmbench.records import check_schema, read_json, write_json_atomic

SCHEMA = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "task_record.schema.json"


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA.read_text())
    return jsonschema.validators.validator_for(schema)(schema)


def validate_task_record(data: dict, path: str | os.PathLike = "<task record>") -> None:
    """Raise ``ValueError`` naming the file and the field when ``data`` breaks the schema."""
    check_schema(_validator(), data, path)


def write_task_record(path: str | os.PathLike, record: dict) -> None:
    validate_task_record(record, path)
    write_json_atomic(path, record)


def read_task_record(path: str | os.PathLike) -> dict:
    data = read_json(path)
    validate_task_record(data, path)
    return data
