"""`OptimConfig`: one variant of the fused 16-bit optimizer step (kernels/optim_step.cuh), and its rendering.

A variant is (optimizer, update, arithmetic) plus its launch shape. Like the GEMM families' configs: the code
generator renders it from kernels/optim_step.cu.in, its fingerprint keys the build cache, and its name is derived
from its fields and parsed back by `from_name`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from string import Template

from ..config import VariantFields
from ..toolchain import kernels_dir
from .reference import ARITHMETICS, UPDATES

FAMILY = "optim"
KINDS = ("sgd", "adamw")
_KIND_TAGS = {"sgd": "kSgd", "adamw": "kAdamW"}
_UPDATE_TAGS = {"nearest": "kNearest", "stochastic": "kStochastic", "kahan": "kKahan"}
_ARITHMETIC_TAGS = {"fp32": "kFp32", "bf16": "kBf16"}
GRIDS = ("chunks", "persistent", "prefetch")
_GRID_TAGS = {"chunks": "kPerChunk", "persistent": "kPersistent", "prefetch": "kPrefetch"}
_GRID_SUFFIXES = {"chunks": "", "persistent": "_p", "prefetch": "_pf"}
_NAME_PATTERN = re.compile(
    r"optim_(?P<kind>sgd|adamw)_(?P<update>nearest|stochastic|kahan)_(?P<arithmetic>fp32|bf16)"
    r"_t(?P<threads>\d+)_v(?P<vectors>\d+)(?P<grid>_p|_pf)?"
)


@dataclass(frozen=True)
class OptimConfig(VariantFields):
    """One fused optimizer-step variant.

    kind: `sgd` or `adamw`; update: `nearest`, `stochastic` or `kahan`; arithmetic: `fp32` or `bf16`
    (reference.py says what each means). threads: threads per block; vectors_per_thread: 16-byte vectors each
    thread loads before it computes (a chunk: threads · vectors_per_thread · 8 elements). grid: `chunks` (one
    block per chunk), `persistent` (the blocks the device keeps resident stride over the chunks; name suffix `_p`)
    or `prefetch` (persistent, with each thread's next chunk loaded before the current one's arithmetic; `_pf`).
    """

    kind: str = "adamw"
    update: str = "nearest"
    arithmetic: str = "fp32"
    threads: int = 256
    vectors_per_thread: int = 4
    grid: str = "persistent"
    family: str = FAMILY

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} is not one of {list(KINDS)}")
        if self.update not in UPDATES:
            raise ValueError(f"update={self.update!r} is not one of {list(UPDATES)}")
        if self.arithmetic not in ARITHMETICS:
            raise ValueError(f"arithmetic={self.arithmetic!r} is not one of {list(ARITHMETICS)}")
        if self.threads not in (64, 128, 256, 512, 1024):
            raise ValueError(f"threads={self.threads!r} must be a power of two from 64 to 1024")
        if self.vectors_per_thread not in (1, 2, 4, 8):
            raise ValueError(f"vectors_per_thread={self.vectors_per_thread!r} must be 1, 2, 4 or 8")
        if self.grid not in GRIDS:
            raise ValueError(f"grid={self.grid!r} is not one of {list(GRIDS)}")
        if self.family != FAMILY:
            raise ValueError(f"family={self.family!r} must be {FAMILY!r}")

    @property
    def name(self) -> str:
        suffix = _GRID_SUFFIXES[self.grid]
        return f"optim_{self.kind}_{self.update}_{self.arithmetic}_t{self.threads}_v{self.vectors_per_thread}{suffix}"

    @classmethod
    def from_name(cls, name: str) -> OptimConfig:
        match = _NAME_PATTERN.fullmatch(name)
        if match is None:
            raise ValueError(f"{name!r} is not an optimizer variant name such as {cls().name!r}")
        return cls(
            match["kind"],
            match["update"],
            match["arithmetic"],
            int(match["threads"]),
            int(match["vectors"]),
            {suffix: grid for grid, suffix in _GRID_SUFFIXES.items()}[match["grid"] or ""],
        )._named(name)

    @staticmethod
    def is_name(name: str) -> bool:
        return name.startswith("optim_")


def render_optim_instance(config: OptimConfig) -> str:
    """The exported launcher `<name>_optim_step` of one variant (kernels/optim_step_instance.in)."""
    return Template((kernels_dir() / "optim_step_instance.in").read_text()).substitute(
        name=config.name,
        kind=_KIND_TAGS[config.kind],
        update=_UPDATE_TAGS[config.update],
        arithmetic=_ARITHMETIC_TAGS[config.arithmetic],
        threads=config.threads,
        vectors_per_thread=config.vectors_per_thread,
        grid=_GRID_TAGS[config.grid],
    )
