"""Shipped runs: which runs a folder of precollected results holds, and what kind each
is (a block run or a whole-model run), read off the tables it has; no pandas, no torch."""

from __future__ import annotations

import os
from pathlib import Path


def precollected_runs(directory: str | os.PathLike) -> list[str]:
    """Names of the runs shipped under ``directory`` (those with a cells or lm table)."""
    root = Path(directory)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if shipped_kind(p))


def shipped_kind(run_dir: str | os.PathLike) -> str | None:
    """``"blocks"`` or ``"lm"``: which table a shipped run has; None when neither."""
    tables = Path(run_dir) / "tables"
    if (tables / "cells.csv").is_file():
        return "blocks"
    if (tables / "lm.csv").is_file():
        return "lm"
    return None


def compared_runs(directory: str | os.PathLike) -> list[str]:
    """The shipped runs the cross-device comparison draws (``ssmbench.compare``): the block
    runs, less those with tasks, whose cells time the tasks' models rather than a sweep."""
    root = Path(directory)
    return [
        run
        for run in precollected_runs(root)
        if shipped_kind(root / run) == "blocks"
        and not (root / run / "tables" / "tasks.csv").is_file()
    ]
