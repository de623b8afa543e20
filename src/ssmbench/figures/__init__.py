"""One function per figure, each drawn from one table; pandas and matplotlib, never torch.

Every figure colours a family the same way, draws a backend with the same line style
(:mod:`ssmbench.figures.style`), names the hardware, dtype and batch, shows cells that did
not run (``oom``, ``timeout``, ``unavailable``, ``failed``, ``not_run``) as labelled
markers instead of gaps, and draws a panel saying what is missing where its selection is
empty.  A figure reads the table its entry of ``ssmbench.registry.FIGURES`` names (the
cells by default)::

    fig = figures.draw("latency_scaling", cells, phase="prefill")
    figures.save(fig, "latency.pdf", "latency.png")

Modules: ``style`` (colours, line styles, markers), ``data`` (selecting and shaping rows),
``panels`` (titles, missing panels, markers, legends), and one per figure group, named
by each figure's registry entry (``Figure.module``): ``latency``, ``utilization``,
``energy``, ``memory``, ``ops``, ``decode``, ``verdict``, ``tasks``, and ``compare`` (runs
side by side, from :func:`ssmbench.compare.compare_table`'s table).  :data:`FIGURES`
takes every drawing function from the module its entry names.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable

from ssmbench import registry
from ssmbench.analysis import crossovers
from ssmbench.figures.panels import plt

# figure name -> the function that draws it, ssmbench.figures.<module>.<name> of its entry
FIGURES: dict[str, Callable[..., plt.Figure]] = {
    name: getattr(importlib.import_module(f"ssmbench.figures.{f.module}"), name)
    for name, f in registry.FIGURES.items()
}


def draw(name: str, table, **filters) -> plt.Figure:
    """Draw figure ``name`` from its table (its ``registry.FIGURES`` entry's: the ops,
    claims, go/no-go, speed-ups or a task table, else the cells table)."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; known: {sorted(FIGURES)}")
    return FIGURES[name](table, **filters)


def save(fig: plt.Figure, *paths: str | os.PathLike) -> None:
    """Write ``fig`` to each path (format from the suffix); PDFs carry no creation date, so
    the same table gives the same bytes."""
    for path in paths:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        metadata = {"CreationDate": None} if str(path).endswith(".pdf") else {}
        fig.savefig(path, bbox_inches="tight", dpi=150, metadata=metadata)


__all__ = ["FIGURES", "crossovers", "draw", "save"]
