"""Three floors under every cell's measured time: dispatch, bandwidth and compute.

A cell cannot run faster than any of these (each a time in seconds):

* ``t_dispatch_s = n_ops x dispatch cost``: the operator dispatches (CPU, eager ATen ops)
  or kernel launches (GPU) one timed call makes (the record's ``n_ops``, counted in an
  untimed call), times the fixed cost of one, measured by ``calibrate`` (device.json's
  ``dispatch`` block: ``eager_us`` for eager cells, ``graph_us``, the per-kernel cost
  inside a CUDA-graph replay, for graph cells).  This is what a small-state recurrence
  pays per step and what CUDA graphs, fusion or another processor would remove.
* ``t_bandwidth_s = bytes / measured copy bandwidth``: the cell's minimum bytes
  (``ssmbench.counts``) at the rate of the largest copy the device sustains.
* ``t_compute_s = flop / measured matmul rate of the cell's compute_dtype``: the GEMM is
  the fastest kernel a device has for its arithmetic (tensor cores, or the CPU's widest
  FMA units at full occupancy), so the rate of a large matmul in the precision the cell's
  operator computes in is the highest rate any of the cell's FLOPs could run at; a scan's
  elementwise FLOPs run slower still, which the floor then does not explain.

``bound`` names the largest floor, ``explained`` is that floor over the measured median
(1 means the cell runs at its floor; 0.1 that nine tenths of its time lies elsewhere).

A cell measured below one of its floors, by more than the spread of the ceiling it rests
on (the ceiling's best sample rather than its median), is flagged (``floor_flag``): its
bytes fit in the last-level cache (``cache_resident``, a bandwidth floor the memory does
not set) or it beats the floor outright (``below_floor``: the count or the ceiling is
wrong, never a result to plot as one).

Reads tables and the device record only: pandas and numpy, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ssmbench.registry import GRAPH_BACKENDS

FLOORS = ("dispatch", "bandwidth", "compute")  # the order ties are broken in
FLOOR_TIMES = [f"t_{name}_s" for name in FLOORS]
FLOOR_COLUMNS = [*FLOOR_TIMES, "bound", "explained", "floor_flag"]
FLAG_REASONS = ("cache_resident", "below_floor")
GRAPH_KIND = "graph_kernels"  # n_ops_kind of a graph replay's kernels
# the words a projection is printed under, everywhere it is printed
PROJECTION = "PROJECTION"


@dataclass(frozen=True)
class Slack:
    """How much faster than a ceiling's median its best sample was, per floor: a floor
    at the best sample is the median floor times these factors (each <= 1).  A cell is
    only flagged below that."""

    dispatch: float = 1.0
    bandwidth: float = 1.0
    dispatch_graph: float = 1.0  # a kernel inside a CUDA-graph replay
    compute: dict = field(default_factory=dict)  # compute_dtype -> factor

    def compute_for(self, dtype: str) -> float:
        return self.compute.get(dtype, 1.0)


def dispatch_cost_us(device: dict | None, graph: bool) -> float | None:
    """The fixed cost of one dispatch (microseconds) from a device record's ``dispatch``
    block: ``graph_us`` for a graph replay's kernels, else ``eager_us``; None for a record
    without the block (every record older than it, the shipped runs') or without that
    cost (a CPU has no graph replay)."""
    block = (device or {}).get("dispatch") or {}
    value = block.get("graph_us" if graph else "eager_us")
    return float(value) if value is not None else None


def slack(device: dict | None) -> Slack:
    """The ceilings' spread in ``device`` (a device.json record) as :class:`Slack`: the
    copy's best sample over its median, each matmul dtype's likewise, and the dispatch
    costs' (eager, graph) smallest sample over their median; 1 (no allowance) where the
    record has no samples."""
    device = device or {}
    copy = device.get("copy") or {}
    bandwidth = _best_over_median(copy.get("samples_gbps"), copy.get("gbps"))
    compute = {
        dtype: _best_over_median(m.get("samples_tflops"), m.get("tflops"))
        for dtype, m in (device.get("matmul") or {}).items()
    }
    block = device.get("dispatch") or {}
    return Slack(
        dispatch=_fastest_over_median(block.get("eager_spread_us"), block.get("eager_us")),
        bandwidth=bandwidth,
        dispatch_graph=_fastest_over_median(block.get("graph_spread_us"), block.get("graph_us")),
        compute=compute,
    )


def _fastest_over_median(spread, median) -> float:
    """min(spread) / median: how much lower a dispatch floor at its fastest sample is."""
    if not spread or not median:
        return 1.0
    return min(min(spread) / float(median), 1.0)


def _best_over_median(samples, median) -> float:
    """median / max(samples): how much lower the floor at the best sample is (<= 1)."""
    if not samples or not median:
        return 1.0
    return min(float(median) / max(samples), 1.0)


def _numeric(cells: pd.DataFrame, column: str) -> pd.Series:
    if column not in cells:
        return pd.Series(np.nan, index=cells.index, dtype=float)
    return pd.to_numeric(cells[column], errors="coerce").astype(float)


def _text(cells: pd.DataFrame, column: str) -> pd.Series:
    if column not in cells:
        return pd.Series("", index=cells.index, dtype=object)
    return cells[column].astype(object).where(cells[column].notna(), "").astype(str)


def is_graph(cells: pd.DataFrame) -> pd.Series:
    """Whether each row's operator count is a graph replay's kernels: its ``n_ops_kind``
    says so, or (where the row has none) its backend is a graph backend."""
    kind = _text(cells, "n_ops_kind")
    by_backend = _text(cells, "backend").isin(list(GRAPH_BACKENDS))
    return (kind == GRAPH_KIND) | ((kind == "") & by_backend)


def floor_times(
    cells: pd.DataFrame,
    bw_gbps: pd.Series | float,
    tflops: pd.Series | float,
    eager_us: float | None,
    graph_us: float | None,
) -> pd.DataFrame:
    """The three floors (seconds) of each row of ``cells`` at the given ceilings:
    bandwidth in GB/s and compute in TFLOP/s (a value per row, or one for all), the
    dispatch cost of an eager op and of a graph's kernel in microseconds (None: unknown,
    the floor is NaN)."""
    n_ops = _numeric(cells, "n_ops")
    per_op_us = pd.Series(
        np.where(is_graph(cells), _or_nan(graph_us), _or_nan(eager_us)), index=cells.index
    )
    out = pd.DataFrame(index=cells.index)
    out["t_dispatch_s"] = n_ops * per_op_us * 1e-6
    out["t_bandwidth_s"] = _numeric(cells, "bytes") / (_positive(bw_gbps) * 1e9)
    out["t_compute_s"] = _numeric(cells, "flop") / (_positive(tflops) * 1e12)
    return out


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def _positive(value):
    """``value`` with zeros and negatives as NaN (a ceiling that was not measured)."""
    if isinstance(value, pd.Series):
        return value.where(value > 0)
    return value if value and value > 0 else float("nan")


def bound_of(times: pd.DataFrame) -> pd.Series:
    """The name of each row's largest floor ("" where it has none), ties in FLOORS order."""
    values = times[FLOOR_TIMES].to_numpy(float)
    has = ~np.isnan(values).all(axis=1)
    index = np.argmax(np.where(np.isnan(values), -np.inf, values), axis=1)
    names = np.array(FLOORS, dtype=object)[index]
    return pd.Series(np.where(has, names, ""), index=times.index, dtype=object)


