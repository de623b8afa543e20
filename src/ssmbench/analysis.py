"""The ratios the verdict and the figures report, with their intervals.

- :func:`go_no_go_table`: attention over each SSM, per phase, batch, dtype and T, each
  side at its strongest backend, read from the paired cells where the run has them
  (``ssmbench.paired``: both sides timed in alternating calls of one process) and from
  the separate cells otherwise, with a 95% bootstrap interval of the latency ratio
  (``ssmbench.stats``: paired over rounds, or unpaired over each cell's samples) and the
  answer it supports: ``ssm faster``, ``attention faster`` or ``inconclusive``.
- :func:`graph_speedups`, :func:`speedups_table`: an eager decode step over its CUDA-graph
  replay, with the same unpaired interval.
- :func:`crossovers`: where a recurrent family's TTFT or TPOT line crosses attention's.
- The verdict's sentences (:func:`verdict_rst`), every number read off these tables; where
  the cells carry their floors (:mod:`ssmbench.floors`), which floor bounds each side of a
  go/no-go pair and what removing it would do, as arithmetic (:func:`floor_sentences`).

Reads tables only (pandas, numpy, scipy), never torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

# BACKEND_TIERS: how tuned a backend is.  A side is compared at the highest tier both sides
# reached, so a naive loop is never set against a fused kernel.
from ssmbench.floors import FLOORS, flagged_lines, has_floors
from ssmbench.registry import (
    BACKEND_TIERS,
    GRAPH_PAIRS,
    PHASES,
    RECURRENT_FAMILIES,
    SSM_FAMILIES,
    STATUSES,
)
from ssmbench.select import cells_of, device_kind, lines, one_kind, smallest_batch
from ssmbench.stats import (
    HIERARCHICAL,
    WITHIN_PROCESS,
    decide,
    ratio_interval,
    replicated_unpaired_ratio,
    widen,
)
from ssmbench.tables import KEYS, family_of, with_columns

# the answer of a go/no-go row: which side of 1 the latency ratio's interval lies on
ANSWERS = {"above": "ssm faster", "below": "attention faster", "inconclusive": "inconclusive"}
# the kinds of a go/no-go row's interval: a paired cell's over its replicate processes
# (hierarchical) or over one process's rounds (within-process); two separate cells'
# samples, widened by the run's between-process spread where it has replicates to
# measure it (separate cells, widened), else not (separate cells); two separate cells
# each measured in several processes, each side resampled over its own processes
# (separate cells, replicated)
SEPARATE, WIDENED = "separate cells", "separate cells, widened"
REPLICATED = "separate cells, replicated"
PAIRED_SOURCES = (HIERARCHICAL, WITHIN_PROCESS)
# the cells-table columns the ratios read (absent ones read as empty)
_NUMERIC = ("time_ms_median", "flop", "energy_j")
_TEXT = ("run", "device", "device_name", "reason", "compute_dtype")

GO_NO_GO_COLUMNS = [
    "phase",
    "batch",
    "dtype",
    "seq_len",
    "ssm",
    "attention_backend",
    "ssm_backend",
    "tier",
    "attention_compute_dtype",
    "ssm_compute_dtype",
    "flop_ratio",
    "latency_ratio",
    "latency_lo",
    "latency_hi",
    "interval",
    "answer",
    "replicates",
    "between_maxmin",
    "between_cv",
    "process_ratios",
    "outliers",
    "loaded",
    "energy_ratio",
    "device_name",
]

GRAPH_TARGET = 3.0  # the CUDA-graph target: a replay at least 3x faster than the eager step


def samples_by_cell(samples: pd.DataFrame | None) -> dict[tuple, dict[int, np.ndarray]]:
    """The kept samples (ms) of each cell of a samples table, keyed by its KEYS values,
    per process: ``{replicate: samples}`` (replicate 0 alone for a one-process cell, and
    in a table from before replicates)."""
    if samples is None or samples.empty:
        return {}
    if "replicate" not in samples:
        samples = samples.assign(replicate=0)
    ordered = samples.sort_values([*KEYS, "replicate", "sample"])
    out: dict[tuple, dict[int, np.ndarray]] = {}
    for (*key, replicate), group in ordered.groupby([*KEYS, "replicate"], sort=False):
        out.setdefault(tuple(key), {})[int(replicate)] = group.time_ms.to_numpy(float)
    return out


def _key(row) -> tuple:
    return tuple(row[k] for k in KEYS)


def _replicate(row) -> int:
    value = row.get("replicate", 0)
    return 0 if pd.isna(value) else int(value)


def _unpaired(a_row, b_row, samples: dict) -> tuple[float, float, bool]:
    """:func:`unpaired_interval` of two cells-table rows (NaN without samples)."""
    if not samples:
        return np.nan, np.nan, False
    return unpaired_interval(
        samples, _key(a_row), _key(b_row), _replicate(a_row), _replicate(b_row)
    )


def unpaired_interval(
    samples: dict, a_key: tuple, b_key: tuple, a_replicate: int = 0, b_replicate: int = 0
) -> tuple[float, float, bool]:
    """The unpaired 95% interval of cell ``a_key``'s median over ``b_key``'s
    (``samples``: :func:`samples_by_cell`), and whether it holds both cells' processes:
    where each side was measured in two or more, each is resampled over its own processes
    (``ssmbench.stats.replicated_unpaired_ratio``); else the interval is over the samples
    of the process each side reports (``a_replicate``, ``b_replicate``: the cells table's
    ``replicate``).  NaN without samples."""
    a, b = samples.get(a_key), samples.get(b_key)
    if not a or not b:
        return np.nan, np.nan, False
    if len(a) >= 2 and len(b) >= 2:
        _, low, high = replicated_unpaired_ratio(list(a.values()), list(b.values()))
        return low, high, True
    a_samples, b_samples = a.get(a_replicate), b.get(b_replicate)
    if a_samples is None or b_samples is None:
        return np.nan, np.nan, False
    _, low, high = ratio_interval(a_samples, b_samples, paired=False)
    return low, high, False


def _compute_dtype(row) -> str:
    value = row.get("compute_dtype", "")
    return "" if pd.isna(value) else str(value)


def go_no_go_table(
    cells: pd.DataFrame,
    batch: int | None = None,
    samples: pd.DataFrame | None = None,
    paired: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per (phase, batch, dtype, T, SSM family): attention's FLOPs, latency and energy over
    the SSM's.  A ratio above 1 means attention does more work, takes longer, or spends
    more energy.

    Each side runs its fastest ok backend within the highest tier both reached
    (BACKEND_TIERS), named in the row with the precision its operator computes in
    (``compute_dtype`` of the cells, where the table has it): a bf16 kernel against an
    operator that widens to fp32 reads as such.  Where the run has an ok paired cell at
    the point (``paired``: the paired table), the latency ratio is the pair's and its
    interval is the pair's: over its replicate processes (``interval`` "hierarchical",
    with ``replicates``, their spread, the per-process ratios and the replicates named as
    outliers or loaded) or over one process's rounds ("within-process").  Otherwise the
    ratio is of the two separate cells' medians, its interval unpaired from ``samples``
    (the samples table), NaN without them, and widened by the between-process sd of a
    cell's median that the run's replicated pairs measured in that phase
    (:func:`process_sd_by_phase`, ``ssmbench.stats.widen``: "separate cells, widened"),
    or left as it is where the run has no replicates ("separate cells").  ``answer`` is
    ``ssm faster`` when the interval lies above 1, ``attention faster`` below,
    ``inconclusive`` when it holds 1, and empty without an interval.  The energy ratio
    is of the separate cells' energies (one reading per cell, so no interval).
    ``batch`` keeps one batch; None keeps all.
    """
    data = with_columns(cells, _NUMERIC, _TEXT)
    data = data[(data.status == "ok") & data.backend.isin(list(BACKEND_TIERS))]
    data = data if batch is None else data[data.batch == batch]
    data = data.assign(tier=data.backend.map(BACKEND_TIERS), family=family_of(data))
    by_cell = samples_by_cell(samples)
    pairs = _ok_pairs(paired, batch)
    process_sd = process_sd_by_phase(paired)
    sd_any = process_sd.get("*", np.nan)
    rows = []
    points = data.groupby(["phase", "batch", "dtype", "seq_len"], sort=True)
    for (phase, b, dtype, seq_len), point in points:
        attention = point[point.family == "attention"]
        if attention.empty:
            continue
        for ssm in SSM_FAMILIES:
            other = point[point.family == ssm]
            if other.empty:
                continue
            tier = min(attention.tier.max(), other.tier.max())
            a = attention[attention.tier == tier].nsmallest(1, "time_ms_median").iloc[0]
            s = other[other.tier == tier].nsmallest(1, "time_ms_median").iloc[0]
            row = dict(
                phase=phase,
                batch=int(b),
                dtype=dtype,
                seq_len=int(seq_len),
                ssm=ssm,
                attention_backend=a.backend,
                ssm_backend=s.backend,
                tier=int(tier),
                attention_compute_dtype=_compute_dtype(a),
                ssm_compute_dtype=_compute_dtype(s),
                flop_ratio=a.flop / s.flop if s.flop else np.nan,
                latency_ratio=a.time_ms_median / s.time_ms_median,
                interval="",
            )
            here = _best_pairs(pairs, phase, b, dtype, seq_len, ssm)
            if here:  # a row per device kind the pair's replicates ran on
                rows += [_paired_row(row, pair, point, ssm, a, s, tier) for pair in here]
                continue
            kinds = {"attention": device_kind(a), ssm: device_kind(s)}
            row["energy_ratio"] = _energy_ratio(a, s, kinds.values())
            if one_kind(*kinds.values()):
                row.update(_separate(row, a, s, by_cell, process_sd.get(phase, sd_any)))
                row["device_name"] = kinds["attention"]
            else:  # never a ratio of two device kinds: the row says which ran where
                row.update(latency_ratio=np.nan, latency_lo=np.nan, latency_hi=np.nan)
                row["device_name"] = "; ".join(f"{side}: {k}" for side, k in kinds.items())
            row["answer"] = ANSWERS.get(decide(row["latency_lo"], row["latency_hi"]), "")
            rows.append(row)
    return pd.DataFrame(rows, columns=GO_NO_GO_COLUMNS)


