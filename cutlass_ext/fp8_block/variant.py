"""The config a block-scaled FP8 variant name stands for, of either kernel family that runs the block-scaled API:
CUTLASS's collectives (`Fp8BlockConfig`) or the directly written kernel (`Fp8BlockDirectConfig`)."""

from __future__ import annotations

import functools

from .config import Fp8BlockConfig
from .direct import Fp8BlockDirectConfig

CONFIGS = (Fp8BlockConfig, Fp8BlockDirectConfig)


@functools.cache
def config_of(variant: str) -> Fp8BlockConfig | Fp8BlockDirectConfig:
    """Its config; a ValueError naming `variant` for a name of neither family."""
    for kind in CONFIGS:
        if isinstance(variant, str) and kind.is_name(variant):
            return kind.from_name(variant)
    raise ValueError(
        f"variant={variant!r} is not a block-scaled FP8 variant name such as {Fp8BlockConfig.EXAMPLE_NAME!r} "
        f"or {Fp8BlockDirectConfig.EXAMPLE_NAME!r}"
    )
