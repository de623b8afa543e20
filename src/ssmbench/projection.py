"""``python -m ssmbench floors --device NAME``: each cell's floors on another device, a
PROJECTION from its datasheet, never a measurement.

The work of a cell (FLOPs, minimum bytes, operator count) does not depend on the device;
its floors do (:mod:`ssmbench.floors`).  On a catalogue device (``ssmbench.catalogue``:
datasheet bandwidth and peak per dtype, with their sources) the projected floors are the
same work over that device's numbers, and the dispatch cost per op is either measured
there (the ``dispatch`` block of a run on that device) or an assumption stated with its
source (``--dispatch-us``, ``--dispatch-source``); with neither, there is no dispatch
floor and the output says so.  Where the run was measured on the named device, each
cell's measured median and measured floors are printed beside the projection, so the
projection is checked wherever data exists.  Reads tables and JSON only: no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ssmbench.floors import FLOORS, PROJECTION, dispatch_cost_us, projected, with_floors
from ssmbench.records import read_device
from ssmbench.tables import read_cells

DEFAULT_RUN = Path("results/precollected/cpu")


@dataclass(frozen=True)
class Dispatch:
    """The dispatch cost a projection uses: microseconds per op (None: unknown) and where
    the number comes from, in words."""

    us: float | None
    source: str


def catalogue_device(name: str):
    """The catalogue's entry ``name`` (``ssmbench.catalogue.device``)."""
    from ssmbench import catalogue

    return catalogue.device(name)


# a device record's "device" -> the catalogue's kind
KIND = {"cpu": "cpu", "cuda": "gpu"}


def same_device(entry, device: dict | None) -> bool:
    """Whether a run's device record was measured on the catalogue ``entry``: the same
    kind, and the record's device name matched by the entry's patterns
    (``catalogue.Device.matches``, as ``catalogue.match`` names a run's device)."""
    if not device or KIND.get(device.get("device")) != entry.kind:
        return False
    return entry.matches(str(device.get("device_name") or ""))


def dispatch_for(entry, device: dict | None, stated_us: float | None, source: str) -> Dispatch:
    """The stated cost where given (with its source), else the one measured by a run on
    ``entry``, else none."""
    if stated_us is not None:
        return Dispatch(stated_us, source or "stated on the command line (--dispatch-us)")
    measured = dispatch_cost_us(device, graph=False) if same_device(entry, device) else None
    if measured is not None:
        return Dispatch(measured, f"measured on {device.get('device_name')} by calibrate")
    return Dispatch(None, f"unknown: no --dispatch-us, and no run on {entry.name} measured it")


@dataclass(frozen=True)
class Roofs:
    """The numbers a projection divides by: bandwidth (GB/s) and peak per dtype
    (TFLOP/s), each the datasheet's, or where the catalogue has none (a CPU class) and the
    run was measured on the device, the run's measured ceiling standing in; and what each
    is, in words."""

    bandwidth_gbps: float | None
    peak_tflops: dict
    said: list


def roofs(entry, device: dict | None, measured_here: bool) -> Roofs:
    """:class:`Roofs` of ``entry``: its datasheet numbers; a null one is the run's measured
    ceiling where the run was there (said so), else missing with the catalogue's note."""
    ceilings = ((device or {}).get("ceilings") or {}) if measured_here else {}
    notes = getattr(entry, "notes", {}) or {}
    said = []
    bandwidth = entry.bandwidth_GBps
    if bandwidth is None:
        bandwidth = ceilings.get("bw_gbps")
        said.append(_stand_in("bandwidth", bandwidth, "GB/s", notes.get("bandwidth_GBps")))
    else:
        said.append(f"bandwidth {bandwidth:g} GB/s (datasheet)")
    peaks = {}
    for dtype, peak in sorted((entry.peak_TFLOPs or {}).items()):
        if peak is None:
            peak = (ceilings.get("tflops") or {}).get(dtype)
            if peak is not None:  # a mode without a datasheet number nor a measurement: unsaid
                said.append(_stand_in(f"{dtype} peak", peak, "TFLOP/s", None))
        else:
            said.append(f"{dtype} peak {peak:g} TFLOP/s (datasheet)")
        peaks[dtype] = peak
    return Roofs(bandwidth, peaks, said)


