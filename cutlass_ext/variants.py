"""Variant names of every kernel family, parsed back into their configs (names travel through op arguments,
CSV tables and the build cache)."""

from __future__ import annotations

from .config import KernelConfig
from .fp8_config import Fp8Config
from .lowbit.kernel import LowbitKernelConfig
from .split_config import SplitConfig


def from_name(name: str) -> KernelConfig | Fp8Config | SplitConfig:
    if name.startswith("fp8_"):
        return Fp8Config.from_name(name)
    if LowbitKernelConfig.is_name(name):
        return LowbitKernelConfig.from_name(name)
    if SplitConfig.is_name(name):
        return SplitConfig.from_name(name)
    return KernelConfig.from_name(name)
