"""Mamba-3 on parity at the case study's settings: the faithful block and ablation rows,
each row one change from it, several seeds, one training job per (row, seed).

    python scripts/bench_mamba3_parity.py [--rows faithful zero-pad] [--seeds 0 1 2]
        [--jobs 2] [--out /tmp/mamba3_parity] [--epochs N]
    python scripts/bench_mamba3_parity.py --report [--out /tmp/mamba3_parity]

Each job is :func:`ssmbench.tasks.run.run_task` (one thread) on the ``tasks-study``
preset's parity spec (config/tasks.yaml: L = 128, 2,000 training sequences x 20 epochs,
batch 64, lr 3e-3, wd 0.01, cosine, warm-up 0.05, 1,000 test sequences; the Mamba-3 entry
d_model 64, 2 layers, d_state 32, headdim 32), with the row's ``model_options``
(:func:`ssmbench.tasks.model.build_task_model`'s: ``learned_pad``, and ``mixer_options``,
:class:`ssmbench.models.mamba3.Mamba3Mixer`'s keyword arguments).  Rows: ``faithful`` (the
project's task model and mamba_ssm's block), ``zero-pad`` (the task model as it was: the
embedding's PAD row, parity's bit 0, held at zero, which caps every Mamba near 0.75), and
each block change of :data:`BLOCK_CHANGES` on its own.  ``--epochs`` cuts the training
(for a smoke run; the cut is in each record).

Writes each job's record to ``<out>/<row>-s<seed>.json`` (a job whose record is there is
not run again) and ``<out>/summary.json`` (per row and seed: final test token accuracy,
per-epoch test token accuracy and train loss, seconds); prints per seed and per row (mean
and range of the final test token accuracy, the curve at epochs 1, 5, 10, 15, 20).
``--report`` trains nothing and does the same for every record already in ``<out>``.  The
output belongs outside the repository: these are experiments, not shipped results.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.config import load, plan
from ssmbench.models.mamba3 import MAMBA3_VARIANTS

TASK, FAMILY, PRESET = "parity", "mamba3", "tasks-study"
METRIC = "token_accuracy"
CURVE_EPOCHS = (1, 5, 10, 15, 20)
ROW_WIDTH = 36  # characters of the row column

# block change -> Mamba3Mixer keyword arguments (none: mamba_ssm's block); the named
# variants of ssmbench.models.mamba3 are changes too
BLOCK_CHANGES: dict[str, dict] = {
    "dt-wide": {"dt_range": (0.1, 1.0)},  # dt init log-uniform in [0.1, 1] (not [1e-3, 0.1])
    "A-per-head": {"A_mode": "per-head"},  # one learned A per head, -A ~ U[1, 16] (Mamba-2's)
    "angle-unbounded": {"angle_bound": None},  # theta = angle projection, no pi tanh
    **MAMBA3_VARIANTS,
}
# row -> build_task_model keyword arguments
ROWS: dict[str, dict] = {"faithful": {}, "zero-pad": {"learned_pad": False}}
for _name, _options in BLOCK_CHANGES.items():
    ROWS[_name] = {"mixer_options": _options}


def parity_spec(epochs: int | None = None) -> tuple[dict, str]:
    """The parity spec of the ``tasks-study`` preset (the study's settings) and its cut;
    ``epochs`` overrides the number of epochs (the cut then says so)."""
    tasks = plan(load(overrides={"preset": PRESET})).tasks
    spec, cut = tasks.spec(TASK), tasks.cut(TASK)
    if epochs is not None and epochs != spec["train"]["epochs"]:
        spec = {**spec, "train": {**spec["train"], "epochs": epochs}}
        cut = f"train.epochs {tasks.spec(TASK)['train']['epochs']} -> {epochs} (smoke run)"
    return spec, cut


def train_row(row: str, seed: int, out_dir: str, epochs: int | None = None) -> dict:
    """Train row ``row`` with ``seed`` (one thread) unless ``<out_dir>/<row>-s<seed>.json``
    exists; returns the record."""
    from ssmbench.tasks.matrix import TaskCell
    from ssmbench.tasks.run import run_task

    path = Path(out_dir) / f"{row}-s{seed}.json"
    if path.exists():
        return json.loads(path.read_text())
    spec, cut = parity_spec(epochs)
    record = run_task(
        TaskCell(TASK, FAMILY, seed),
        spec,
        "mamba3-parity",
        threads=1,
        cut=cut,
        progress=lambda *a, **k: None,
        model_options=ROWS[row],
    )
    record["row"] = row
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(path)
    return record


def summarize(record: dict) -> dict:
    """One job's row, seed, status, seconds, final test token accuracy and its per-epoch
    test token accuracy and train loss."""
    history = record["history"]
    return {
        "row": record["row"],
        "seed": record["seed"],
        "status": record["status"],
        "reason": record["reason"],
        "seconds": record["seconds"],
        "final": (record["final"].get("test") or {}).get(METRIC),
        "test_accuracy": [h["eval"]["test"][METRIC] for h in history],
        "train_loss": [h["train_loss"] for h in history],
        "model_options": ROWS[record["row"]],
    }


def table(summaries: list[dict]) -> str:
    """Per seed: final accuracy, the curve at CURVE_EPOCHS, seconds; per row: mean and
    range over its seeds."""
    lines = [f"{'row':<{ROW_WIDTH}} seed  final   " + "  ".join(f"ep{e:<3}" for e in CURVE_EPOCHS)]
    lines[0] += "  seconds"
    for s in summaries:
        curve = [
            f"{s['test_accuracy'][e - 1]:.3f}" if e <= len(s["test_accuracy"]) else "  -  "
            for e in CURVE_EPOCHS
        ]
        final = "failed" if s["final"] is None else f"{s['final']:.3f} "
        lines.append(
            f"{s['row']:<{ROW_WIDTH}} {s['seed']:>4}  {final} "
            + "  ".join(curve)
            + f"  {s['seconds']:.0f}"
        )
    lines.append("")
    lines.append(f"{'row':<{ROW_WIDTH}} seeds  mean   min    max    >=0.9")
    for row in dict.fromkeys(s["row"] for s in summaries):
        finals = [s["final"] for s in summaries if s["row"] == row and s["final"] is not None]
        if not finals:
            lines.append(f"{row:<{ROW_WIDTH}} none finished")
            continue
        hits = sum(f >= 0.9 for f in finals)
        lines.append(
            f"{row:<{ROW_WIDTH}} {len(finals):>5}  {statistics.mean(finals):.3f}  "
            f"{min(finals):.3f}  {max(finals):.3f}  {hits}/{len(finals)}"
        )
    return "\n".join(lines)


def run(rows: list[str], seeds: list[int], jobs: int, out_dir: str, epochs: int | None) -> list:
    """Every (row, seed), ``jobs`` at a time, each in its own process; the summaries."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    work = [(row, seed) for row in rows for seed in seeds]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        futures = [pool.submit(train_row, row, seed, out_dir, epochs) for row, seed in work]
        records = []
        for (row, seed), future in zip(work, futures, strict=True):
            record = future.result()
            print(f"{row} s{seed}: {record['status']} {summarize(record)['final']}", flush=True)
            records.append(record)
    summaries = [summarize(r) for r in records]
    Path(out_dir, "summary.json").write_text(json.dumps(summaries, indent=1))
    return summaries


def report(out_dir: str) -> list:
    """The summaries of every record in ``out_dir`` (rows this script knows), by row and
    seed; written to ``<out_dir>/summary.json``."""
    records = [json.loads(p.read_text()) for p in Path(out_dir).glob("*-s*.json")]
    records = [r for r in records if r.get("row") in ROWS]
    order = list(ROWS)
    records.sort(key=lambda r: (order.index(r["row"]), r["seed"]))
    summaries = [summarize(r) for r in records]
    Path(out_dir, "summary.json").write_text(json.dumps(summaries, indent=1))
    return summaries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", default=["faithful"], choices=list(ROWS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=2, help="jobs at a time (one thread each)")
    parser.add_argument("--out", default="/tmp/mamba3_parity")
    parser.add_argument("--epochs", type=int, default=None, help="cut the training (smoke)")
    parser.add_argument("--report", action="store_true", help="train nothing: the table of --out")
    args = parser.parse_args(argv)
    if args.report:
        print(table(report(args.out)))
    else:
        print(table(run(args.rows, args.seeds, args.jobs, args.out, args.epochs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
