"""The one training loop of the quality axis, and the metrics of its tasks (base.METRICS).

:func:`train` runs AdamW with a linear warm-up and a cosine decay per step, clips the
gradients' global norm, and evaluates every eval set after each epoch and at the end.
On the CPU a fixed seed gives bit-identical loss curves and metrics.  Divergence is data:
a non-finite loss or gradient norm ends the run ``failed``, with the curve so far.

Glossary: b batch, l sequence length, c classes.  This module imports torch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ssmbench.tasks.base import IGNORE, METRICS, TaskData

SCHEDULERS = ("cosine",)  # the study's only one: linear warm-up, then cosine to 0


@dataclass(frozen=True)
class TrainConfig:
    """How a model is trained (the study's ``train:`` block, with its data's batch size)."""

    epochs: int
    batch_size: int
    lr: float  # AdamW's peak learning rate, reached at the end of the warm-up
    weight_decay: float = 0.0  # AdamW's (decoupled) weight decay
    grad_clip: float | None = None  # the gradients' global norm is clipped to this
    warmup_frac: float = 0.0  # the warm-up's share of all steps (rounded up to whole steps)
    scheduler: str = "cosine"
    eval_every_epoch: bool = True  # else the eval sets are scored only at the end
    eval_batch_size: int | None = None  # None: batch_size

    @classmethod
    def from_dict(cls, values: Mapping) -> TrainConfig:
        """A config from a mapping; ValueError naming the keys that are unknown or
        missing, or the key whose value is out of range."""
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"train config: unknown keys {unknown}; known: {known}")
        missing = [k for k in ("epochs", "batch_size", "lr") if k not in values]
        if missing:
            raise ValueError(f"train config: missing keys {missing}")
        return cls(**values)

    def __post_init__(self):
        def bad(key: str, want: str):
            raise ValueError(f"train config: {key} must be {want}, got {getattr(self, key)!r}")

        for key in ("epochs", "batch_size"):
            if not _is_int(getattr(self, key)) or getattr(self, key) < 1:
                bad(key, "a positive integer")
        if self.eval_batch_size is not None and (
            not _is_int(self.eval_batch_size) or self.eval_batch_size < 1
        ):
            bad("eval_batch_size", "a positive integer or null")
        if not _is_number(self.lr) or not self.lr > 0:
            bad("lr", "a positive number")
        if not _is_number(self.weight_decay) or self.weight_decay < 0:
            bad("weight_decay", "a number >= 0")
        if self.grad_clip is not None and (not _is_number(self.grad_clip) or self.grad_clip <= 0):
            bad("grad_clip", "a positive number or null")
        if not _is_number(self.warmup_frac) or not 0 <= self.warmup_frac < 1:
            bad("warmup_frac", "a number in [0, 1)")
        if self.scheduler not in SCHEDULERS:
            bad("scheduler", f"one of {list(SCHEDULERS)}")
        if not isinstance(self.eval_every_epoch, bool):
            bad("eval_every_epoch", "true or false")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class TrainResult:
    """What a training run did; ``to_dict`` is its JSON form."""

    status: str  # "ok" or "failed" (diverged)
    reason: str  # why it failed, naming the step and the value; "" when ok
    history: list[dict]  # per epoch: epoch, train_loss, seconds, and "eval": {set: metrics}
    steps: list[float]  # the loss of every step taken: the loss curve
    final: dict[str, dict]  # eval set -> its metrics after training ({} when failed)
    seconds: float  # the whole run's wall time, evaluations included
    n_steps: int  # steps taken (the failing one included)
    lrs: list[float] = field(default_factory=list, repr=False)  # each step's learning rate

    def to_dict(self) -> dict:
        """Plain Python: floats, ints, strings, lists and dicts; NaN and inf are None."""
        return _jsonable(
            {
                "status": self.status,
                "reason": self.reason,
                "history": self.history,
                "steps": self.steps,
                "final": self.final,
                "seconds": self.seconds,
                "n_steps": self.n_steps,
            }
        )


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


# --- the schedule and the step -------------------------------------------------------------


def warmup_steps(cfg: TrainConfig, total_steps: int) -> int:
    """ceil(warmup_frac x total_steps) steps of linear warm-up."""
    return math.ceil(cfg.warmup_frac * total_steps)


def lr_at(step: int, total_steps: int, n_warmup: int, lr: float) -> float:
    """The learning rate of step ``step`` (0-based) of ``total_steps``: ``lr * (step + 1) /
    n_warmup`` during the warm-up (so its last step runs at ``lr``), then ``lr * (1 +
    cos(pi * s / S)) / 2`` with s the steps since the warm-up and S the steps after it,
    reaching 0 where the run ends."""
    if step < n_warmup:
        return lr * (step + 1) / n_warmup
    progress = (step - n_warmup) / max(total_steps - n_warmup, 1)
    return lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def clip_gradients(model: nn.Module, max_norm: float | None) -> float:
    """The global L2 norm of ``model``'s gradients, taken before they are scaled down to
    ``max_norm`` (None: not scaled).  May be inf or NaN: the caller checks."""
    params = [p for p in model.parameters() if p.grad is not None]
    limit = math.inf if max_norm is None else max_norm
    return float(torch.nn.utils.clip_grad_norm_(params, limit))


def task_loss(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of logits ``(b, l, c)`` against targets ``(b, l)`` skipping IGNORE
    (kind "token"), or of ``(b, c)`` against ``(b,)`` (kind "sequence")."""
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),
        targets.reshape(-1),
        ignore_index=IGNORE,
        reduction=reduction,
    )


