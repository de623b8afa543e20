"""A task head on the project's blocks: embedding -> a family's residual stack -> head.

The case study sizes each family by a few keyword arguments (its configs' ``models:``
entries); :func:`ssmbench.tasks.sizes.task_size` turns one entry into the project's
``Size`` and d_state (torch-free, so the plan checks them), and :func:`build_task_model`
builds the model a task's data asks for.

Glossary: b batch, l sequence length, d d_model, c classes.  This module imports torch.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping

import torch
from torch import nn

from ssmbench import registry
from ssmbench.models.common import ResidualStack
from ssmbench.tasks.base import PAD, TaskData
from ssmbench.tasks.sizes import (  # noqa: F401  (read from here by the tests and tasks.run)
    DEFAULT_HEADS,
    OPTIONAL_KEYS,
    REQUIRED_KEYS,
    STUDY_ENTRY,
    study_kwargs,
    task_size,
)

# The families whose mixers see no order of their own (our attention has no positional
# encoding: the benchmark times the mixer alone).  Their models add a sinusoidal position
# code to the embedding (Vaswani et al. 2017, section 3.5): it has no parameters, as the
# study's transformer (its parameter count has no position table), and is defined at
# every length, so the exact-copy evaluations beyond the training length can run.
POSITIONAL_FAMILIES = ("attention",)


def sinusoid_positions(length: int, d_model: int) -> torch.Tensor:
    """``(length, d_model)`` position codes: channel pair (2i, 2i+1) holds sin and cos of
    ``t / 10000^(2i / d_model)`` at position t (Vaswani et al. 2017, section 3.5)."""
    t = torch.arange(length, dtype=torch.float32)[:, None]  # (l 1)
    rate = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2) / d_model)  # (ceil(d/2))
    angles = t * rate  # (l ceil(d/2))
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)[:, :d_model]  # (l d)


class TaskModel(nn.Module):
    """Token ids ``(b, l)`` -> class logits: ``(b, l, c)`` for kind "token" (a class per
    position, from its prefix: every family is causal), ``(b, c)`` for kind "sequence"
    (the mean of the final hidden states over the non-PAD positions).

    The residual stack ends in its RMSNorm (``norm_f``), which is the norm before the head.
    The embedding's PAD row is learned as any other (``learned_pad``, the default): PAD is
    also an input the model must read (parity's bit 0, selective copy's answer slots).
    Held at zero (``learned_pad=False``, the task model before it was found), it is
    invisible to a block without an input bias whose output is gated by silu(z) (Mamba-1,
    -2, -3: z = in_proj(0) = 0 maps the zero vector to exactly zero, in every layer): the
    logits at every PAD position are then the head's bias whatever the weights, and
    parity's token accuracy is capped near 0.75.  Where PAD only pads (IMDb, exact
    copying's tail) it is masked from the pooling or the loss.  The other weights are
    drawn the same either way.  With ``positions``, :func:`sinusoid_positions` are added
    to the embedding.
    """

    def __init__(
        self,
        stack: ResidualStack,
        vocab_size: int,
        n_classes: int,
        kind: str,
        positions: bool = False,
        learned_pad: bool = True,
    ):
        super().__init__()
        d_model = stack.norm_f.weight.shape[0]
        self.kind = kind
        self.positions = positions
        self.vocab_size, self.n_classes = vocab_size, n_classes
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=None if learned_pad else PAD)
        self.stack = stack
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        x = self.embed(inputs)  # (b l d)
        if self.positions:
            x = x + sinusoid_positions(x.shape[1], x.shape[2]).to(x)  # (b l d)
        x, _ = self.stack(x)  # (b l d), normed; the caches are not needed
        if self.kind == "token":
            return self.head(x)  # (b l c)
        keep = (inputs != PAD).to(x.dtype)[..., None]  # (b l 1)
        pooled = (x * keep).sum(1) / keep.sum(1).clamp(min=1)  # (b d): all-PAD rows give 0
        return self.head(pooled)  # (b c)


def build_task_model(
    family: str,
    cfg: Mapping,
    data: TaskData,
    backend: str = "torch",
    seed: int = 0,
    mixer_options: Mapping | None = None,
    learned_pad: bool = True,
) -> TaskModel:
    """The ``family`` model sized by the study's kwargs ``cfg`` (:func:`task_size`), with the
    vocabulary, classes and kind of ``data``, running ``backend``, in float32 on the CPU;
    with position codes for :data:`POSITIONAL_FAMILIES`.

    ``mixer_options`` are keyword arguments of the family's ``build_mixer`` beyond the
    size: a named variant of its block (Mamba-3's, :class:`ssmbench.models.mamba3.Mamba3Mixer`);
    None or empty builds the benchmark's block.  A family whose ``build_mixer`` takes none
    refuses them (TypeError).  ``learned_pad``: the PAD row of the embedding is learned (the
    default), or held at zero as before (see :class:`TaskModel`).

    The weights depend only on (family, cfg, data's vocab and classes, seed): they are
    drawn from a private generator state (as :func:`ssmbench.models.build_model` draws
    them), so the global one is left as it was.
    """
    if backend not in registry.MODEL_BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; known: {list(registry.MODEL_BACKENDS)}")
    size, d_state = task_size(family, cfg)
    module = importlib.import_module(registry.FAMILY[family].module)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        options = dict(mixer_options or {})
        mixers = [
            module.build_mixer(size, d_state, layer, **options) for layer in range(size.n_layers)
        ]
        stack = ResidualStack(mixers, size.d_model, backend)
        positions = family in POSITIONAL_FAMILIES
        model = TaskModel(
            stack, data.vocab_size, data.n_classes, data.kind, positions, learned_pad=learned_pad
        )
    return model


def n_parameters(model: nn.Module) -> int:
    """The number of parameters of ``model`` (a tensor shared by two modules counts once)."""
    return sum(p.numel() for p in model.parameters())
