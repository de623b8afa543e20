"""Fuzzing, not only examples: configs and records mutated every way Hypothesis finds.

- **Configs.**  Each example takes a preset of the shipped config and mutates it one to
  three times at places drawn from its own tree (a value of another type, out of range,
  NaN or an infinity, odd text, a key removed, a key added).  ``plan()`` must either
  refuse it with a ``ConfigError`` that names a config key (or the config or tasks file),
  or give a plan from which everything the Snakefile computes before any job (each job's
  price for the progress estimate, the outputs healing checks, every record's path, the
  figures' cells) comes without an exception.
- **Records.**  Each example takes a valid cell or paired record and mutates it the same
  ways (and truncates or corrupts its JSON text), writes it with a sidecar made to match,
  as an edit with a re-hash would leave it.  Healing must either accept it unchanged, and
  then every reader and the tables accept it too, or name the file and move it aside.

Fixed seeds (``derandomize``) and bounded example counts keep the run reproducible and
fast; a failing example Hypothesis finds goes into the ``@example`` list of its test.
"""

from __future__ import annotations

import copy
import json
import math
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ssmbench import budget, heal, paths, records, tables
from ssmbench import config as sbconfig
from ssmbench.config import ConfigError
from ssmbench.matrix import Cell
from ssmbench.paired import PairedRecord, validate_paired
from ssmbench.provenance import write_sidecars
from tests.conftest import make_record, paired_record

BASE = sbconfig.load()
PRESETS = sorted(BASE["presets"])
SETTINGS = settings(
    max_examples=int(os.environ.get("SSMBENCH_FUZZ_EXAMPLES", 150)),
    derandomize="SSMBENCH_FUZZ_EXAMPLES" not in os.environ,  # fixed seed, unless exploring
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# values of every JSON type, and the awkward ones
ODD_TEXT = st.sampled_from(["", " ", "ci\n", "../x", "a" * 80, "é", "NaN", "1e3", "null"])
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 0.5, 1.5, 2**33, math.nan, math.inf, -math.inf]),
    st.text(max_size=6),
    ODD_TEXT,
    st.lists(st.integers(min_value=-3, max_value=70000), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(min_value=-2, max_value=3), max_size=2),
)


