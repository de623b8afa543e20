"""Task records -> ``tables/tasks.csv``, and the two task figures' tables.  No torch.

``tasks.csv`` is tidy: one row per (task, eval split, family, seed, metric), the record's
status and reason on every row (a run that did not finish has its rows with an empty
value), ``headline`` marking the task's headline metric, and the run's cut.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssmbench.registry import base_family
from ssmbench.tasks.base import METRICS

COLUMNS = [
    "run",
    "task",
    "eval",
    "family",
    "seed",
    "metric",
    "headline",
    "value",
    "status",
    "reason",
    "n_parameters",
    "n_steps",
    "epochs",
    "train_samples",
    "eval_samples",
    "seconds",
    "device",
    "device_name",
    "cut",
]
KEYS = ["task", "eval", "family", "seed", "metric"]
# the figure tables' columns (ssmbench.figures.tasks reads them)
FIGURE_COLUMNS = [
    "task",
    "eval",
    "metric",
    "family",
    "seed",
    "status",
    "reason",
    "value",
    "study",
    "chance",
    "cut",
    "device",
]
SPEED_COLUMNS = ["prefill_ms", "decode_ms", "speed_T", "speed_batch", "speed_backend"]


def tasks_table(records: list[dict]) -> pd.DataFrame:
    """One row per (task, eval, family, seed, metric) of ``records`` (task record dicts)."""
    rows = []
    for r in records:
        for name in r["evals"]:
            scores = r["final"].get(name) or {}
            for metric in METRICS[r["kind"]]:
                value = scores.get(metric)
                rows.append(
                    {
                        "run": r["run"],
                        "task": r["task"],
                        "eval": name,
                        "family": r["family"],
                        "seed": r["seed"],
                        "metric": metric,
                        "headline": metric == r["metric"],
                        "value": np.nan if value is None else float(value),
                        "status": r["status"],
                        "reason": r["reason"],
                        "n_parameters": r["n_parameters"],
                        "n_steps": r["n_steps"],
                        "epochs": r["train"].get("epochs"),
                        "train_samples": r["train_samples"],
                        "eval_samples": (r["eval_samples"] or {}).get(name),
                        "seconds": r["seconds"],
                        "device": r["device"],
                        "device_name": r["device_name"],
                        "cut": r["cut"],
                    }
                )
    table = pd.DataFrame(rows, columns=COLUMNS)
    if table.duplicated(KEYS).any():
        dup = table[table.duplicated(KEYS, keep=False)].iloc[0]
        raise ValueError(
            f"two task records for {dup.task}/{dup.family}/s{dup.seed} ({dup['eval']})"
        )
    ok = table.status == "ok"
    if table[ok].value.isna().any():
        bad = table[ok & table.value.isna()].iloc[0]
        raise ValueError(f"{bad.task}/{bad.family}/s{bad.seed}: ok but no {bad.metric}")
    return table.sort_values(KEYS, kind="stable").reset_index(drop=True)


def not_run_records(planned, done: set, run: str, specs, why: str) -> list[dict]:
    """The records of planned cells a stopped run left without one: ``not_run``."""
    out = []
    for cell in planned:
        if (cell.task, cell.family, cell.seed) in done:
            continue
        spec = specs[cell.task]
        out.append(
            {
                "run": run,
                "task": cell.task,
                "family": cell.family,
                "seed": cell.seed,
                "status": "not_run",
                "reason": why,
                "kind": spec["kind"],
                "metric": spec["metric"],
                "evals": list(spec["data"]["evals"]),
                "final": {},
                "n_parameters": None,
                "n_steps": 0,
                "train": spec["train"],
                "train_samples": None,
                "eval_samples": {},
                "seconds": None,
                "device": "",
                "device_name": "",
                "cut": "",
            }
        )
    return out


def study_values(claims: list[dict]) -> dict[tuple[str, str, str], float]:
    """(task, eval, family) -> the case study's published headline value, from the task
    claims of config/claims.yaml (metric ``task_accuracy``)."""
    out = {}
    for claim in claims:
        m = claim["metric"]
        if m["name"] == "task_accuracy":
            out[(m["task"], m["eval"], m["family"])] = float(claim["published"][0])
    return out


def accuracy_table(
    tasks: pd.DataFrame, claims: list[dict], chance: dict[str, float]
) -> pd.DataFrame:
    """Figure task_accuracy's table: the headline metric's rows, with the study's value
    (empty where it has none) and the metric's chance level."""
    rows = tasks[tasks.headline].copy()
    study = study_values(claims)
    rows["study"] = [
        study.get((t, e, f), np.nan)
        for t, e, f in zip(rows.task, rows["eval"], rows.family, strict=True)
    ]
    rows["chance"] = rows.task.map(chance)
    rows["device"] = rows.device_name.where(rows.device_name.astype(bool), rows.device)
    return rows[FIGURE_COLUMNS].reset_index(drop=True)


def speed_of(cells: pd.DataFrame) -> pd.DataFrame:
    """Per family, its prefill and decode latency from a run's block cells: the ok cells
    at the smallest batch and the longest T both phases ran, the fastest backend there."""
    out = []
    ok = cells[cells.status == "ok"]
    for family, rows in ok.groupby("model"):
        entry = {"family": family}
        both = set(rows[rows.phase == "prefill"].seq_len) & set(
            rows[rows.phase == "decode"].seq_len
        )
        if not both:
            out.append(entry)
            continue
        t = max(both)
        at = rows[rows.seq_len == t]
        batch = at.batch.min()
        at = at[at.batch == batch]
        for phase in ("prefill", "decode"):
            best = at[at.phase == phase].sort_values("time_ms_median").iloc[0]
            entry[f"{phase}_ms"] = float(best.time_ms_median)
            entry[f"{phase}_backend"] = best.backend
        entry.update(speed_T=int(t), speed_batch=int(batch))
        entry["speed_backend"] = (
            entry.pop("prefill_backend")
            if entry["prefill_backend"] == entry["decode_backend"]
            else f"{entry.pop('prefill_backend')} (prefill), {entry['decode_backend']} (decode)"
        )
        entry.pop("decode_backend", None)
        out.append(entry)
    return pd.DataFrame(out, columns=["family", *SPEED_COLUMNS])


def quality_vs_speed_table(accuracy: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """Figure quality_vs_speed's table: task_accuracy's rows with their family's speed (a
    named variant's is its family's: ``ssmbench.registry.Variant``)."""
    speed = speed_of(cells).rename(columns={"family": "speed_family"})
    rows = accuracy.assign(speed_family=accuracy.family.map(base_family))
    return rows.merge(speed, on="speed_family", how="left")[FIGURE_COLUMNS + SPEED_COLUMNS]


def summary(tasks: pd.DataFrame) -> pd.DataFrame:
    """Mean, min, max and count over seeds of the headline metric, per (task, eval,
    family): the accuracy table of the note and the README."""
    rows = tasks[tasks.headline & (tasks.status == "ok")]
    g = rows.groupby(["task", "eval", "family"]).value
    return g.agg(mean="mean", min="min", max="max", seeds="count").reset_index()
