"""One function per figure, each drawn from one table; pandas and matplotlib, never torch.

Every figure colours a family the same way, draws a backend with the same line style
(:mod:`ssmbench.figures.style`), names the hardware, dtype and batch, shows cells that did
not run (``oom``, ``timeout``, ``unavailable``, ``failed``, ``not_run``) as labelled
markers instead of gaps, and draws a panel saying what is missing where its selection is
empty.  A figure reads the table ``ssmbench.config.FIGURE_TABLES`` names (cells by
default)::

    fig = figures.draw("latency_scaling", cells, phase="prefill")
    figures.save(fig, "latency.pdf", "latency.png")

Modules: ``style`` (colours, line styles, markers), ``data`` (selecting and shaping rows),
``compute`` (tokens per call, crossovers), ``panels`` (titles, missing panels, markers,
legends), and one per figure group: ``latency``, ``utilization``, ``energy``, ``memory``,
``ops``, ``decode``, ``verdict``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ssmbench.analysis import crossovers
from ssmbench.figures.decode import decode_graph_speedup
from ssmbench.figures.energy import energy_per_token
from ssmbench.figures.latency import latency_scaling, throughput, ttft_tpot_crossover
from ssmbench.figures.memory import memory_footprint
from ssmbench.figures.ops import op_breakdown
from ssmbench.figures.panels import plt
from ssmbench.figures.tasks import quality_vs_speed, task_accuracy
from ssmbench.figures.utilization import (
    bandwidth_utilization,
    compute_utilization,
    efficiency_sweep,
    roofline,
)
from ssmbench.figures.verdict import claims, go_no_go

FIGURES: dict[str, Callable[..., plt.Figure]] = {
    "latency_scaling": latency_scaling,
    "bandwidth_utilization": bandwidth_utilization,
    "compute_utilization": compute_utilization,
    "roofline": roofline,
    "memory_footprint": memory_footprint,
    "energy_per_token": energy_per_token,
    "op_breakdown": op_breakdown,
    "efficiency_sweep": efficiency_sweep,
    "decode_graph_speedup": decode_graph_speedup,
    "ttft_tpot_crossover": ttft_tpot_crossover,
    "throughput": throughput,
    "go_no_go": go_no_go,
    "claims": claims,
    "task_accuracy": task_accuracy,
    "quality_vs_speed": quality_vs_speed,
}


def draw(name: str, table, **filters) -> plt.Figure:
    """Draw figure ``name`` from its table (``ssmbench.config.FIGURE_TABLES``: the ops,
    claims, go/no-go or speed-ups table, else the cells table)."""
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


__all__ = ["FIGURES", "crossovers", "draw", "save", *FIGURES]
