"""What the task generators, the training loop and the tables agree on (no torch)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A target the loss and the metrics skip (torch.nn.functional.cross_entropy's default)
IGNORE = -100
PAD = 0  # token id 0 is padding in every task

# "token": a class per position (targets (N, L), IGNORE where nothing is predicted);
# "sequence": one class per sequence (targets (N,))
KINDS = ("token", "sequence")

# The metrics a run reports per kind; the first is the task's headline metric
METRICS = {
    "token": ("token_accuracy", "sequence_success", "loss"),
    "sequence": ("accuracy", "auc", "loss"),
}


class DataUnavailable(RuntimeError):
    """A task's data is not on disk; the message says where to put it.  The task's jobs
    end ``unavailable`` with that message as the reason."""


@dataclass(frozen=True)
class TaskData:
    """One split of a task: integer token ids and what to predict at them."""

    task: str  # "parity", "selective_copy", "exact_copy", "imdb"
    split: str  # "train", "test", or an evaluation length's name ("L64")
    kind: str  # one of KINDS
    inputs: np.ndarray  # (N, L) int64 token ids, PAD where there is nothing
    targets: np.ndarray  # kind "token": (N, L) int64, IGNORE where unscored; "sequence": (N,)
    vocab_size: int  # every input id is < vocab_size
    n_classes: int  # every scored target is < n_classes

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"TaskData.kind: {self.kind!r} is not one of {KINDS}")
        n = len(self.inputs)
        want = self.inputs.shape if self.kind == "token" else (n,)
        if self.inputs.ndim != 2 or self.targets.shape != want:
            raise ValueError(
                f"{self.task}/{self.split}: inputs {self.inputs.shape} and targets "
                f"{self.targets.shape} do not fit kind {self.kind!r} (targets {want})"
            )

    def __len__(self) -> int:
        return len(self.inputs)

    @property
    def seq_len(self) -> int:
        return self.inputs.shape[1]
