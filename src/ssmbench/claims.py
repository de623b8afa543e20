"""The claims ledger: published numbers (``config/claims.yaml``) against a run's cells.

Each claim names a metric of :data:`METRICS` and the cells it reads.  :func:`evaluate`
gives one row per claim: the published value, ours, their ratio and a verdict:

- ``reproduced``: ours satisfies the published statement (in its range, or past its bound);
- ``contradicted``: it does not;
- ``not comparable here``: the run lacks what the claim needs (a CUDA device, the named
  hardware, ok cells of the backends it compares), and ``why`` says which.

A metric never guesses: without the cells it needs it returns ``(None, why)``.  Imports
pandas and yaml only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import yaml

from ssmbench.config import REPO

CLAIMS = REPO / "config" / "claims.yaml"
COLUMNS = [
    "run",
    "id",
    "claim",
    "source",
    "hardware",
    "published_low",
    "published_high",
    "ours",
    "ratio",
    "verdict",
    "why",
    "cells",
]
VERDICTS = ("reproduced", "contradicted", "not comparable here")


def load(path: str | Path = CLAIMS) -> list[dict]:
    """The claims of ``path``, each checked for the keys :func:`evaluate` reads."""
    with open(path) as f:
        claims = yaml.safe_load(f)["claims"]
    for i, claim in enumerate(claims):
        for key in ("id", "claim", "source", "hardware", "published", "compare", "metric"):
            if key not in claim:
                raise ValueError(f"{path}: claims[{i}] ({claim.get('id', '?')}) has no {key!r}")
        if claim["metric"].get("name") not in METRICS:
            raise ValueError(
                f"{path}: claim {claim['id']}: unknown metric {claim['metric'].get('name')!r}; "
                f"known: {sorted(METRICS)}"
            )
        if claim["compare"] not in ("within", "at_least", "at_most"):
            raise ValueError(f"{path}: claim {claim['id']}: unknown compare {claim['compare']!r}")
    return claims


def _ok(cells: pd.DataFrame, phase: str | None, model: str, backend: str) -> pd.DataFrame:
    keep = (cells.status == "ok") & (cells.model == model) & (cells.backend == backend)
    if phase is not None:
        keep &= cells.phase == phase
    return cells[keep]


def _describe(rows: pd.DataFrame) -> str:
    return "; ".join(
        f"{r.model}/{r.backend}/{r.phase} b{r.batch} T{r.seq_len}" for r in rows.itertuples()
    )


def latency_ratio(
    cells: pd.DataFrame,
    slow: dict,
    fast: dict,
    phase: str | None = None,
    longest: bool = False,
    max_len: int | None = None,
) -> tuple[float | None, str, str]:
    """Median latency of ``slow`` over ``fast`` on the (batch, T, dtype) points both ran:
    the largest ratio over them (``longest``: at the longest such T), as "up to" claims
    state it.  Returns (ratio or None, why, the cells used)."""
    a = _ok(cells, phase, slow["model"], slow["backend"])
    b = _ok(cells, phase, fast["model"], fast["backend"])
    keys = ["batch", "seq_len", "dtype"]
    both = a.merge(b, on=keys, suffixes=("_slow", "_fast"))
    if max_len is not None:
        both = both[both.seq_len <= max_len]
    if both.empty:
        missing = [f"{s['model']}/{s['backend']}" for s, t in ((slow, a), (fast, b)) if t.empty]
        why = f"no ok {phase or ''} cells of {', '.join(missing)}" if missing else "no shared T"
        return None, why.replace("  ", " "), ""
    if longest:
        both = both[both.seq_len == both.seq_len.max()]
    ratios = both.time_ms_median_slow / both.time_ms_median_fast
    best = both.loc[ratios.idxmax()]
    used = f"{slow['model']}/{slow['backend']} vs {fast['model']}/{fast['backend']} {phase or ''}"
    return float(ratios.max()), "", f"{used} at b{best.batch} T{best.seq_len}".replace("  ", " ")


def crossover_len(
    cells: pd.DataFrame, ssm: dict, attention: dict, phase: str | None = None
) -> tuple[float | None, str, str]:
    """The shortest measured T (batch 1 if measured, else the smallest batch) from which
    ``ssm`` is faster than ``attention`` at every longer measured T too."""
    a = _ok(cells, phase, ssm["model"], ssm["backend"])
    b = _ok(cells, phase, attention["model"], attention["backend"])
    both = a.merge(b, on=["batch", "seq_len", "dtype"], suffixes=("_ssm", "_attn"))
    if both.empty:
        return None, "no shared ok cells of the two backends", ""
    both = both[both.batch == both.batch.min()].sort_values("seq_len")
    faster = (both.time_ms_median_ssm < both.time_ms_median_attn).to_numpy()
    for i in range(len(faster)):
        if faster[i:].all():
            t = int(both.seq_len.iloc[i])
            return float(t), "", f"{ssm['model']} vs {attention['model']} b{both.batch.min()}"
    return None, f"{ssm['model']}/{ssm['backend']} is never faster at the measured T", ""


def best(cells: pd.DataFrame, column: str, select: dict) -> tuple[float | None, str, str]:
    """The highest value of ``column`` among the ok cells of ``select``."""
    rows = _ok(cells, select.get("phase"), select["model"], select["backend"])
    if column in rows:
        rows = rows[rows[column].notna()]
    if rows.empty or column not in rows:
        return None, f"no ok {select['model']}/{select['backend']} cell with {column}", ""
    top = rows.loc[rows[column].idxmax()]
    return float(top[column]), "", _describe(top.to_frame().T)


METRICS: dict[str, Callable[..., tuple[float | None, str, str]]] = {
    "latency_ratio": latency_ratio,
    "crossover_len": crossover_len,
    "best": best,
}


def _unmet(claim: dict, cells: pd.DataFrame) -> str:
    """Why the run cannot test the claim, or ""."""
    needs = claim.get("requires") or {}
    if "device" in needs and needs["device"] not in set(cells.device):
        devices = ", ".join(sorted(set(cells.device)))
        return f"needs a {needs['device']} run (this one ran on {devices})"
    pattern = needs.get("device_name")
    if pattern and not any(re.search(pattern, str(n)) for n in set(cells.device_name)):
        names = ", ".join(sorted({str(n) for n in cells.device_name}))
        return f"measured on {claim['hardware']}; this run's device is {names}"
    return ""


def verdict(claim: dict, ours: float | None) -> str:
    low, high = claim["published"]
    if ours is None or (isinstance(ours, float) and math.isnan(ours)):
        return "not comparable here"
    if claim["compare"] == "at_least":
        ok = ours >= low
    elif claim["compare"] == "at_most":
        ok = ours <= high
    else:
        ok = (low is None or ours >= low) and (high is None or ours <= high)
    return "reproduced" if ok else "contradicted"


def evaluate(cells: pd.DataFrame, run: str, claims: list[dict] | None = None) -> pd.DataFrame:
    """One row per claim for one run's cells (see the module docstring)."""
    rows = []
    for claim in claims if claims is not None else load():
        low, high = claim["published"]
        why = _unmet(claim, cells)
        ours, used = None, ""
        if not why:
            params = {k: v for k, v in claim["metric"].items() if k != "name"}
            ours, why, used = METRICS[claim["metric"]["name"]](cells, **params)
        reference = high if high is not None else low
        source = claim["source"]
        rows.append(
            {
                "run": run,
                "id": claim["id"],
                "claim": claim["claim"],
                "source": f"{source['paper']}, {source['where']}",
                "hardware": claim["hardware"],
                "published_low": low,
                "published_high": high,
                "ours": ours,
                "ratio": None if ours is None or not reference else ours / reference,
                "verdict": verdict(claim, ours) if not why else "not comparable here",
                "why": why,
                "cells": used,
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)
