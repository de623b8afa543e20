"""What the figures compute from a table before drawing it: tokens per sequence of a timed
call, and where a recurrent family's latency line crosses attention's (log-log
interpolation).  No drawing here; pandas and numpy only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ssmbench.figures.data import cells_of, family_lines, smallest_batch

# Families whose crossing with an attention line the crossover figure marks.
RECURRENT_FAMILIES = ("mamba", "mamba2", "mamba3", "s4d", "deltanet")
# The crossover figure's quantities: (phase, column of crossover_data).
CROSSOVER_COLUMNS = (("prefill", "ttft_ms"), ("decode", "tpot_ms"))


def steps(table: pd.DataFrame) -> pd.Series:
    """Tokens per sequence in each timed call (``tokens / batch``): T for a prefill, 1 for
    a decode step; where ``tokens`` is empty, T for prefill and train, 1 for decode."""
    per_sequence = table.tokens / table.batch
    fallback = pd.Series(
        np.where(table.phase == "decode", 1.0, table.seq_len.astype(float)), index=table.index
    )
    return per_sequence.where(per_sequence > 0, fallback)


def crossings(xa, ya, xb, yb) -> list[tuple[float, float]]:
    """Where two polylines cross on log-log axes: both are interpolated linearly in
    (log x, log y) onto the union of their x within the range they share, and each sign
    change of log ya - log yb is solved on its segment.  Returns (x, y) pairs."""
    lo, hi = max(xa.min(), xb.min()), min(xa.max(), xb.max())
    if not lo < hi:
        return []
    grid = np.unique(np.concatenate([xa, xb]))
    lx = np.log(grid[(grid >= lo) & (grid <= hi)])
    la = np.interp(lx, np.log(xa), np.log(ya))
    lb = np.interp(lx, np.log(xb), np.log(yb))
    d = la - lb
    found = []
    for i in range(len(lx) - 1):
        if d[i] * d[i + 1] < 0:
            t = d[i] / (d[i] - d[i + 1])
            found.append((lx[i] + t * (lx[i + 1] - lx[i]), la[i] + t * (la[i + 1] - la[i])))
        elif d[i + 1] == 0 and i + 2 < len(lx) and d[i] * d[i + 2] < 0:  # touches a point
            found.append((lx[i + 1], la[i + 1]))
    return [(float(np.exp(x)), float(np.exp(y))) for x, y in found]


def crossover_data(cells, models=None, backends=None, batch=None, dtype=None) -> pd.DataFrame:
    """The prefill and decode cells of one batch (``batch``, else the smallest), with
    ``ttft_ms`` (a prefill's median) and ``tpot_ms`` (a decode's median per step)."""
    data = cells_of(cells, phase=["prefill", "decode"], model=models, backend=backends, dtype=dtype)
    data = smallest_batch(data, batch)
    return data.assign(
        ttft_ms=data.time_ms_median.where(data.phase == "prefill"),
        tpot_ms=(data.time_ms_median / steps(data)).where(data.phase == "decode"),
    )


def crossovers(
    cells: pd.DataFrame,
    models: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    batch: int | None = None,
    dtype: str | Sequence[str] | None = None,
) -> pd.DataFrame:
    """The crossover points of the TTFT / TPOT figure: for each phase (prefill: time to
    first token; decode: time per output token), each line of a recurrent family
    (RECURRENT_FAMILIES) and each attention line, every T where they cross (log-log
    interpolation between measured points).  Columns phase, recurrent, attention, seq_len,
    time_ms; ``recurrent`` and ``attention`` are line labels."""
    data = crossover_data(cells, models, backends, batch, dtype)
    rows = []
    for phase, column in CROSSOVER_COLUMNS:
        lines = family_lines(data[data.phase == phase], column)
        for a in (line for line in lines if line["family"] in RECURRENT_FAMILIES):
            for b in (line for line in lines if line["family"] == "attention"):
                for t, ms in crossings(a["x"], a["y"], b["x"], b["y"]):
                    rows.append((phase, a["label"], b["label"], t, ms))
    return pd.DataFrame(rows, columns=["phase", "recurrent", "attention", "seq_len", "time_ms"])
