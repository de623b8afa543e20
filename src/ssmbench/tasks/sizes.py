"""The study's model keyword arguments as the project's block sizes (torch-free).

The case study sizes each family by a few keyword arguments (its configs' ``models:``
entries, config/tasks.yaml); :func:`task_size` turns one entry into the project's
:class:`~ssmbench.config.Size` and d_state.  The plan calls it for every family a preset
trains (``ssmbench.tasks.matrix``), so a size that does not fit is refused before any
job; :mod:`ssmbench.tasks.model` builds the models from the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping

from ssmbench import registry
from ssmbench.matrix import Size

# Our family -> the name of its entry in the study's configs.  DeltaNet and the hybrid are
# ours, not the study's: DeltaNet takes the transformer's entry (d_model, n_layers and its
# 4 heads), the hybrid the Mamba-2 entry (d_state, headdim; its attention layers get
# d_model // headdim heads of that dim).
STUDY_ENTRY = {
    "attention": "transformer",
    "s4d": "s4d",
    "mamba": "mamba",
    "mamba2": "mamba2",
    "mamba3": "mamba3",
    "deltanet": "transformer",
    "hybrid": "mamba2",
}

# The keys of a family's entry: the study's (required, except DeltaNet's n_heads) ...
REQUIRED_KEYS = {
    "attention": ("d_model", "n_layers", "n_heads"),
    "s4d": ("d_model", "n_layers", "d_state"),
    "mamba": ("d_model", "n_layers", "d_state"),
    "mamba2": ("d_model", "n_layers", "d_state", "headdim"),
    "mamba3": ("d_model", "n_layers", "d_state", "headdim"),
    "deltanet": ("d_model", "n_layers"),
    "hybrid": ("d_model", "n_layers", "d_state", "headdim"),
}
# ... and the block settings the study fixes in its code, which an entry may override.
# expand 2 and d_conv 4 are the Mamba papers'; chunk 32 is the chunked forms' chunk.
OPTIONAL_KEYS = {"expand": 2, "d_conv": 4, "chunk": 32}
# Heads where an entry names neither n_heads nor headdim (DeltaNet; S4D and Mamba-1 do not
# use heads): the study's transformer's 4.
DEFAULT_HEADS = 4


def study_kwargs(family: str, models: Mapping[str, Mapping]) -> dict:
    """The entry of the study's ``models:`` mapping that sizes our ``family``
    (:data:`STUDY_ENTRY`), as task_size takes it; KeyError naming both if it is absent."""
    if family not in STUDY_ENTRY:
        raise ValueError(f"unknown family {family!r}; known: {list(STUDY_ENTRY)}")
    entry = STUDY_ENTRY[family]
    if entry not in models:
        raise KeyError(f"{family}: the study's models have no {entry!r} entry: {sorted(models)}")
    return dict(models[entry])


def task_size(family: str, cfg: Mapping) -> tuple[Size, int]:
    """The project's block size and d_state for the study's model kwargs ``cfg`` of
    ``family`` (one of ours: attention for the study's transformer).

    head_dim is ``headdim`` where given, else d_model // n_heads; n_heads is d_model //
    head_dim where not given (DEFAULT_HEADS where neither is).  d_state is 0 for the
    families without one (attention, DeltaNet).  Raises ValueError naming the family and
    the keys for an unknown family, unknown or missing keys, or sizes that do not divide.
    """
    if family not in REQUIRED_KEYS:
        raise ValueError(f"unknown family {family!r}; known: {list(REQUIRED_KEYS)}")
    required = REQUIRED_KEYS[family]
    allowed = set(required) | set(OPTIONAL_KEYS)
    if family == "deltanet":
        allowed.add("n_heads")
    unknown = sorted(set(cfg) - allowed)
    if unknown:
        raise ValueError(f"{family} model: unknown keys {unknown}; known: {sorted(allowed)}")
    missing = [k for k in required if k not in cfg]
    if missing:
        raise ValueError(f"{family} model: missing keys {missing}")
    for key, value in cfg.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{family} model: {key} must be a positive integer, got {value!r}")

    d_model = cfg["d_model"]
    if "headdim" in cfg:
        head_dim = cfg["headdim"]
        n_heads = cfg.get("n_heads", max(d_model // head_dim, 1))
    else:
        n_heads = cfg.get("n_heads", DEFAULT_HEADS)
        if d_model % n_heads:
            raise ValueError(
                f"{family} model: d_model {d_model} is not divisible by n_heads {n_heads}"
            )
        head_dim = d_model // n_heads
    size = Size(
        d_model=d_model,
        n_layers=cfg["n_layers"],
        n_heads=n_heads,
        head_dim=head_dim,
        **{key: cfg.get(key, default) for key, default in OPTIONAL_KEYS.items()},
    )
    if family in ("mamba2", "mamba3", "hybrid") and size.d_inner % head_dim:
        raise ValueError(
            f"{family} model: expand * d_model = {size.d_inner} is not divisible by "
            f"headdim {head_dim}"
        )
    d_state = 0 if family in registry.NO_STATE else cfg["d_state"]
    return size, d_state