def with_floors(cells: pd.DataFrame, device: dict | None = None) -> pd.DataFrame:
    """``cells`` with :data:`FLOOR_COLUMNS` (replacing any it had): the floors at the
    ceilings each row names (``ceiling_bw_gbps``, ``ceiling_tflops`` at its compute dtype)
    and the dispatch cost of ``device`` (its device.json record; None: no dispatch floor),
    the bound, ``explained`` for rows with a measured time, and the flag of a row
    measured below a floor by more than the ceiling's spread (:func:`flags`)."""
    out = cells.copy()
    times = floor_times(
        cells,
        _numeric(cells, "ceiling_bw_gbps"),
        _numeric(cells, "ceiling_tflops"),
        dispatch_cost_us(device, graph=False),
        dispatch_cost_us(device, graph=True),
    )
    for column in FLOOR_TIMES:
        out[column] = times[column]
    out["bound"] = bound_of(times)
    measured_s = _numeric(cells, "time_ms_median") * 1e-3
    ok = _text(cells, "status") == "ok"
    largest = times[FLOOR_TIMES].max(axis=1, skipna=True)
    out["explained"] = (largest / measured_s).where(ok & (measured_s > 0))
    out["floor_flag"] = flags(cells, times, slack(device), _llc_bytes(cells, device))
    return out


