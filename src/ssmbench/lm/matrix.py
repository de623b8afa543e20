"""The whole-model matrix of a preset (its ``lm`` key): sweeps -> cells, checked.

A cell is ``(model, backend, phase, batch, T, new_tokens N, dtype)``; a prefill cell makes
the first token only (N = 1), a decode cell runs ``generate(N)``.  The models are entries
of config/models.yaml; one marked ``unavailable`` there (Hymba) still makes cells, whose
records say why they could not run.  Imports neither torch nor transformers.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from types import MappingProxyType

from ssmbench.errors import ConfigError
from ssmbench.lm import zoo


@dataclass(frozen=True, order=True)
class LMCell:
    model: str  # a config/models.yaml entry
    backend: str  # hf-eager, hf-kernels, hf-static
    phase: str  # prefill (TTFT) or decode (TPOT)
    batch: int
    seq_len: int  # T, the prompt's tokens
    new_tokens: int  # N; 1 for a prefill cell
    dtype: str

    @property
    def name(self) -> str:
        return (
            f"{self.model}/{self.backend}/{self.phase} b{self.batch} t{self.seq_len} "
            f"g{self.new_tokens} {self.dtype}"
        )


@dataclass(frozen=True)
class LMMatrix:
    """A preset's whole-model cells, the models' size preset and the profiled cells."""

    size: str = "full"  # config/models.yaml preset: full, reduced or ci
    cells: tuple[LMCell, ...] = ()
    profiled: frozenset[LMCell] = frozenset()
    e2e_rounds: int = 3  # a decode cell's end-to-end check (ssmbench.lm.cell.LMCellSpec)
    # the decode cells of sweeps with an `e2e_rounds` of their own -> theirs
    e2e_by_cell: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    def e2e_rounds_of(self, cell: LMCell) -> int:
        """The paired rounds of ``cell``'s end-to-end check: its sweep's, else the preset's."""
        return self.e2e_by_cell.get(cell, self.e2e_rounds)

    @property
    def verified(self) -> tuple[tuple[str, str, str], ...]:
        """The (model, backend, dtype) triples one verify job each checks."""
        return tuple(sorted({(c.model, c.backend, c.dtype) for c in self.cells}))


def expand(sweep: dict, where: str) -> list[LMCell]:
    """The cells of one ``lm`` sweep; ``where`` is its config key, for the messages."""
    known = zoo.entries()
    for model in sweep["models"]:
        if model not in known:
            raise ConfigError(
                f"config key {where}.models: {model!r} is not in {zoo.MODELS_YAML.name} "
                f"(known: {', '.join(known)})"
            )
    decodes = "decode" in sweep["phases"]
    if decodes and "new_tokens" not in sweep:
        raise ConfigError(
            f"config key {where}.new_tokens: a sweep with decode cells needs the N of "
            "generate(N) (at least 2)"
        )
    if not decodes and "new_tokens" in sweep:
        raise ConfigError(
            f"config key {where}.new_tokens: only decode cells generate N tokens; a "
            "prefill cell makes the first one"
        )
    cells = []
    for model, backend, phase, batch, seq_len, dtype in itertools.product(
        sweep["models"],
        sweep["backends"],
        sweep["phases"],
        sweep["batch"],
        sweep["seq_len"],
        sweep["dtype"],
    ):
        for n in sweep["new_tokens"] if phase == "decode" else [1]:
            cells.append(LMCell(model, backend, phase, batch, seq_len, n, dtype))
    return cells


def matrix(preset_name: str, preset: dict) -> LMMatrix:
    """The whole-model matrix of a preset (an empty one when it has no ``lm`` key)."""
    spec = preset.get("lm")
    if not spec:
        return LMMatrix()
    where = f"presets.{preset_name}.lm.sweeps"
    expanded = [expand(s, f"{where}[{i}]") for i, s in enumerate(spec["sweeps"])]
    cells = sorted({c for sweep in expanded for c in sweep})
    profiled = frozenset(
        c
        for sweep, s in zip(expanded, spec["sweeps"], strict=True)
        if s.get("profile")
        for c in sweep
    )
    e2e_by_cell = {}
    for i, (sweep, raw) in enumerate(zip(expanded, spec["sweeps"], strict=True)):
        if "e2e_rounds" not in raw:
            continue
        if "decode" not in raw["phases"]:
            raise ConfigError(
                f"config key {where}[{i}].e2e_rounds: only decode cells are checked end to end"
            )
        for c in sweep:
            if c.phase == "decode":
                if e2e_by_cell.get(c, raw["e2e_rounds"]) != raw["e2e_rounds"]:
                    raise ConfigError(
                        f"config key {where}[{i}].e2e_rounds: {c.name} is in another sweep "
                        f"with e2e_rounds {e2e_by_cell[c]}"
                    )
                e2e_by_cell[c] = raw["e2e_rounds"]
    return LMMatrix(
        size=spec["size"],
        cells=tuple(cells),
        profiled=profiled,
        e2e_rounds=spec.get("e2e_rounds", LMMatrix.e2e_rounds),
        e2e_by_cell=MappingProxyType(e2e_by_cell),
    )