# --- evaluation ----------------------------------------------------------------------------


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The area under the ROC curve of ``scores`` for binary ``labels`` (1 positive): the
    chance that a random positive scores above a random negative, ties counting half
    (Mann-Whitney U over the positives' mid-ranks).  NaN without both classes."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels) == 1
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores), dtype=np.float64)
    sorted_scores = scores[order]
    # tied scores share the mean of the ranks (1-based) they span
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], len(scores)]
    for start, end in zip(starts, ends, strict=True):
        ranks[order[start:end]] = (start + 1 + end) / 2
    u = ranks[labels].sum() - n_pos * (n_pos + 1) / 2
    return float(u / (n_pos * n_neg))


def _batches(n: int, batch_size: int, order: torch.Tensor | None = None):
    """Index tensors of consecutive batches of ``order`` (default 0..n-1); the last may be
    short."""
    order = torch.arange(n) if order is None else order
    for start in range(0, n, batch_size):
        yield order[start : start + batch_size]


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def evaluate(model: nn.Module, data: TaskData, batch_size: int) -> dict[str, float]:
    """``data``'s metrics (:data:`METRICS` of its kind) under the model, in eval mode and
    without gradients; the model's mode is restored after.

    Kind "token": token_accuracy over the scored positions, sequence_success the share of
    sequences (those with a scored position) right at every scored position, loss the mean
    cross-entropy over scored positions.  Kind "sequence": accuracy, auc (binary tasks:
    the score is logit 1 minus logit 0; NaN for more classes or one class only), loss.
    """
    device = _device(model)
    inputs, targets = torch.from_numpy(data.inputs), torch.from_numpy(data.targets)
    was_training = model.training
    model.eval()
    loss_sum, n_scored, n_right = 0.0, 0, 0
    seq_right, seq_scored = 0, 0
    scores, labels = [], []
    with torch.no_grad():
        for idx in _batches(len(data), batch_size):
            x, y = inputs[idx].to(device), targets[idx].to(device)
            logits = model(x)  # (b l c) or (b c)
            loss_sum += float(task_loss(logits, y, reduction="sum"))
            pred = logits.argmax(-1)  # (b l) or (b)
            if data.kind == "token":
                scored = y != IGNORE  # (b l)
                right = (pred == y) & scored
                n_scored += int(scored.sum())
                n_right += int(right.sum())
                has_scored = scored.any(-1)  # (b)
                seq_scored += int(has_scored.sum())
                seq_right += int(((right == scored).all(-1) & has_scored).sum())
            else:
                n_scored += len(y)
                n_right += int((pred == y).sum())
                labels.append(y.cpu().numpy())
                if logits.shape[-1] == 2:
                    scores.append((logits[:, 1] - logits[:, 0]).float().cpu().numpy())
    model.train(was_training)
    loss = loss_sum / n_scored if n_scored else math.nan
    accuracy = n_right / n_scored if n_scored else math.nan
    if data.kind == "token":
        success = seq_right / seq_scored if seq_scored else math.nan
        metrics = {"token_accuracy": accuracy, "sequence_success": success, "loss": loss}
    else:
        area = auc(np.concatenate(scores), np.concatenate(labels)) if scores else math.nan
        metrics = {"accuracy": accuracy, "auc": area, "loss": loss}
    assert tuple(metrics) == METRICS[data.kind]
    return metrics


# --- the loop ------------------------------------------------------------------------------