def _llc_bytes(cells: pd.DataFrame, device: dict | None) -> pd.Series:
    """The last-level cache each row names (``llc_bytes``), else the device record's."""
    llc = _numeric(cells, "llc_bytes")
    fallback = (device or {}).get("llc_bytes")
    return llc.fillna(float(fallback)) if fallback else llc


def flags(
    cells: pd.DataFrame, times: pd.DataFrame, allowance: Slack, llc_bytes: pd.Series
) -> pd.Series:
    """Per row, "" or ``<reason>: <floors>``: the floors (``+``-joined, FLOORS order) an ok
    row's median lies below, each taken at its ceiling's best sample (``allowance``);
    reason ``cache_resident`` when the bandwidth floor is the only one beaten and the
    row's bytes fit in the last-level cache, else ``below_floor``."""
    measured_s = _numeric(cells, "time_ms_median") * 1e-3
    ok = (_text(cells, "status") == "ok") & measured_s.notna()
    dtypes = _text(cells, "compute_dtype")
    per_op = is_graph(cells).map({True: allowance.dispatch_graph, False: allowance.dispatch})
    lowest = {
        "dispatch": times.t_dispatch_s * per_op.astype(float),
        "bandwidth": times.t_bandwidth_s * allowance.bandwidth,
        "compute": times.t_compute_s * dtypes.map(allowance.compute_for).astype(float),
    }
    resident = _numeric(cells, "bytes") <= llc_bytes
    out = pd.Series("", index=cells.index, dtype=object)
    for i in cells.index[ok]:
        beaten = [f for f in FLOORS if lowest[f][i] > measured_s[i]]
        if not beaten:
            continue
        reason = "cache_resident" if beaten == ["bandwidth"] and resident[i] else "below_floor"
        out[i] = f"{reason}: {'+'.join(beaten)}"
    return out


def has_floors(cells: pd.DataFrame) -> bool:
    """Whether ``cells`` carries the floor columns (a table aggregated since they exist)."""
    return all(c in cells for c in FLOOR_COLUMNS)


def ensure_floors(cells: pd.DataFrame) -> pd.DataFrame:
    """``cells`` as it is where it carries its floors, else with them computed from its
    own columns (a shipped table from before them: bandwidth and compute floors, no
    dispatch floor, flags without the ceilings' spread)."""
    return cells if has_floors(cells) else with_floors(cells, None)


def dispatch_missing(cells: pd.DataFrame) -> bool:
    """Whether no row of ``cells`` has a dispatch floor (no ``n_ops``, or no dispatch
    cost in its run's device record)."""
    return "t_dispatch_s" not in cells or not _numeric(cells, "t_dispatch_s").notna().any()


def flagged_lines(cells: pd.DataFrame) -> list[str]:
    """One line per flagged row: the cell, the flag, its median and the floor beaten."""
    if "floor_flag" not in cells:
        return []
    rows = cells[_text(cells, "floor_flag") != ""]
    lines = []
    for r in rows.itertuples():
        beaten = r.floor_flag.split(": ", 1)[1].split("+")
        floors = ", ".join(f"{f} floor {_ms(getattr(r, f't_{f}_s'))}" for f in beaten)
        lines.append(
            f"{r.model}/{r.backend} {r.phase} T = {int(r.seq_len)}, batch {int(r.batch)}, "
            f"{r.dtype}: {r.floor_flag} (measured {_ms(r.time_ms_median * 1e-3)}, {floors})"
        )
    return lines


def _ms(seconds: float) -> str:
    return "n/a" if seconds is None or math.isnan(seconds) else f"{seconds * 1e3:.3g} ms"


def projected(
    cells: pd.DataFrame, bandwidth_gbps: float, peak_tflops: dict, dispatch_us: float | None
) -> pd.DataFrame:
    """The floors of each row of ``cells`` on another device, a :data:`PROJECTION`: its
    datasheet bandwidth (GB/s) and peak per compute dtype (TFLOP/s; None where it has no
    such mode), and a stated dispatch cost per op (microseconds, for eager and graph
    rows alike; None: no dispatch floor).  Columns: the three floors and the bound."""
    dtypes = _text(cells, "compute_dtype")
    peaks = dtypes.map(lambda d: (peak_tflops or {}).get(d)).astype(float)
    times = floor_times(cells, bandwidth_gbps, peaks, dispatch_us, dispatch_us)
    times["bound"] = bound_of(times)
    return times
