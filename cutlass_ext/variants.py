"""Variant names of every kernel family, parsed back into their configs (names travel through op arguments,
CSV tables and the build cache)."""

from __future__ import annotations

from .config import KernelConfig
from .fp8_config import Fp8Config


def from_name(name: str) -> KernelConfig | Fp8Config:
    return Fp8Config.from_name(name) if name.startswith("fp8_") else KernelConfig.from_name(name)