def process_sd_by_phase(pairs: pd.DataFrame | None) -> dict[str, float]:
    """The between-process sd of one cell's median (log scale) per phase, pooled over both
    sides of the run's replicated pairs in that phase (``ssmbench.stats.process_sd``'s
    pooling, each side's sd weighted by its replicates less one), and under ``"*"`` the
    largest of the phases', for a phase no pair measured.  Empty without replicates."""
    if pairs is None or pairs.empty or "attention_process_sd" not in pairs:
        return {}
    ok = pairs[(pairs.status == "ok") & (pairs.replicates_ok >= 2)]
    out = {}
    for phase, rows in ok.groupby("phase"):
        dof = (rows.replicates_ok - 1).astype(float)
        ss = ((rows.attention_process_sd**2 + rows.ssm_process_sd**2) * dof).sum()
        if dof.sum() > 0 and np.isfinite(ss):
            out[phase] = float(np.sqrt(ss / (2 * dof.sum())))
    if out:
        out["*"] = max(out.values())
    return out


def _ok_pairs(paired: pd.DataFrame | None, batch) -> pd.DataFrame:
    if paired is None or paired.empty:
        return pd.DataFrame()
    ok = paired[(paired.status == "ok") & paired.latency_ratio.notna()]
    return ok if batch is None else ok[ok.batch == batch]


