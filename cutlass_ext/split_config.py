"""`SplitConfig`: one variant of the Hopper corrected SGEMM (CUTLASS 3.x, sm90a: TMA + wgmma).

The family reads each operand as hi/lo planes written by a split pass and promotes hi·hi into FP32 registers
every `promotion` k-tiles (kernels/sm90_split_mainloop.hpp). Like `KernelConfig`: the code generator renders it,
its fingerprint keys the build cache, its fields are CSV columns, and the tuned table maps shapes to its `name`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .config import VariantFields

FAMILY = "sm90"
MODES = ("tf32tf32", "halfhalf")
# Bytes per element of each mode's planes (TF32 in FP32 words, FP16).
PLANE_BYTES = {"tf32tf32": 4, "halfhalf": 2}
SCHEDULES = ("cooperative", "pingpong")
SWIZZLES = (1, 2, 4, 8)
_SCHEDULE_TAGS = {"cooperative": "coop", "pingpong": "pp"}
_NAME_PATTERN = re.compile(
    r"(?P<mode>tf32tf32|halfhalf)_sm90_(?P<tile>\d+x\d+x\d+)_c(?P<cluster>\d+x\d+)_(?P<schedule>coop|pp)"
    r"_p(?P<promotion>\d+)(?:_w(?P<swizzle>\d+))?"
)


@dataclass(frozen=True)
class SplitConfig(VariantFields):
    """One Hopper corrected-SGEMM variant: C (M, N) = A (M, K) · B (K, N) from hi/lo planes of A and Bᵀ.

    mode: `tf32tf32` or `halfhalf`. tile: (m, n, k) of a CTA's output tile and k-tile; cluster: (m, n) CTAs
    sharing loads by TMA multicast. schedule: `cooperative` (two consumer warpgroups on one tile) or `pingpong`
    (on alternating tiles). promotion: k-tiles between promotions of hi·hi into FP32 registers (1 = every k-tile;
    more keeps longer sums in the Tensor Core's truncating accumulator and costs fewer adds). swizzle: tiles
    launched in groups of up to this many (L2 reuse; name suffix `_wN` unless 1). Pipeline stages: as many as
    shared memory holds.
    """

    mode: str = "tf32tf32"
    tile: tuple[int, int, int] = (128, 128, 32)
    cluster: tuple[int, int] = (1, 1)
    schedule: str = "cooperative"
    promotion: int = 1
    swizzle: int = 1
    family: str = FAMILY

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode={self.mode!r} is not one of {list(MODES)}")
        if self.family != FAMILY:
            raise ValueError(f"family={self.family!r} must be {FAMILY!r}")
        self._check_extents(tile="mnk", cluster="mn")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r} is not one of {list(SCHEDULES)}")
        if not isinstance(self.promotion, int) or self.promotion < 1:
            raise ValueError(f"promotion={self.promotion!r} must be a positive integer (k-tiles)")
        if self.swizzle not in SWIZZLES:
            raise ValueError(f"swizzle={self.swizzle!r} must be one of {list(SWIZZLES)}")

    @property
    def name(self) -> str:
        tile, cluster = self.tile, self.cluster
        swizzle = f"_w{self.swizzle}" if self.swizzle != 1 else ""
        return (
            f"{self.mode}_sm90_{tile[0]}x{tile[1]}x{tile[2]}_c{cluster[0]}x{cluster[1]}"
            f"_{_SCHEDULE_TAGS[self.schedule]}_p{self.promotion}{swizzle}"
        )

    @classmethod
    def from_name(cls, name: str) -> SplitConfig:
        match = _NAME_PATTERN.fullmatch(name)
        if match is None:
            raise ValueError(f"{name!r} is not a Hopper corrected variant name such as {cls().name!r}")
        return cls(
            mode=match["mode"],
            tile=tuple(int(v) for v in match["tile"].split("x")),
            cluster=tuple(int(v) for v in match["cluster"].split("x")),
            schedule={tag: schedule for schedule, tag in _SCHEDULE_TAGS.items()}[match["schedule"]],
            promotion=int(match["promotion"]),
            swizzle=int(match["swizzle"]) if match["swizzle"] else 1,
        )._named(name)

    @staticmethod
    def is_name(name: str) -> bool:
        return "_sm90_" in name


# Until the sweep tunes them: 128-byte k-tiles (32 TF32, 64 FP16) on a 128x128 cooperative tile, the largest
# whose three accumulator fragments (FP32, hi·hi, lo terms) fit a consumer thread's registers.
DEFAULT_SPLIT = {
    "tf32tf32": SplitConfig("tf32tf32", (128, 128, 32)),
    "halfhalf": SplitConfig("halfhalf", (128, 128, 64)),
}