def places(node, at=()) -> list[tuple]:
    """Every path into ``node`` (dict keys, list indices), the root's children first."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            found += [(*at, key), *places(value, (*at, key))]
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += [(*at, i), *places(value, (*at, i))]
    return found


def parent_of(root, at: tuple):
    node = root
    for part in at[:-1]:
        node = node[part]
    return node


@st.composite
def mutations(draw, root: dict) -> list[tuple[str, tuple, object]]:
    """One to three (kind, path, value) mutations of ``root`` (applied in order by
    :func:`mutate`; a path that a previous mutation removed is skipped)."""
    found = places(root)
    out = []
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        kind = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        at = draw(st.sampled_from(found)) if found else ()
        out.append((kind, at, draw(VALUES)))
    return out


def mutate(root: dict, changes) -> dict:
    out = copy.deepcopy(root)
    for kind, at, value in changes:
        try:
            parent = parent_of(out, at)
            key = at[-1]
            if kind == "replace":
                parent[key] = value
            elif kind == "delete":
                del parent[key]
            elif isinstance(parent, dict):  # add: a key beside it
                parent[f"extra_{key}"] = value
            else:
                parent.append(value)
        except (KeyError, IndexError, TypeError, AttributeError):
            continue  # the place is gone, or not a container any more
    return out


def check_plan_is_usable(p: sbconfig.Plan) -> None:
    """What the Snakefile computes from a plan before any job runs, none of which may
    raise for a plan that plan() accepted."""
    budget.describe(p)  # the progress estimate's prices (budget.jobs) and the summary
    heal.planned_outputs(p)
    for cell, replicate in p.bench_jobs:
        paths.cell_record(p.run, cell, replicate)
    for cell, replicate in p.paired_jobs:
        paths.paired_record(p.run, cell, replicate)
    for figure in p.figures:
        p.figure_cells(figure)
    if p.tasks:
        for task in {c.task for c in p.tasks.cells}:
            p.tasks.spec(task), p.tasks.cut(task)


@st.composite
def configs(draw):
    preset = draw(st.sampled_from(PRESETS))
    config = {**copy.deepcopy(BASE), "preset": preset}
    where = draw(st.sampled_from(["preset", "preset", "top"]))
    if where == "preset":
        config["presets"][preset] = mutate(
            config["presets"][preset], draw(mutations(config["presets"][preset]))
        )
        return config
    return mutate(config, draw(mutations({k: v for k, v in config.items() if k != "presets"})))


def named(message: str) -> bool:
    """Whether a refusal names where the config is wrong."""
    return any(s in message for s in ("config key ", "config file ", "tasks.yaml: tasks."))


@SETTINGS
@given(configs())
@example({**copy.deepcopy(BASE), "preset": "ci", "run": 123})  # digits: a run's name
@example({**copy.deepcopy(BASE), "preset": "ci", "seed": math.nan})
def test_a_mutated_config_is_planned_and_usable_or_refused_naming_its_key(config):
    try:
        p = sbconfig.plan(config, cuda=False)
    except ConfigError as refusal:
        assert named(str(refusal)), str(refusal)
        return
    check_plan_is_usable(p)


# --- records ---

CELL = Cell("mamba2", "torch", "prefill", 1, 64, 4, "fp32")


def valid_cell() -> dict:
    return make_record(model="mamba2", d_state=4, run="f", loaded="").to_dict()


def valid_paired() -> dict:
    return {**paired_record("mamba2", 1.4).to_dict(), "run": "f"}


# kind -> (a valid record, heal's check, the record's path in run "f", the full reader)
KINDS = {
    "cell": (valid_cell, heal._cell, paths.cell_record("f", CELL), records.read_record),
    "paired": (
        valid_paired,
        heal._paired,
        paths.paired_record("f", Cell("mamba2", "torch", "decode", 1, 256, 16, "fp32")),
        None,
    ),
}


@st.composite
def damaged(draw) -> tuple[str, bytes]:
    """A record kind and the bytes of a mutated record of it: its fields mutated, or its
    JSON text cut short or given a bare NaN / Infinity token."""
    kind = draw(st.sampled_from(sorted(KINDS)))
    data = KINDS[kind][0]()
    how = draw(st.sampled_from(["fields", "fields", "truncate", "token"]))
    if how == "fields":
        top = {k: v for k, v in data.items()}  # fields and, below them, their items
        data = mutate(data, draw(mutations(top)))
        text = json.dumps(data)
    elif how == "truncate":
        text = json.dumps(data)
        text = text[: draw(st.integers(min_value=0, max_value=len(text) - 1))]
    else:
        numbers = [k for k, v in data.items() if isinstance(v, float)]
        key = draw(st.sampled_from(numbers))
        token = draw(st.sampled_from(["NaN", "Infinity", "-Infinity"]))
        text = json.dumps({**data, key: "@@"}).replace('"@@"', token)
    return kind, text.encode()


@SETTINGS
@given(damaged())
def test_a_mutated_record_is_accepted_unchanged_or_named_and_moved_aside(tmp_path, case):
    kind, blob = case
    _, check, rel, read = KINDS[kind]
    root = tmp_path / f"r{abs(hash(blob)) % 10**9}"
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(blob)
    write_sidecars([str(path)], rule="fuzz")  # a sidecar made to match: only content checks
    why = heal.problem(str(path), check)
    if why is None:
        # accepted: unchanged, and every reader and table takes it
        assert path.read_bytes() == blob
        data = records.parse_json(blob, path)
        if read is not None:
            tables.cells_table([read(path)], [str(path)])
        else:
            validate_paired(data, path)
            paired = PairedRecord(**data)
            tables.paired_table([paired]), tables.pairs_table([paired])
        return
    assert why  # a reason, named in heal's line with the file
    aside = heal.move_aside(str(path))
    assert Path(aside).is_file() and not path.exists()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_fuzzed_records_start_valid(tmp_path, kind):
    """Without this, a fuzz whose every record is refused would pass."""
    make, check, _, _ = KINDS[kind]
    check(json.dumps(make()).encode(), "r.json")
