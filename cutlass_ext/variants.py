"""Variant names of every kernel family, parsed back into their configs (names travel through op arguments,
CSV tables and the build cache): the families registry's grammars decide."""

from __future__ import annotations

from .families import from_name

__all__ = ["from_name"]
