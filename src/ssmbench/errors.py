"""Exceptions shared across layers, kept at the bottom of the import order (config ->
models -> measure -> cell) so that any layer may raise or let through another's."""

from __future__ import annotations

__all__ = ["CellTimeout", "ConfigError"]


class CellTimeout(Exception):
    """The cell's deadline passed (raised by
    :func:`ssmbench.measure.timing.deadline_alarm` inside a long call, such as a
    torch.compile that runs past the cell's budget)."""


class ConfigError(ValueError):
    """A config the workflow refuses to run; the message names the key and the value
    (raised by ssmbench.config and ssmbench.lm.matrix)."""