def _check_fits(model: nn.Module, data: TaskData, role: str) -> None:
    """ValueError naming the split where ``data`` is not what ``model`` was built for."""
    name = f"{role} {data.task}/{data.split}"
    if getattr(model, "kind", data.kind) != data.kind:
        raise ValueError(f"{name}: kind {data.kind!r}, the model's head is {model.kind!r}")
    if getattr(model, "n_classes", data.n_classes) != data.n_classes:
        raise ValueError(f"{name}: {data.n_classes} classes, the model has {model.n_classes}")
    if getattr(model, "vocab_size", data.vocab_size) < data.vocab_size:
        raise ValueError(
            f"{name}: vocabulary of {data.vocab_size}, the model embeds {model.vocab_size}"
        )
    if len(data) == 0:
        raise ValueError(f"{name}: no sequences")


def train(
    model: nn.Module,
    train_data: TaskData,
    eval_sets: Mapping[str, TaskData],
    cfg: TrainConfig,
    *,
    seed: int,
    progress: Callable[[int, int, float], None] | None = None,
) -> TrainResult:
    """Train ``model`` (initialised by the caller) on ``train_data`` with ``cfg``; score
    every eval set after each epoch (when ``cfg.eval_every_epoch``) and at the end.

    Each epoch visits the training sequences in an order drawn from a ``torch.Generator``
    seeded with ``seed``, in batches of ``cfg.batch_size`` (the last may be short).  A
    step whose loss or gradient norm is not finite ends the run ``failed`` before the
    update, naming the step; its loss is the curve's last point.  ``progress(epoch,
    epochs, train_loss)`` is called after each epoch.
    """
    started = time.perf_counter()
    _check_fits(model, train_data, "train")
    for name, data in eval_sets.items():
        _check_fits(model, data, f"eval set {name!r}")
    if train_data.kind == "token":
        empty = np.flatnonzero((train_data.targets == IGNORE).all(axis=1))
        if len(empty):
            # a batch of such rows would have a NaN loss, which would read as divergence
            raise ValueError(
                f"train {train_data.task}/{train_data.split}: {len(empty)} rows with no "
                f"scored target (first: row {int(empty[0])})"
            )

    device = _device(model)
    inputs, targets = torch.from_numpy(train_data.inputs), torch.from_numpy(train_data.targets)
    eval_batch = cfg.eval_batch_size or cfg.batch_size
    steps_per_epoch = math.ceil(len(train_data) / cfg.batch_size)
    total_steps = cfg.epochs * steps_per_epoch
    n_warmup = warmup_steps(cfg, total_steps)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    generator = torch.Generator().manual_seed(seed)

    history: list[dict] = []
    losses: list[float] = []
    lrs: list[float] = []
    reason = ""
    model.train()
    for epoch in range(1, cfg.epochs + 1):
        epoch_started = time.perf_counter()
        order = torch.randperm(len(train_data), generator=generator)
        for idx in _batches(len(train_data), cfg.batch_size, order):
            step = len(losses)  # 0-based; the reason names it 1-based
            lr = lr_at(step, total_steps, n_warmup, cfg.lr)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss = task_loss(model(inputs[idx].to(device)), targets[idx].to(device))
            losses.append(float(loss.detach()))
            lrs.append(lr)
            if not math.isfinite(losses[-1]):
                reason = _diverged(step, epoch, total_steps, f"loss is {losses[-1]}")
                break
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = clip_gradients(model, cfg.grad_clip)
            if not math.isfinite(grad_norm):
                why = f"gradient norm is {grad_norm} (loss {losses[-1]:.4g})"
                reason = _diverged(step, epoch, total_steps, why)
                break
            optimizer.step()
        if reason:
            break
        epoch_losses = losses[-steps_per_epoch:]
        entry = {
            "epoch": epoch,
            "train_loss": sum(epoch_losses) / len(epoch_losses),
        }
        if cfg.eval_every_epoch:
            entry["eval"] = {
                name: evaluate(model, data, eval_batch) for name, data in eval_sets.items()
            }
        entry["seconds"] = time.perf_counter() - epoch_started
        history.append(entry)
        if progress is not None:
            progress(epoch, cfg.epochs, entry["train_loss"])

    final: dict[str, dict] = {}
    if not reason:
        if cfg.eval_every_epoch and history:
            final = history[-1]["eval"]  # the model has not changed since
        else:
            final = {name: evaluate(model, data, eval_batch) for name, data in eval_sets.items()}
    return TrainResult(
        status="failed" if reason else "ok",
        reason=reason,
        history=history,
        steps=losses,
        final=final,
        seconds=time.perf_counter() - started,
        n_steps=len(losses),
        lrs=lrs,
    )


def _diverged(step: int, epoch: int, total_steps: int, what: str) -> str:
    return f"diverged at step {step + 1} of {total_steps} (epoch {epoch}): {what}"
