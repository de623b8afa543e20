"""One training job: a (task, family, seed) cell trained and scored, as a record.

:func:`run_task` never raises for what a cell can meet: data that is not on disk is
``unavailable`` with the loader's words; a run whose loss stops being finite is ``failed``
with its loss curve kept (``ssmbench.tasks.train``); an error is ``failed`` (or ``oom``)
with its type and message.  Imports torch lazily, so the record's helpers stay torch-free.
"""

from __future__ import annotations

import json
import math
import platform
import time
import traceback

from ssmbench import registry
from ssmbench.gpulease import gpu_record
from ssmbench.tasks.base import DataUnavailable, TaskData
from ssmbench.tasks.matrix import TaskCell

BACKEND = "torch"  # every family's vectorised PyTorch (ssmbench.models), trainable
RECORD_KEYS = (
    "run",
    "task",
    "family",
    "seed",
    "status",
    "reason",
    "kind",
    "metric",
    "chance",
    "evals",
    "final",
    "history",
    "steps",
    "n_steps",
    "n_parameters",
    "seconds",
    "train_samples",
    "eval_samples",
    "model",
    "train",
    "data",
    "cut",
    "backend",
    "device",
    "device_name",
    "gpu",
    "threads",
    "torch",
)


def splits(task: str, spec: dict, imdb_dir: str) -> tuple[TaskData, dict[str, TaskData]]:
    """The task's training split and its evaluation splits, from config/tasks.yaml's
    ``data``, all from the study's data seed (the generators mix the split's name into it,
    so a test set never repeats the training set); IMDb's test split uses the training
    split's vocabulary."""
    data = spec["data"]
    seed = data["seed"]
    if task == "imdb":
        from ssmbench.tasks.imdb import load_imdb

        train, vocab = load_imdb(imdb_dir, "train", seed=seed, **data["train"])
        evals = {
            name: load_imdb(imdb_dir, "test", vocab=vocab, seed=seed, **params)[0]
            for name, params in data["evals"].items()
        }
        return train, evals
    from ssmbench.tasks.data import make

    params = dict(data["train"])
    train = make(task, "train", params.pop("n"), seed=seed, **params)
    evals = {}
    for name, params in data["evals"].items():
        params = dict(params)
        evals[name] = make(task, name, params.pop("n"), seed=seed, **params)
    return train, evals


def _device_name(device: str) -> str:
    from ssmbench.provenance import cpu_model

    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    return f"{cpu_model()} ({platform.machine()})"


def _finite(x):
    """JSON has no NaN: a non-finite float is None."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def run_task(
    cell: TaskCell,
    spec: dict,
    run: str,
    *,
    imdb_dir: str = "data/imdb",
    threads: int = 1,
    device: str = "cpu",
    cut: str = "",
    progress=print,
    model_options: dict | None = None,
) -> dict:
    """Train ``cell``'s family on its task under ``spec`` (the task's resolved settings,
    ``TaskMatrix.spec``) and score it on every evaluation split: the record as a dict
    (keys :data:`RECORD_KEYS`, schema ``workflow/schemas/task_record.schema.json``).
    ``cell.family`` is a family or a named variant of one (``ssmbench.registry.VARIANTS``:
    its family's block and model size, with the variant's ``mixer_options``).
    ``model_options`` are keyword arguments of
    :func:`ssmbench.tasks.model.build_task_model` (``mixer_options``: the block's options;
    ``learned_pad``); the record's ``model`` then holds them beside the study's kwargs."""
    import torch

    from ssmbench.process import error_status

    torch.set_num_threads(threads)
    family = registry.base_family(cell.family)
    if cell.family in registry.VARIANTS:
        variant = registry.VARIANTS[cell.family]
        model_options = {"mixer_options": variant.options, **(model_options or {})}
    record = {
        "run": run,
        "task": cell.task,
        "family": cell.family,
        "seed": cell.seed,
        "status": "failed",
        "reason": "",
        "kind": spec["kind"],
        "metric": spec["metric"],
        "chance": spec["chance"],
        "evals": list(spec["data"]["evals"]),
        "final": {},
        "history": [],
        "steps": [],
        "n_steps": 0,
        "n_parameters": None,
        "seconds": None,
        "train_samples": None,
        "eval_samples": {},
        "model": {**spec["models"][family], **_jsonable(model_options or {})},
        "train": spec["train"],
        "data": spec["data"],
        "cut": cut,
        "backend": BACKEND,
        "device": device,
        "device_name": _device_name(device),  # initialises CUDA on a GPU: gpu comes after
        "gpu": gpu_record(device),
        "threads": threads,
        "torch": torch.__version__,
    }
    start = time.perf_counter()
    try:
        train_data, evals = splits(cell.task, spec, imdb_dir)
    except DataUnavailable as e:
        record.update(status="unavailable", reason=str(e))
        return record
    record["train_samples"] = len(train_data)
    record["eval_samples"] = {name: len(d) for name, d in evals.items()}
    try:
        from ssmbench.tasks.model import build_task_model, n_parameters
        from ssmbench.tasks.train import TrainConfig, train

        model = build_task_model(
            family,
            spec["models"][family],
            train_data,
            backend=BACKEND,
            seed=cell.seed,
            **(model_options or {}),
        ).to(device)
        record["n_parameters"] = n_parameters(model)
        config = TrainConfig.from_dict(spec["train"])

        def report(epoch, n_epochs, loss):
            progress(f"{cell.name}: epoch {epoch}/{n_epochs}, train loss {loss:.4f}", flush=True)

        result = train(model, train_data, evals, config, seed=cell.seed, progress=report)
    except Exception as e:  # status is data: the error is the record's reason
        traceback.print_exc()
        status, reason = error_status(e)
        record.update(status=status, reason=reason, seconds=time.perf_counter() - start)
        return record
    out = result.to_dict()
    record.update(
        status=out["status"],
        reason=out["reason"] or "",
        final=out["final"] if out["status"] == "ok" else {},
        history=out["history"],
        steps=out["steps"],
        n_steps=out["n_steps"],
        seconds=time.perf_counter() - start,
    )
    return _finite(record)


def _jsonable(options: dict) -> dict:
    """Model options as JSON holds them (tuples as lists), so the record reads back as
    it was written."""
    return json.loads(json.dumps(options))


def headline(record: dict) -> dict[str, float | None]:
    """Each evaluation split's headline metric (None where the run has none)."""
    return {
        name: (record["final"].get(name) or {}).get(record["metric"]) for name in record["evals"]
    }