def _best_pairs(pairs: pd.DataFrame, phase, batch, dtype, seq_len, ssm) -> list:
    """The paired rows at the point, at the highest backend tier the run paired it at
    (ties: the faster SSM side), one per device kind the pair ran on (the pairs table
    keeps kinds apart); [] without any."""
    if pairs.empty:
        return []
    here = pairs[
        (pairs.phase == phase)
        & (pairs.batch == batch)
        & (pairs.dtype == dtype)
        & (pairs.seq_len == seq_len)
        & (family_of(pairs) == ssm)
    ]
    if here.empty:
        return []
    here = here.assign(tier=here.backend.map(BACKEND_TIERS).fillna(0))
    here = here[here.tier == here.tier.max()]
    here = here.assign(kind=[device_kind(r) for _, r in here.iterrows()])
    return [kind.nsmallest(1, "ssm_ms").iloc[0] for _, kind in here.groupby("kind", sort=True)]


def _paired_row(row: dict, pair, point: pd.DataFrame, ssm: str, a, s, tier) -> dict:
    """A go/no-go row from a paired cell (one device kind's replicates): the pair's
    ratio, interval and spread; the compute dtypes from the pair, else its cells."""
    out = dict(row)
    out.update(
        attention_backend=pair.backend,
        ssm_backend=pair.backend,
        tier=int(BACKEND_TIERS.get(pair.backend, tier)),
        latency_ratio=pair.latency_ratio,
        latency_lo=pair.latency_lo,
        latency_hi=pair.latency_hi,
        interval=pair.get("interval", "") or WITHIN_PROCESS,
        replicates=int(pair.get("replicates_ok", 1) or 1),
        **{
            c: pair.get(c, np.nan if c.startswith("between") else "")
            for c in ("between_maxmin", "between_cv", "process_ratios", "outliers", "loaded")
        },
    )
    a, s = _cell(point, "attention", pair.backend, a), _cell(point, ssm, pair.backend, s)
    # a pairs table from before device names: the pair ran where its cells did
    named = pair.get("device_name", "")
    kind = device_kind(pair) if isinstance(named, str) and named else device_kind(a)
    out.update(
        attention_compute_dtype=pair.get("attention_compute_dtype", "") or _compute_dtype(a),
        ssm_compute_dtype=pair.get("ssm_compute_dtype", "") or _compute_dtype(s),
        device_name=kind,
        energy_ratio=_energy_ratio(a, s, (device_kind(a), device_kind(s), kind)),
    )
    out["answer"] = ANSWERS.get(decide(out["latency_lo"], out["latency_hi"]), "")
    return out


