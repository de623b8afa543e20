"""The claims ledger: published numbers (``config/claims.yaml``) against a run's cells.

Each claim names a metric of :data:`METRICS` and the cells it reads.  :func:`evaluate`
gives one row per claim: the published value, ours, their ratio and a verdict:

- ``reproduced``: ours satisfies the published statement: in its range (``within``), past
  its bound (``at_least``, ``at_most``), or, for a point value such as an "up to 4x",
  within the claim's relative ``tolerance`` of it (``about``);
- ``contradicted``: it does not;
- ``not comparable here``: the run lacks what the claim needs (a CUDA device, the named
  hardware, ok cells of the backends it compares), and ``why`` says which.  On another
  device of the kind a claim needs (an H200 for an A100 claim) ours is still computed and
  shown for reference; so it is on a device of another kind (a CPU) where the claim says
  ``requires: {device: cuda, otherwise: reference}``, as SSM-Scope's whole-model claims
  do: a CPU is not their RTX 4090, but the same comparison of our runs is worth showing.

Cells are selected by model name (one or a list) or by family, and by one backend or a
list of them (the fastest per point), so that one claim reads our block runs
(``attention/fused``), our whole-model runs (``qwen2.5-0.5b/hf-eager``, an lm table's
``ssmbench.lm.table.cells_view``) and a run imported from another study (their
``qwen25-instruct/hf``) alike.

A metric never guesses: without the cells it needs it returns ``(None, why)``.  Imports
no torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import yaml

from ssmbench.paths import REPO
from ssmbench.select import device_kind, one_kind
from ssmbench.tables import family_of

CLAIMS = REPO / "config" / "claims.yaml"
COLUMNS = [
    "run",
    "id",
    "claim",
    "source",
    "hardware",
    "published",
    "published_low",
    "published_high",
    "ours",
    "ours_lo",
    "ours_hi",
    "ratio",
    "ratio_lo",
    "ratio_hi",
    "verdict",
    "why",
    "cells",
]
COMPARES = ("within", "at_least", "at_most", "about", "covers")


def load(path: str | Path = CLAIMS) -> list[dict]:
    """The claims of ``path``, each checked for the keys :func:`evaluate` reads."""
    with open(path) as f:
        try:
            claims = yaml.safe_load(f)["claims"]
        except yaml.YAMLError as e:  # its mark names the file, line and column
            raise ValueError(f"{path}: not valid YAML: {e}") from None
        except (KeyError, TypeError):
            raise ValueError(f"{path}: key 'claims': missing (a list of claims)") from None
    for i, claim in enumerate(claims):
        for key in ("id", "claim", "source", "hardware", "published", "compare", "metric"):
            if key not in claim:
                raise ValueError(f"{path}: claims[{i}] ({claim.get('id', '?')}) has no {key!r}")
        if claim["metric"].get("name") not in METRICS:
            raise ValueError(
                f"{path}: claim {claim['id']}: unknown metric {claim['metric'].get('name')!r}; "
                f"known: {sorted(METRICS)}"
            )
        if claim["compare"] not in COMPARES:
            raise ValueError(f"{path}: claim {claim['id']}: unknown compare {claim['compare']!r}")
        otherwise = (claim.get("requires") or {}).get("otherwise", "reference")
        if otherwise != "reference":
            raise ValueError(
                f"{path}: claim {claim['id']}: requires.otherwise must be 'reference' "
                f"(ours shown on another device), not {otherwise!r}"
            )
        if claim["compare"] == "covers" and not 0 <= claim.get("tolerance", -1) < 1:
            raise ValueError(
                f"{path}: claim {claim['id']}: compare 'covers' needs an absolute tolerance "
                "in [0, 1)"
            )
        if claim["compare"] == "about" and not 0 < claim.get("tolerance", 0) < 1:
            raise ValueError(
                f"{path}: claim {claim['id']}: compare 'about' needs a tolerance in (0, 1)"
            )
    return claims


def _joined(value) -> str:
    return "|".join(value) if isinstance(value, list) else str(value)


def _label(select: dict) -> str:
    return f"{_joined(select.get('model') or select.get('family'))}/{_joined(select['backend'])}"


def _ok(cells: pd.DataFrame, phase: str | None, select: dict) -> pd.DataFrame:
    """The ok cells a selector names: ``model`` (a name or a list of names: our block
    model, our zoo model and an imported study's name for one checkpoint) or ``family``,
    and ``backend`` (a name or a list of names: at each (batch, T, dtype) point the fastest
    of them is kept, so one claim can read our ``fused`` cells and an imported run's
    ``mamba_ssm`` ones); optionally ``batch`` and ``dtype``."""
    if ("model" in select) == ("family" in select):
        raise ValueError(f"a selector names a model or a family, not both or neither: {select}")
    keep = cells.status == "ok"
    models = select.get("model", [])
    models = models if isinstance(models, list) else [models]
    if "model" in select:
        keep &= cells.model.isin(models)
    else:
        keep &= family_of(cells) == select["family"]
    backends = select["backend"] if isinstance(select["backend"], list) else [select["backend"]]
    keep &= cells.backend.isin(backends)
    for column in ("batch", "dtype"):
        if column in select:
            keep &= cells[column] == select[column]
    if phase is not None:
        keep &= cells.phase == phase
    rows = cells[keep]
    if (len(models) > 1 or len(backends) > 1) and not rows.empty:
        rows = rows.sort_values("time_ms_median").drop_duplicates(["batch", "seq_len", "dtype"])
    return rows


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
    at_len: int | None = None,
    same_dtype: bool = True,
    samples: dict | None = None,
) -> tuple[float | None, str, str, tuple[float, float]]:
    """Median latency of ``slow`` over ``fast`` on the (batch, T) points both ran (at one
    dtype, unless ``same_dtype`` is false: then each side at its fastest dtype, for models
    published in their own dtypes): the largest ratio over them, as "up to" claims state
    it; ``longest``: at the longest such T; ``max_len``: T <= max_len only; ``at_len``: at
    that T only.  Returns (ratio or None, why, the cells used, (lo, hi)): the 95% interval
    of the ratio at the point it was taken, an unpaired bootstrap over the two cells'
    samples (``samples``: ssmbench.analysis.samples_by_cell; NaN without them)."""
    a, b = (with_kind(_ok(cells, phase, side)) for side in (slow, fast))
    keys = ["batch", "seq_len"] + (["dtype"] if same_dtype else [])
    if not same_dtype:  # each side at its fastest dtype per point
        a, b = (t.sort_values("time_ms_median").drop_duplicates(keys) for t in (a, b))
    both = a.merge(b, on=keys, suffixes=("_slow", "_fast"))
    # never a ratio of two device kinds (a node whose GPUs differ)
    same = pd.Series(
        [one_kind(x, y) for x, y in zip(both.kind_slow, both.kind_fast, strict=True)],
        index=both.index,
        dtype=bool,
    )
    apart = "" if same.all() else " on one device kind"
    both = both[same]
    where = ""
    if max_len is not None:
        both, where = both[both.seq_len <= max_len], f" at T <= {max_len}"
    if at_len is not None:
        longest_shared = f" (longest shared: {both.seq_len.max()})" if not both.empty else ""
        both, where = both[both.seq_len == at_len], f" at T = {at_len}{longest_shared}"
    if both.empty:
        missing = [_label(s) for s, t in ((slow, a), (fast, b)) if t.empty]
        why = f"no ok {phase or ''} cells of {', '.join(missing)}" if missing else "no shared T"
        why += "" if missing else apart
        return None, (why + where).replace("  ", " "), "", (math.nan, math.nan)
    if longest:
        both = both[both.seq_len == both.seq_len.max()]
    ratios = both.time_ms_median_slow / both.time_ms_median_fast
    top = both.loc[ratios.idxmax()]
    used = (
        f"{top.model_slow}/{top.backend_slow} vs {top.model_fast}/{top.backend_fast} "
        f"{phase or ''} at b{top.batch} T{top.seq_len}"
    )
    interval = _interval(top, samples)
    return float(ratios.max()), "", used.replace("  ", " "), interval


def with_kind(cells: pd.DataFrame) -> pd.DataFrame:
    """``cells`` with ``kind``, the device kind each ran on (``select.device_kind``)."""
    return cells.assign(kind=[device_kind(row) for _, row in cells.iterrows()])


def _interval(top: pd.Series, samples: dict | None) -> tuple[float, float]:
    """The unpaired 95% interval of a merged row's slow over fast median (NaN without the
    two cells' samples)."""
    if not samples:
        return math.nan, math.nan
    from ssmbench.analysis import unpaired_interval
    from ssmbench.tables import KEYS

    def key(side):
        return tuple(
            top[k] if k in ("batch", "seq_len", "dtype") else top[f"{k}_{side}"] for k in KEYS
        )

    def replicate(side):
        value = top.get(f"replicate_{side}", 0)
        return 0 if pd.isna(value) else int(value)

    low, high, _ = unpaired_interval(
        samples, key("slow"), key("fast"), replicate("slow"), replicate("fast")
    )
    return low, high


def crossover_len(
    cells: pd.DataFrame, ssm: dict, attention: dict, phase: str | None = None
) -> tuple[float | None, str, str]:
    """The shortest measured T (batch 1 if measured, else the smallest batch) from which
    ``ssm`` is faster than ``attention`` at every longer measured T too."""
    a, b = _ok(cells, phase, ssm), _ok(cells, phase, attention)
    both = a.merge(b, on=["batch", "seq_len", "dtype"], suffixes=("_ssm", "_attn"))
    if both.empty:
        return None, "no shared ok cells of the two backends", ""
    both = both[both.batch == both.batch.min()].sort_values("seq_len")
    faster = (both.time_ms_median_ssm < both.time_ms_median_attn).to_numpy()
    for i in range(len(faster)):
        if faster[i:].all():
            t = int(both.seq_len.iloc[i])
            return float(t), "", f"{_label(ssm)} vs {_label(attention)} b{both.batch.min()}"
    return None, f"{_label(ssm)} is never faster at the measured T", ""


def best(cells: pd.DataFrame, column: str, select: dict) -> tuple[float | None, str, str]:
    """The highest value of ``column`` among the ok cells of ``select``."""
    rows = _ok(cells, select.get("phase"), select)
    if column in rows:
        rows = rows[rows[column].notna()]
    if rows.empty or column not in rows:
        return None, f"no ok {_label(select)} cell with {column}", ""
    top = rows.loc[rows[column].idxmax()]
    return float(top[column]), "", _describe(top.to_frame().T)


def task_accuracy(
    tasks: pd.DataFrame | None, task: str, eval: str, family: str
) -> tuple[float | None, str, str, tuple[float, float]]:
    """The mean over seeds of a task's headline metric on one evaluation split, with the
    seeds' range (min, max) as its spread; ``tasks`` is a run's tasks table
    (ssmbench.tasks.table), None for a run that trains no tasks."""
    none = (math.nan, math.nan)
    if tasks is None:
        return None, "this run trains no tasks (preset key tasks)", "", none
    rows = tasks[
        tasks.headline & (tasks.task == task) & (tasks["eval"] == eval) & (tasks.family == family)
    ]
    ok = rows[rows.status == "ok"]
    if ok.empty:
        statuses = ", ".join(sorted(set(rows.status))) or "no such cells"
        return None, f"no ok {task}/{family} runs ({statuses})", "", none
    seeds = ", ".join(str(s) for s in sorted(ok.seed))
    cut = next((c for c in ok.cut if c), "")
    used = f"{task}/{eval}/{family}, seeds {seeds}" + (f"; cut: {cut}" if cut else "")
    return float(ok.value.mean()), "", used, (float(ok.value.min()), float(ok.value.max()))


METRICS: dict[str, Callable[..., tuple[float | None, str, str]]] = {
    "latency_ratio": latency_ratio,
    "crossover_len": crossover_len,
    "best": best,
    "task_accuracy": task_accuracy,  # reads the run's tasks table, not its cells
}


def _unmet(claim: dict, cells: pd.DataFrame) -> tuple[str, str]:
    """Why the run cannot test the claim, as (hard, soft): a hard reason (no device of the
    kind the claim needs) leaves ours empty; a soft one (another device of that kind than
    the claim's ``device_name`` pattern, or any other device where the claim says
    ``otherwise: reference``) keeps ours, shown for reference beside a "not comparable
    here" verdict."""
    needs = claim.get("requires") or {}
    if "device" in needs and needs["device"] not in set(cells.device):
        if needs.get("otherwise") == "reference":
            return "", _measured_elsewhere(claim, cells)
        devices = ", ".join(sorted(set(cells.device)))
        return f"needs a {needs['device']} run (this one ran on {devices})", ""
    pattern = needs.get("device_name")
    if pattern and not any(re.search(pattern, str(n)) for n in set(cells.device_name)):
        return "", _measured_elsewhere(claim, cells)
    return "", ""


def _measured_elsewhere(claim: dict, cells: pd.DataFrame) -> str:
    """Why ours is shown for reference only: "measured on <the claim's hardware>; this
    run's device is <ours>", which names its kind too when it is no GPU ("cpu (Xeon)")."""
    names = ", ".join(sorted({str(n) for n in cells.device_name}))
    kinds = sorted(set(cells.device) - {"cuda"})
    names = f"{', '.join(kinds)} ({names})" if kinds else names
    return f"measured on {claim['hardware']}; this run's device is {names}"


def is_task_claim(claim: dict) -> bool:
    """A claim of the quality axis, judged on a run's tasks table."""
    return claim["metric"]["name"] == "task_accuracy"


def reference(claim: dict) -> float | None:
    """The published number a ratio is taken against: the upper bound, else the lower."""
    low, high = claim["published"]
    return high if high is not None else low


def stated(claim: dict) -> str:
    """The published statement in a few characters: "20-40", ">= 4", "<= 2048", "1.9 +-10%"."""
    low, high = claim["published"]
    if claim["compare"] == "about":
        return f"{reference(claim):.4g} +-{claim['tolerance']:.0%}"
    if claim["compare"] == "covers":
        return f"{low:.3g}"
    if low is None:
        return f"<= {high:.4g}"
    if high is None:
        return f">= {low:.4g}"
    return f"{low:.4g}-{high:.4g}"


def verdict(
    claim: dict, ours: float | None, spread: tuple[float, float] = (math.nan, math.nan)
) -> str:
    """``covers``: the published point lies in ours' spread over seeds (min, max), widened
    by the claim's absolute ``tolerance``."""
    low, high = claim["published"]
    if ours is None or (isinstance(ours, float) and math.isnan(ours)):
        return "not comparable here"
    if claim["compare"] == "covers":
        tol = claim["tolerance"]
        ok = spread[0] - tol <= low <= spread[1] + tol
    elif claim["compare"] == "at_least":
        ok = ours >= low
    elif claim["compare"] == "at_most":
        ok = ours <= high
    elif claim["compare"] == "about":
        ok = abs(ours / reference(claim) - 1) <= claim["tolerance"]
    else:
        ok = (low is None or ours >= low) and (high is None or ours <= high)
    return "reproduced" if ok else "contradicted"


def evaluate(
    cells: pd.DataFrame,
    run: str,
    claims: list[dict] | None = None,
    samples: pd.DataFrame | None = None,
    tasks: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per claim for one run's cells (see the module docstring).  Task claims
    (metric ``task_accuracy``) read the run's ``tasks`` table: ours is the mean over seeds
    and ``ours_lo`` / ``ours_hi`` the seeds' range; a run without a tasks table has no
    rows for them.  With the run's
    ``samples`` table, a latency-ratio claim's ``ours`` and ``ratio`` (ours / published)
    carry their 95% interval (``ours_lo``, ``ours_hi``, ``ratio_lo``, ``ratio_hi``: an
    unpaired bootstrap over the two cells' samples); the other metrics have none."""
    from ssmbench.analysis import samples_by_cell

    by_cell = samples_by_cell(samples)
    rows = []
    for claim in claims if claims is not None else load():
        if is_task_claim(claim) and tasks is None:
            continue  # a run that trains nothing is not judged on the quality axis
        low, high = claim["published"]
        why, elsewhere = _unmet(claim, cells)
        ours, used, (ours_lo, ours_hi) = None, "", (math.nan, math.nan)
        if not why:
            params = {k: v for k, v in claim["metric"].items() if k != "name"}
            if claim["metric"]["name"] == "latency_ratio":
                params["samples"] = by_cell
            table = tasks if claim["metric"]["name"] == "task_accuracy" else cells
            ours, why, used, *interval = METRICS[claim["metric"]["name"]](table, **params)
            if interval:
                ours_lo, ours_hi = interval[0]
        if elsewhere:  # and why ours is empty, where it is
            empty = f"; {why}" if why else ""
            why = elsewhere + (" (ours shown for reference)" if ours is not None else empty)
        ref = reference(claim)
        source = claim["source"]
        rows.append(
            {
                "run": run,
                "id": claim["id"],
                "claim": claim["claim"],
                "source": f"{source['paper']}, {source['where']}",
                "hardware": claim["hardware"],
                "published": stated(claim),
                "published_low": low,
                "published_high": high,
                "ours": ours,
                "ours_lo": ours_lo,
                "ours_hi": ours_hi,
                "ratio": None if ours is None or not ref else ours / ref,
                "ratio_lo": ours_lo / ref if ref and ours is not None else math.nan,
                "ratio_hi": ours_hi / ref if ref and ours is not None else math.nan,
                "verdict": (
                    verdict(claim, ours, (ours_lo, ours_hi)) if not why else "not comparable here"
                ),
                "why": why,
                "cells": used,
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)
