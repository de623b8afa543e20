"""Shared fixtures: copies of the workflow and finished runs of the presets the suite
needs (one per session each), a Snakemake runner, one torch thread, where the seed
studies' published data lives, and builders of valid records.

Every test that starts Snakemake takes its workflow from :func:`pristine_workflow` (the
workflow copied once per session, without shipped runs), directly or through another
fixture; :func:`pytest_collection_modifyitems` marks each such test ``slow``, so
``make test-fast`` (``-m "not slow"``) leaves it out, and :func:`snakemake` refuses to
start Snakemake for a test that is not marked so (no test is marked slow by hand for it).

``make test`` spreads the tests over pytest-xdist's workers: a module's tests run on one
worker, so its module fixtures are made once, and the modules that read one finished run
share the worker that made it (:func:`pytest_xdist_make_scheduler`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from ssmbench.paths import REPO
from ssmbench.scripting import copy_workflow

# the fixture every workflow copy comes from: a test that takes it (however indirectly)
# starts Snakemake, and is slow
WORKFLOW_FIXTURE = "pristine_workflow"
_RUNNING: dict[str, pytest.Item | None] = {"item": None}


# The finished runs below, made once per session (per worker under pytest-xdist).
SHARED_RUNS = ("ci_run", "lm_ci_run", "tasks_ci_run")
TESTS = Path(__file__).parent


def _run_of_module() -> dict[str, str]:
    """``{module nodeid: finished run}`` for every test module whose source names one of
    :data:`SHARED_RUNS` (pytest-xdist's controller, which schedules, collects nothing)."""
    names = re.compile(r"\b(" + "|".join(SHARED_RUNS) + r")\b")
    runs = {}
    for module in sorted(TESTS.rglob("test_*.py")):
        found = set(names.findall(module.read_text()))
        if len(found) > 1:
            raise pytest.UsageError(f"{module} reads {sorted(found)}: one finished run a module")
        if found:
            runs[module.relative_to(REPO).as_posix()] = found.pop()
    return runs


RUN_OF_MODULE = _run_of_module()


def _group(nodeid: str) -> str:
    """The tests that run on one worker: a module's, or all of those that read one
    finished run (which that worker makes, and no other)."""
    module = nodeid.split("::")[0]
    return RUN_OF_MODULE.get(module, module)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``make test``'s workers take whole groups (:func:`_group`), in collection order."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    return GroupScheduling(config, log)


def pytest_configure(config):
    """On a pytest-xdist worker, torch computes on one thread: the workers already keep the
    cores busy, and two threads per worker would wait on each other (a measuring test sets
    its own count, as a cell does)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` every test whose fixtures include the pristine workflow; put the
    groups with slow tests first (so the longest do not start last and leave one worker
    finishing alone), each group's tests together."""
    for item in items:
        if WORKFLOW_FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
        run = next((name for name in item.fixturenames if name in SHARED_RUNS), None)
        if run is not None and _group(item.nodeid) != run:
            raise pytest.UsageError(f"{item.nodeid} reads {run}, its module is not grouped so")
    groups: dict[str, list] = defaultdict(list)
    for item in items:
        groups[_group(item.nodeid)].append(item)
    slow_first = sorted(
        groups.values(), key=lambda g: not any(i.get_closest_marker("slow") for i in g)
    )
    items[:] = [item for group in slow_first for item in group]


def pytest_runtest_setup(item):
    _RUNNING["item"] = item


SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
# The seed studies' published data: ../shared/anchors beside the repository, or
# SSMBENCH_ANCHORS.  Tests that need it skip, naming this path, where it is absent.
ANCHORS = Path(os.environ.get("SSMBENCH_ANCHORS") or REPO.parent / "shared" / "anchors")


@pytest.fixture
def one_thread():
    """torch on one thread, seeded, for the test (restored after)."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(saved)


def snakemake(workdir: Path, *args: str, env: dict | None = None, timeout: int = 900):
    """Run Snakemake in ``workdir``; return the CompletedProcess (never raises on failure).
    Refused for a test that is not marked slow: its workflow must come from a fixture over
    :func:`pristine_workflow`, which marks it."""
    item = _RUNNING["item"]
    if item is not None and item.get_closest_marker("slow") is None:
        raise AssertionError(
            f"{item.nodeid} starts Snakemake without a workflow fixture (pristine_workflow, "
            "workflow_copy, new_workflow, or a finished run's): take one, and it is marked slow"
        )
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [SNAKEMAKE, "--cores", "2", *args],
        cwd=workdir,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


NOTEBOOKS = REPO / "notebooks"


def draw_notebook(name: str, table: Path, out_dir: Path) -> None:
    """Execute ``notebooks/<name>.ipynb`` with papermill on the cells (or lm) table
    ``table``, as rule figure does; it must write a PDF and a PNG of some size."""
    import papermill

    papermill.execute_notebook(
        str(NOTEBOOKS / f"{name}.ipynb"),
        str(out_dir / "executed.ipynb"),
        parameters=dict(
            cells_path=str(table),
            out_pdf=str(out_dir / "fig.pdf"),
            out_png=str(out_dir / "fig.png"),
        ),
        kernel_name="python3",
        cwd=str(NOTEBOOKS),
        progress_bar=False,
    )
    assert (out_dir / "fig.pdf").stat().st_size > 1000
    assert (out_dir / "fig.png").stat().st_size > 1000


def succeeded(out: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """``out`` of a Snakemake run that must have succeeded; else fail with its output's end."""
    assert out.returncode == 0, f"snakemake failed:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}"
    return out


@pytest.fixture(scope="session")
def pristine_workflow(tmp_path_factory) -> Path:
    """The workflow as a clean clone holds it, without shipped runs, copied once per
    session: every other copy is a copy of this one."""
    return copy_workflow(tmp_path_factory.mktemp("pristine") / "wf", precollected=False)


def clone(pristine: Path, dest: Path, shipped=()) -> Path:
    """A copy of the pristine workflow at ``dest`` with the shipped runs ``shipped``
    (names under results/precollected/: only those a test reads)."""
    shutil.copytree(pristine, dest, symlinks=True)
    for run in shipped:
        shipped_run = Path("results") / "precollected" / run
        shutil.copytree(REPO / shipped_run, dest / shipped_run)
    return dest


@pytest.fixture
def new_workflow(pristine_workflow, tmp_path):
    """``new_workflow(shipped=("cpu",), name="wf")``: a fresh copy of the workflow in the
    test's temporary folder, with the shipped runs named."""
    return lambda shipped=(), name="wf": clone(pristine_workflow, tmp_path / name, shipped)


@pytest.fixture
def workflow_copy(new_workflow) -> Path:
    """A fresh copy of the workflow, without shipped runs."""
    return new_workflow()


def finished_run(pristine: Path, dest: Path, preset: str, timeout: int = 1200):
    """A copy of the workflow at ``dest`` and the finished run of ``preset`` in it:
    (workflow, Snakemake's CompletedProcess); fails the tests that need it when the run
    fails."""
    wf = clone(pristine, dest)
    out = succeeded(snakemake(wf, "--config", f"preset={preset}", timeout=timeout))
    return wf, out


# The finished runs of the presets the suite reads, each made once per session and kept
# with its outputs and logs; a test that changes one works on its own copy.


@pytest.fixture(scope="session")
def ci_run(pristine_workflow, tmp_path_factory) -> Path:
    """The finished ``ci`` run (block cells): the workflow folder."""
    return finished_run(pristine_workflow, tmp_path_factory.mktemp("ci") / "wf", "ci")[0]


@pytest.fixture(scope="session")
def lm_ci_run(pristine_workflow, tmp_path_factory):
    """The finished ``lm-ci`` run (whole models): (workflow, Snakemake's output)."""
    return finished_run(pristine_workflow, tmp_path_factory.mktemp("lm") / "wf", "lm-ci")


@pytest.fixture(scope="session")
def tasks_ci_run(pristine_workflow, tmp_path_factory):
    """The finished ``tasks-ci`` run (the quality axis): (workflow, Snakemake's output)."""
    return finished_run(pristine_workflow, tmp_path_factory.mktemp("tasks") / "wf", "tasks-ci")


def bare_plan(run: str = "r", cells=(), **changes):
    """A real :class:`ssmbench.config.Plan` of the ``ci`` preset cut down to ``cells`` under
    run ``run``: no pairs, paired cells, profiles, headline or figures, with ``changes``
    on top (``dataclasses.replace``), for tests that need a plan of their own cells."""
    import dataclasses

    from ssmbench import config as sbconfig

    ci = sbconfig.plan(sbconfig.load(overrides={"preset": "ci"}), cuda=False)
    empty = dict(
        pairs=(),
        paired=(),
        profiled=frozenset(),
        headline=frozenset(),
        random_cache=frozenset(),
        cell_replicates={},
        paired_replicates={},
        figures={},
    )
    return dataclasses.replace(ci, run=run, cells=tuple(cells), **{**empty, **changes})


# Record builders: valid records of small cells, with the fields a test changes.

RECORD_SIZE = {
    "d_model": 32,
    "n_layers": 1,
    "n_heads": 2,
    "head_dim": 16,
    "expand": 2,
    "d_conv": 4,
    "chunk": 16,
}


def make_record(**kw):
    """A valid ok CellRecord of a small mamba prefill, with ``kw`` changed."""
    from ssmbench.records import CellRecord

    base = dict(
        run="t",
        model="mamba",
        backend="torch",
        phase="prefill",
        batch=1,
        seq_len=64,
        d_state=4,
        dtype="fp32",
        device="cpu",
        size=RECORD_SIZE,
        samples_ms=[1.0, 2.0, 3.0],
        n_samples=3,
        time_ms_median=2.0,
        time_ms_p95=2.9,
        tokens=64,
        flop=1e6,
        bytes=1e4,
        intensity=100.0,
    )
    base.update(kw)
    return CellRecord(**base)


def sampled_record(samples, **kw):
    """:func:`make_record` holding ``samples`` (ms), with their count, median and P95."""
    import numpy as np

    samples = [float(s) for s in samples]
    return make_record(
        samples_ms=samples,
        n_samples=len(samples),
        time_ms_median=float(np.median(samples)),
        time_ms_p95=float(np.percentile(samples, 95)),
        **kw,
    )


def paired_record(model, ratio, n=30, noise=0.02, seed=0, **kw):
    """A paired decode record of ``model`` against attention: ``n`` rounds whose true ratio
    is ``ratio``, with ``noise`` and a 50% drift shared by both sides."""
    import numpy as np

    from ssmbench.paired import PairedRecord

    rng = np.random.default_rng(seed)
    drift = np.linspace(1.0, 1.5, n)  # the machine slows down during the pair
    ssm = drift * (1 + noise * rng.standard_normal(n))
    attention = ratio * drift * (1 + noise * rng.standard_normal(n))
    fields = dict(
        run="t",
        model=model,
        backend="torch",
        phase="decode",
        batch=1,
        seq_len=256,
        d_state=16,
        dtype="fp32",
        device="cpu",
        size=RECORD_SIZE,
        n_rounds=n,
        attention_samples_ms=list(attention),
        ssm_samples_ms=list(ssm),
        attention_ms=float(np.median(attention)),
        ssm_ms=float(np.median(ssm)),
        latency_ratio=float(np.median(attention) / np.median(ssm)),
        attention_flop=2.0,
        ssm_flop=1.0,
    )
    return PairedRecord(**{**fields, **kw})


def set_up_and_one_call_s(cell_spec) -> float:
    """Wall seconds this machine takes, now, to set a cell up (a ``CellSpec``) and time one
    call: the part of a cell's budget that goes before its samples.  A test that gives a
    cell a budget sizes it from this, not from what one machine once took."""
    import dataclasses
    import time

    from ssmbench.cell import run_cell
    from ssmbench.matrix import Timing

    one = Timing(warmup=0, min_samples=1, max_samples=1, min_time_s=0.0, max_time_s=60.0)
    start = time.monotonic()
    r = run_cell(dataclasses.replace(cell_spec, timing=one), threads=1)
    assert r.status == "ok", r.reason
    return time.monotonic() - start