def _energy_ratio(a, s, kinds) -> float:
    """Attention's energy over the SSM's, of two separate cells (one reading each, no
    interval); NaN where either lacks one or ``kinds`` are not one device kind."""
    ok = s.energy_j and not pd.isna(s.energy_j) and not pd.isna(a.energy_j)
    return a.energy_j / s.energy_j if ok and one_kind(*kinds) else np.nan


def _separate(row: dict, a, s, by_cell: dict, sd: float) -> dict:
    """The interval of a ratio of two separate cells of one device kind (``row``'s
    ratio): resampled over each side's processes where both have several, else over
    their samples, widened by the phase's between-process ``sd`` where the run measured
    one (:data:`SEPARATE`, :data:`WIDENED`, :data:`REPLICATED`)."""
    low, high, replicated = _unpaired(a, s, by_cell)
    out = {"interval": row["interval"], "replicates": 1}
    if replicated:
        out["interval"] = REPLICATED
        out["replicates"] = min(len(by_cell[_key(a)]), len(by_cell[_key(s)]))
    elif not np.isnan(low):
        out["interval"] = SEPARATE
        if np.isfinite(sd):
            low, high = widen(row["latency_ratio"], low, high, sd)
            out["interval"] = WIDENED
    out.update(latency_lo=low, latency_hi=high)
    return out


def _cell(point: pd.DataFrame, family: str, backend: str, default):
    """The separate cell of ``family`` at ``backend`` in ``point`` (default when absent)."""
    rows = point[(point.family == family) & (point.backend == backend)]
    return rows.iloc[0] if not rows.empty else default


