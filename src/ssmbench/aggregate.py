"""A run's records -> its tables: the one module that joins the cells, samples, paired,
pairs, verify, ops, claims and workload tables (``ssmbench.tables`` builds each,
``ssmbench.claims`` checks the published claims against the cells, ``ssmbench.workload``
says what each cell asks of a processor), so that neither imports the other."""

from __future__ import annotations

from collections.abc import Iterable

from ssmbench import claims
from ssmbench.paired import read_paired
from ssmbench.records import read_device, read_record, read_verify
from ssmbench.tables import (
    KEYS,
    cells_table,
    ops_table,
    paired_table,
    pairs_table,
    samples_table,
    verify_table,
)
from ssmbench.workload import size_of, workload_table


def read_tasks(path):
    """A run's tasks.csv (ssmbench.tasks.table), or None."""
    if path is None:
        return None
    import pandas as pd

    return pd.read_csv(path, keep_default_na=False, na_values=[""])


def aggregate(
    cell_paths: Iterable[str],
    verify_paths: Iterable[str],
    run: str,
    ops_paths=(),
    extra=(),
    paired_paths=(),
    paired_extra=(),
    tasks_path=None,
    device_path=None,
) -> dict:
    """Read every record of a run and return its tables by file name; ``extra`` and
    ``paired_extra`` records (the rows of cells and paired cells a stopped run left
    unmeasured, ssmbench.finish) join them.  ``tasks_path``: the run's tasks.csv, which
    the task claims read (a run without tasks has none); ``device_path``: its device.json,
    whose dispatch cost and ceilings' spread the cells' floors read (``ssmbench.floors``)."""
    cell_paths, extra = list(cell_paths), list(extra)
    records = [read_record(p) for p in cell_paths] + extra
    paired = [read_paired(p) for p in paired_paths] + list(paired_extra)
    verify_records = [read_verify(p) for p in verify_paths]
    sources = cell_paths + [f"(a not_run row of {r.model}/{r.backend})" for r in extra]
    device = read_device(device_path) if device_path else None
    cells = cells_table(records, sources, device)
    samples = samples_table(records)
    sizes = {tuple(getattr(r, k) for k in KEYS): size_of(r.size) for r in records}
    return {
        "cells": cells,
        "samples": samples,
        "paired": paired_table(paired),
        "pairs": pairs_table(paired),
        "verify": verify_table(run, verify_records),
        "ops": ops_table(ops_paths),
        # config/claims.yaml against this run, ratios with their intervals
        "claims": claims.evaluate(cells, run, samples=samples, tasks=read_tasks(tasks_path)),
        "workload": workload_table(cells, sizes),
    }
