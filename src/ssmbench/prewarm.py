"""Pay a backend's per-process compile and autotuning costs once, before the cells.

A fused cell's first call compiles its Triton kernels and autotunes them (mamba_ssm's and
fla's kernels try several launch configurations per shape, each compiled and timed);
torch.compile's first call traces and generates code.  Each cell is a fresh process, so
without help every cell would pay these inside its warm-up, and a long autotune could
run into the cell's timeout.  The workflow points every job at one Triton cache with
autotuning results kept (``TRITON_CACHE_DIR``, ``TRITON_CACHE_AUTOTUNING=1``; Inductor's
caches are on disk by default), and a ``prewarm`` job per (model, backend, dtype) runs
each of the run's cells of that group once, untimed, at the cell's own shape: prefill
forward, decode step (after the prefill that builds its cache), training forward and
backward.  The later cells then load compiled kernels and tuned configurations from disk.

Nothing here is a measurement: the record says which shapes ran, how long each took and
what failed, so that a slow autotune shows up in the run's data and not as a cell's
timeout.  A shape that fails is recorded and the rest still run.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable

from ssmbench.matrix import Cell
from ssmbench.registry import verified_backend

# backends whose kernels are compiled or tuned per process (graph backends share their
# base's kernels, so a fused-graph cell is prewarmed by its base's job)
PREWARM_BACKENDS = ("fused", "compile")


def prewarm_groups(cells: Iterable[Cell]) -> dict[tuple[str, str, str], list[Cell]]:
    """(model, backend, dtype) -> the cells one prewarm job runs, one per distinct shape
    and phase (a graph cell counts as a decode cell of its base backend)."""
    groups: dict[tuple[str, str, str], set[Cell]] = defaultdict(set)
    for c in cells:
        backend = verified_backend(c.backend)
        if backend not in PREWARM_BACKENDS:
            continue
        if c.backend != backend:  # the graph replays the base backend's decode step
            c = Cell(c.model, backend, c.phase, c.batch, c.seq_len, c.d_state, c.dtype)
        groups[(c.model, backend, c.dtype)].add(c)
    return {key: sorted(group, key=_cost_order) for key, group in sorted(groups.items())}


def _cost_order(c: Cell) -> tuple:
    """Cheapest shapes first, so a job stopped at its budget has covered the most cells."""
    return (c.batch * c.seq_len, c.phase, c.d_state)


def prewarm(spec_of, cells: Iterable[Cell], verify: dict, budget_s: float) -> dict:
    """Run each cell's work once, untimed, and return what ran.

    ``spec_of(cell)`` gives the cell's :class:`ssmbench.cell.CellSpec`; ``verify`` is the
    verify record of the group's backend: a phase runs only where its verification
    passed (a kernel that failed it may fault); ``budget_s`` bounds the job: shapes not
    reached in it are ``skipped``.  Returns a JSON-serialisable record: status (``done``;
    ``partial`` when a shape failed or was skipped; ``skipped`` when no phase passed
    verification), and one entry per shape.
    """
    import torch

    from ssmbench.cell import _model_and_input, phase_work
    from ssmbench.records import phase_verdict

    cells = list(cells)
    record = {"status": "done", "reason": "", "budget_s": budget_s, "shapes": []}
    verdicts = {c.phase: phase_verdict(verify, c.phase) for c in cells}
    if all(status != "passed" for status, _ in verdicts.values()):
        record.update(status="skipped", reason=f"verification {verify.get('status')}")
        return record
    start, ran = time.monotonic(), 0
    for c in cells:
        entry = {"phase": c.phase, "batch": c.batch, "seq_len": c.seq_len, "d_state": c.d_state}
        status, reason = verdicts[c.phase]
        if status != "passed":
            entry.update(status="skipped", reason=f"verification {status}: {reason}"[:300])
            record["shapes"].append(entry)
            continue
        if ran and time.monotonic() - start > budget_s:  # the first shape always runs
            entry.update(status="skipped", reason=f"prewarm budget of {budget_s:g} s spent")
            record["shapes"].append(entry)
            continue
        began, ran = time.monotonic(), ran + 1
        try:
            spec = spec_of(c)
            model, x = _model_and_input(spec)
            work = phase_work(c, model, x, spec.cache_source)  # prefill and decode: a call
            with torch.inference_mode(not work.train):
                work.fn()
            if spec.device == "cuda":
                torch.cuda.synchronize()
            entry["status"] = "done"
        except Exception as e:  # recorded: the cell itself will say what it makes of it
            entry.update(status="failed", reason=f"{type(e).__name__}: {str(e)[:300]}")
        finally:
            entry["seconds"] = round(time.monotonic() - began, 3)
            model = x = work = None  # noqa: F841  (free the shape's memory before the next)
        record["shapes"].append(entry)
    if any(e["status"] == "failed" or "budget" in e.get("reason", "") for e in record["shapes"]):
        record["status"] = "partial"
        record["reason"] = "; ".join(
            f"{e['phase']} b{e['batch']} t{e['seq_len']}: {e['status']} {e.get('reason', '')}"
            for e in record["shapes"]
            if e["status"] != "done"
        )
    record["seconds"] = round(time.monotonic() - start, 3)
    return record