def graph_speedups(
    cells: pd.DataFrame, batch: int = 1, samples: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Eager over graph decode latency per (model, eager backend, T) at ``batch``, where
    both cells are ok: columns model, eager, graph, seq_len, eager_ms, graph_ms, speedup,
    speedup_lo, speedup_hi (the unpaired 95% interval from ``samples``; NaN without)."""
    table = speedups_table(cells, samples)
    table = table[(table.status == "ok") & (table.batch == batch)]
    columns = ["model", "eager", "graph", "seq_len", "eager_ms", "graph_ms", "speedup"]
    return table[columns + ["speedup_lo", "speedup_hi"]].reset_index(drop=True)


SPEEDUP_COLUMNS = [
    "run",
    "model",
    "eager",
    "graph",
    "batch",
    "dtype",
    "seq_len",
    "status",
    "reason",
    "eager_ms",
    "graph_ms",
    "speedup",
    "speedup_lo",
    "speedup_hi",
]


def speedups_table(cells: pd.DataFrame, samples: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per CUDA-graph decode cell of ``cells``: its eager twin's median over its
    own, with the unpaired 95% interval from ``samples`` (:func:`graph_speedups`, every
    batch), or, where either cell is not ok, the status and reason of the one that is not
    (the graph cell's first) and no speed-up; where the two ran on different device kinds
    (``select.one_kind``), ``unavailable`` and no speed-up."""
    data = with_columns(cells, _NUMERIC, _TEXT)
    by_cell = samples_by_cell(samples)
    rows = []
    for eager, graph in GRAPH_PAIRS:
        for _, g in data[(data.phase == "decode") & (data.backend == graph)].iterrows():
            twin = data[
                (data.phase == "decode")
                & (data.backend == eager)
                & (data.model == g.model)
                & (data.batch == g.batch)
                & (data.dtype == g["dtype"])
                & (data.seq_len == g.seq_len)
            ]
            e = twin.iloc[0] if not twin.empty else None
            row = dict(
                run=g.run,
                model=g.model,
                eager=eager,
                graph=graph,
                batch=int(g.batch),
                dtype=g["dtype"],
                seq_len=int(g.seq_len),
                status=g.status,
                reason=g.reason,
            )
            if g.status == "ok" and (e is None or e.status != "ok"):
                row.update(
                    status="not_run" if e is None else e.status,
                    reason=f"its {eager} twin " + ("was not planned" if e is None else e.reason),
                )
            kinds = (device_kind(e), device_kind(g)) if e is not None else ()
            if row["status"] == "ok" and not one_kind(*kinds):
                row.update(
                    status="unavailable",
                    reason=f"no ratio of two device kinds: {eager} on {kinds[0]}, "
                    f"{graph} on {kinds[1]}",
                )
            if row["status"] == "ok":
                low, high, _ = _unpaired(e, g, by_cell)
                row.update(
                    eager_ms=e.time_ms_median,
                    graph_ms=g.time_ms_median,
                    speedup=e.time_ms_median / g.time_ms_median,
                    speedup_lo=low,
                    speedup_hi=high,
                )
            rows.append(row)
    return pd.DataFrame(rows, columns=SPEEDUP_COLUMNS)


def read_table(path, columns: list[str]) -> pd.DataFrame:
    """A go/no-go or speed-ups table from CSV, checked to hold ``columns`` (the file named
    on failure); text columns read as strings ("" where empty)."""
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"table {path} does not exist")
    table = pd.read_csv(path)
    missing = [c for c in columns if c not in table]
    if missing:
        raise ValueError(f"{path}: not a table of this kind, it lacks the columns {missing}")
    for col in table.columns:
        if table[col].dtype == object:
            table[col] = table[col].fillna("").astype(str)
    return table


# Crossovers: the TTFT / TPOT figure's points

# Families whose crossing with an attention line the crossover figure marks.
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
        found = lines(data[data.phase == phase], column)
        for a in (line for line in found if line["family"] in RECURRENT_FAMILIES):
            for b in (line for line in found if line["family"] == "attention"):
                for t, ms in crossings(a["x"], a["y"], b["x"], b["y"]):
                    rows.append((phase, a["label"], b["label"], t, ms))
    return pd.DataFrame(rows, columns=["phase", "recurrent", "attention", "seq_len", "time_ms"])


# The verdict's sentences

ALWAYS = ("ok", "unavailable", "failed")  # statuses the sentence names even when none


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def status_sentence(cells: pd.DataFrame) -> str:
    counts = cells.status.value_counts()
    known = [s for s in STATUSES if s in ALWAYS or counts.get(s, 0)]
    other = sorted(set(counts.index) - set(STATUSES))
    parts = [f"{int(counts.get(s, 0))} {s}" for s in [*known, *other]]
    run = ", ".join(sorted({str(r) for r in cells.run})) or "this run"
    return f"Run {run} planned {_count(len(cells), 'cell')}: {', '.join(parts)}."


def fastest_sentences(cells: pd.DataFrame) -> list[str]:
    """Per phase: the fastest backend of each family at that family's longest ok length
    (smallest batch there), with its margin over the runner-up backend."""
    ok = cells[(cells.status == "ok") & cells.time_ms_median.notna()]
    phases = [p for p in PHASES if p in set(ok.phase)]
    phases += sorted(set(ok.phase) - set(PHASES))
    sentences = []
    for phase in phases:
        parts = []
        for model, rows in ok[ok.phase == phase].groupby("model", sort=True):
            rows = rows[rows.seq_len == rows.seq_len.max()]
            rows = rows[rows.batch == rows.batch.min()]
            best = rows.groupby("backend").time_ms_median.min().sort_values()
            text = (
                f"{model} {best.index[0]} "
                f"({best.iloc[0]:.3g} ms at T = {int(rows.seq_len.iloc[0])}, "
                f"batch {int(rows.batch.iloc[0])}"
            )
            if len(best) > 1:
                margin = best.iloc[1] / best.iloc[0]
                text += f", {margin:.1f}x ahead of {best.index[1]}"
            parts.append(text + ")")
        if parts:
            sentences.append(
                f"Fastest {phase} backend per family at its longest length: "
                + "; ".join(parts)
                + "."
            )
    return sentences