def _stand_in(what: str, value: float | None, unit: str, note: str | None) -> str:
    if value is not None:
        return f"{what} {value:.4g} {unit} (no datasheet number: the run's measured ceiling)"
    return f"{what}: none ({note or 'no datasheet number'})"


def _ms(seconds) -> str:
    return "-" if seconds is None or pd.isna(seconds) else f"{seconds * 1e3:.4g}"


def _header(
    entry, roof: Roofs, dispatch: Dispatch, run_dir: Path, measured_here: bool, counted: bool
) -> list[str]:
    sources = "; ".join(f"{k}: {v}" for k, v in dict(entry.sources or {}).items())
    here = (
        "measured on this device: measured floors and median beside the projection"
        if measured_here
        else "not measured on this device: projected floors only"
    )
    return [
        f"{PROJECTION} onto {entry.name} ({entry.kind}): the floors at the numbers below, "
        "not a measurement",
        *(f"  {text}" for text in roof.said),
        f"  sources: {sources or 'none (no datasheet number)'}",
        f"  dispatch: {'-' if dispatch.us is None else f'{dispatch.us:g} us per op'}, "
        f"{dispatch.source}"
        + (
            "" if counted else "; the run's cells have no operator count (n_ops): no dispatch floor"
        ),
        f"  cells of {run_dir}: {here}",
        "  times in ms; bound = the largest floor",
    ]


def report(
    name: str,
    run_dir: str | Path = DEFAULT_RUN,
    dispatch_us: float | None = None,
    dispatch_source: str = "",
) -> str:
    """The projection of every cell of ``run_dir`` (its tables/cells.csv and, where it
    has one, device.json) onto the catalogue device ``name``, as printed text."""
    run_dir = Path(run_dir)
    entry = catalogue_device(name)
    device_path = run_dir / "device.json"
    device = read_device(device_path) if device_path.is_file() else None
    cells = read_cells(run_dir / "tables" / "cells.csv")
    measured_here = same_device(entry, device)
    dispatch = dispatch_for(entry, device, dispatch_us, dispatch_source)
    roof = roofs(entry, device, measured_here)
    floors = projected(cells, roof.bandwidth_gbps, roof.peak_tflops, dispatch.us)
    measured = with_floors(cells, device) if measured_here else None
    counted = "n_ops" in cells and cells["n_ops"].notna().any()
    lines = _header(entry, roof, dispatch, run_dir, measured_here, counted)
    head = "cell".ljust(46) + " | projected: " + " ".join(f"{f:>9s}" for f in FLOORS)
    head += "  " + "bound".ljust(9)
    if measured_here:
        head += " | measured: median " + " ".join(f"{f:>9s}" for f in FLOORS) + "  bound"
    lines += [head, "-" * len(head)]
    for i, r in cells.iterrows():
        cell = (
            f"{r['model']}/{r['backend']} {r['phase']} b{r['batch']} T{r['seq_len']} {r['dtype']}"
        )
        row = f"{cell:46s} |            " + " ".join(
            f"{_ms(floors.at[i, f't_{f}_s']):>9s}" for f in FLOORS
        )
        row += f"  {floors.at[i, 'bound'] or '-':9s}"
        if measured is not None:
            median = r["time_ms_median"] * 1e-3 if r["status"] == "ok" else math.nan
            row += f" | {_ms(median):>15s} " + " ".join(
                f"{_ms(measured.at[i, f't_{f}_s']):>9s}" for f in FLOORS
            )
            row += f"  {measured.at[i, 'bound'] or '-'}"
        lines.append(row)
    return "\n".join(lines)