def _span(values: pd.Series, fmt: str = "{:.2f}") -> str:
    """ "low-high" of ``values`` in ``fmt``, or one number when both ends print alike."""
    low, high = fmt.format(values.min()), fmt.format(values.max())
    return low if low == high else f"{low}-{high}"


def _interval(row) -> str:
    """ "2.73x (95% CI 2.61-2.85, paired, 5 processes)", or the point alone without an
    interval; a within-process interval says that it holds one process's rounds only."""
    text = f"{row.latency_ratio:.2f}x"
    if pd.notna(row.latency_lo) and pd.notna(row.latency_hi):
        kind = getattr(row, "interval", "")
        n = (
            int(getattr(row, "replicates", 1) or 1)
            if pd.notna(getattr(row, "replicates", 1))
            else 1
        )
        source = {
            HIERARCHICAL: f"paired, {n} processes",
            WITHIN_PROCESS: "paired, within one process only",
            "paired": "paired, within one process only",  # tables from before replicates
            WIDENED: "separate cells, widened by the between-process spread",
            REPLICATED: f"separate cells, {n} processes each",
        }.get(kind, "separate cells, within-process only")
        text += f" (95% CI {row.latency_lo:.2f}-{row.latency_hi:.2f}, {source})"
    return text


def replicate_sentences(table: pd.DataFrame) -> list[str]:
    """What the replicates say: how many processes measured each pair and how far they
    disagreed; the replicates named as outliers (beyond their siblings' spread) and those
    measured on a loaded machine, each kept in its pair's median and named here; or, when
    every paired interval is within one process, that they hold no process-to-process
    noise."""
    if "interval" not in table:
        return []
    paired = table[table.interval.isin([*PAIRED_SOURCES, "paired"])]
    if paired.empty:
        return []
    sentences = []
    replicated = paired[paired.interval == HIERARCHICAL]
    if replicated.empty:
        sentences.append(
            "Every paired interval is within one process (replicates: 1): it holds that "
            "process's rounds, not what a rerun in a fresh process meets."
        )
    else:
        maxmin = pd.to_numeric(replicated.between_maxmin, errors="coerce")
        worst = replicated.loc[maxmin.idxmax()] if maxmin.notna().any() else None
        text = (
            f"Paired ratios come from {_span(replicated.replicates, '{:.0f}')} processes each "
            f"(hierarchical bootstrap over processes, then rounds); the processes of a pair "
            f"disagree by a factor of {_span(maxmin, '{:.2f}')} (max/min)"
        )
        if worst is not None:
            text += f", most at {worst.ssm} {worst.phase} T = {int(worst.seq_len)}"
        sentences.append(text + ".")
        for column, what in (("outliers", "Outlier replicates"), ("loaded", "Loaded replicates")):
            if column not in replicated:
                continue
            named = replicated[replicated[column].fillna("").astype(str) != ""]
            if not named.empty:
                listed = "; ".join(
                    f"{r.ssm} {r.phase} T = {int(r.seq_len)}: {getattr(r, column)}"
                    for r in named.itertuples()
                )
                sentences.append(f"{what} (kept in the pair's median, named here): {listed}.")
    separate = table[table.interval.isin([SEPARATE, WIDENED])]
    if not separate.empty and (separate.interval == SEPARATE).any():
        sentences.append(
            "Ratios of separate cells carry their cells' within-process intervals only "
            "(no replicated pair measured the between-process spread in their phase)."
        )
    return sentences


def headline_sentences(cells: pd.DataFrame) -> list[str]:
    """What the replicated cells say: how many processes measured each, and how far their
    medians disagree (max/min, and the cell where most), so a headline number's spread
    across fresh processes is read beside it."""
    if "time_interval" not in cells:
        return []
    replicated = cells[(cells.status == "ok") & (cells.time_interval == HIERARCHICAL)]
    if replicated.empty:
        return []
    maxmin = pd.to_numeric(replicated.process_maxmin, errors="coerce")
    text = (
        f"{_count(len(replicated), 'headline cell')} measured in "
        f"{_span(replicated.replicates_ok, '{:.0f}')} processes each (the cells table reports "
        f"the median process, with a hierarchical interval of the median over processes); "
        f"their processes' medians disagree by a factor of {_span(maxmin, '{:.2f}')} (max/min)"
    )
    if maxmin.notna().any():
        worst = replicated.loc[maxmin.idxmax()]
        text += (
            f", most at {worst.model}/{worst.backend} {worst.phase} T = {int(worst.seq_len)}, "
            f"batch {int(worst.batch)}"
        )
    return [text + "."]


def _precision(rows: pd.DataFrame) -> str:
    """What the rows' compute precisions say, where the two sides' differ ("" if alike)."""
    if "attention_compute_dtype" not in rows:
        return ""
    a, s = (
        rows[c].fillna("").astype(str) for c in ("attention_compute_dtype", "ssm_compute_dtype")
    )
    differ = rows[(a != s) & (a != "") & (s != "")]
    if differ.empty:
        return ""
    parts = sorted(
        {
            f"{r.ssm}: attention computes in {r.attention_compute_dtype}, "
            f"the SSM in {r.ssm_compute_dtype}"
            for r in differ.itertuples()
        }
    )
    return " Not like for like in precision: " + "; ".join(parts) + "."


def go_no_go_sentences(table: pd.DataFrame) -> list[str]:
    """Per phase, at the smallest batch and the longest T where attention and at least one
    SSM ran: attention's latency over each SSM's with its 95% interval (paired where the
    run has paired cells), its FLOP ratio, and the answer each interval supports: the SSM
    faster, attention faster, or inconclusive when the interval holds 1.  Then one line per
    phase listing every length whose answer is inconclusive."""
    sentences = []
    for phase in [p for p in PHASES if p in set(table.phase)]:
        rows = table[table.phase == phase]
        rows = rows[rows.batch == rows.batch.min()]
        rows = rows[rows.seq_len == rows.seq_len.max()]
        backends = ", ".join(
            sorted(
                {
                    f"{a} vs {s}"
                    for a, s in zip(rows.attention_backend, rows.ssm_backend, strict=True)
                }
            )
        )
        parts = []
        several = rows.device_name.nunique() > 1 if "device_name" in rows else False
        for r in rows.itertuples():
            if pd.isna(r.latency_ratio):  # two device kinds: no ratio (go_no_go_table)
                parts.append(f"{r.ssm}: no ratio ({r.device_name})")
                continue
            where = f" on {r.device_name}" if several else ""  # a node of two GPU kinds
            part = f"{r.ssm}{where} {_interval(r)}"
            if pd.notna(r.flop_ratio) and r.flop_ratio > 0:
                # latency ratio over FLOP ratio: 1.00 turns the FLOP saving fully into speed
                part += (
                    f" for {r.flop_ratio:.2f}x the FLOPs "
                    f"({r.latency_ratio / r.flop_ratio:.2f} of the FLOP ratio as speed)"
                )
            if r.answer:
                part += f": {r.answer}"
            parts.append(part)
        text = (
            f"Go/no-go, {phase} at T = {int(rows.seq_len.iloc[0])}, batch "
            f"{int(rows.batch.iloc[0])} ({backends}): attention over each SSM, "
            + "; ".join(parts)
            + "."
        )
        sentences.append(text + _precision(rows))
        open_points = table[(table.phase == phase) & (table.answer == "inconclusive")]
        if not open_points.empty:
            listed = ", ".join(
                f"{r.ssm} at T = {int(r.seq_len)} (batch {int(r.batch)})"
                for r in open_points.itertuples()
            )
            sentences.append(
                f"Inconclusive in {phase} (the 95% interval holds 1, no answer): {listed}."
            )
    return sentences


def _headline_rows(table: pd.DataFrame, phase: str) -> pd.DataFrame:
    """The go/no-go rows the verdict reports for ``phase``: smallest batch, longest T."""
    rows = table[table.phase == phase]
    rows = rows[rows.batch == rows.batch.min()]
    return rows[rows.seq_len == rows.seq_len.max()]


def _side(cells: pd.DataFrame, row, family: str, backend: str):
    """The cells-table row of one side of a go/no-go row, or None."""
    found = cells[
        (cells.phase == row.phase)
        & (cells.batch == row.batch)
        & (cells.dtype == row.dtype)
        & (cells.seq_len == row.seq_len)
        & (family_of(cells) == family)
        & (cells.backend == backend)
        & (cells.status == "ok")
    ]
    return None if found.empty else found.iloc[0]


def without_floor(side, floor: str) -> float:
    """A side's median (s) with ``floor``'s time taken out, never below its other floors:
    ``max(t - t_floor, the largest other floor)``.  Arithmetic that treats the floors as
    parts of the time, not a measurement of a device without that cost."""
    measured = side.time_ms_median * 1e-3
    removed = side.get(f"t_{floor}_s")
    removed = 0.0 if pd.isna(removed) else removed
    others = [side.get(f"t_{f}_s") for f in FLOORS if f != floor]
    rest = max([x for x in others if pd.notna(x)], default=0.0)
    return max(measured - removed, rest)


def _bound_words(side, name: str) -> str:
    """ "mamba2 dispatch-bound (that floor 0.78 of its 0.275 ms)" """
    return (
        f"{name} {side.bound}-bound (that floor {side.explained:.2f} of its "
        f"{side.time_ms_median:.3g} ms)"
    )


def pair_floor_sentence(row, attention, ssm) -> str:
    """One go/no-go pair: which floor bounds each side and by how much, and what
    attention's latency over the SSM's, and its share of the FLOP ratio, would become
    with the SSM's bounding floor taken out of both sides (:func:`without_floor`)."""
    floor = ssm.bound
    scale_a = without_floor(attention, floor) / (attention.time_ms_median * 1e-3)
    scale_s = without_floor(ssm, floor) / (ssm.time_ms_median * 1e-3)
    ratio = row.latency_ratio * scale_a / scale_s
    text = (
        f"{row.ssm}: {_bound_words(attention, 'attention')}, {_bound_words(ssm, row.ssm)}; "
        f"without the {floor} floor the ratio would be {ratio:.2f}x"
    )
    if pd.notna(row.flop_ratio) and row.flop_ratio > 0:
        text += (
            f", {ratio / row.flop_ratio:.2f} of the FLOP ratio as speed "
            f"(measured: {row.latency_ratio / row.flop_ratio:.2f})"
        )
    return text + "."


def floor_sentences(table: pd.DataFrame, cells: pd.DataFrame) -> list[str]:
    """Per phase, for the go/no-go rows :func:`go_no_go_sentences` reports: each pair's
    floors (:func:`pair_floor_sentence`), labelled as arithmetic on measured floors; then
    the cells measured below a floor.  Nothing for cells without floor columns (tables
    aggregated before them: the shipped runs' verdicts stay as they were)."""
    if not has_floors(cells) or table.empty:
        return []
    data = with_columns(cells, ("time_ms_median", "explained"), ("bound",))
    sentences = []
    for phase in [p for p in PHASES if p in set(table.phase)]:
        rows = _headline_rows(table, phase)
        parts = []
        for r in rows.itertuples():
            a = _side(data, r, "attention", r.attention_backend)
            s = _side(data, r, r.ssm, r.ssm_backend)
            if a is None or s is None or not a.bound or not s.bound:
                continue
            parts.append(pair_floor_sentence(r, a, s))
        if parts:
            sentences.append(
                f"Floors, {phase} at T = {int(rows.seq_len.iloc[0])}, batch "
                f"{int(rows.batch.iloc[0])} (arithmetic on measured floors, not a "
                "measurement): " + " ".join(parts)
            )
    flagged = flagged_lines(cells)
    if flagged:
        sentences.append(
            "Cells measured below one of their floors by more than the ceiling's spread "
            "(not plotted as results; the floors figure rings them): " + "; ".join(flagged) + "."
        )
    return sentences


def claims_sentence(claims: pd.DataFrame) -> str:
    if claims.empty:
        return "No published claim was checked."
    counts = claims.verdict.value_counts()
    parts = [f"{int(n)} {verdict}" for verdict, n in counts.items()]
    return f"Of {_count(len(claims), 'published claim')} checked against this run: " + (
        ", ".join(parts) + "."
    )


def verdict_rst(cells: pd.DataFrame, claims: pd.DataFrame, go_no_go: pd.DataFrame) -> str:
    """The verdict as reStructuredText: the status sentence, then a bullet per finding;
    ``go_no_go`` is the go/no-go table (ssmbench.analysis.go_no_go_table)."""
    points = [
        *go_no_go_sentences(go_no_go),
        *floor_sentences(go_no_go, cells),
        *replicate_sentences(go_no_go),
        *headline_sentences(cells),
        *fastest_sentences(cells),
        claims_sentence(claims),
    ]
    return status_sentence(cells) + "\n\n" + "".join(f"- {p}\n" for p in points)
