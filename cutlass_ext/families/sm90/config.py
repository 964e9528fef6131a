"""`Sm90Config`: one variant of the sm90 family, the Hopper corrected SGEMM (CUTLASS 3.x, sm90a: TMA + wgmma).

The family reads each operand as hi/lo planes written by a split pass and promotes hi·hi into FP32 registers
every `promotion` k-tiles (kernels/sm90_split_mainloop.hpp).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...config import Extent, NameGrammar, Number, Optional, VariantFields, Word

FAMILY = "sm90"
MODES = ("tf32tf32", "halfhalf")
# Bytes per element of each mode's planes (TF32 in FP32 words, FP16).
PLANE_BYTES = {"tf32tf32": 4, "halfhalf": 2}
SCHEDULES = ("cooperative", "pingpong")
SWIZZLES = (1, 2, 4, 8)
# `plain`: D = the product; `bias`: D = alpha · the product + bias (n), gemm's epilogue (name suffix `_bias`).
EPILOGUES = ("plain", "bias")
_SCHEDULE_TAGS = {"cooperative": "coop", "pingpong": "pp"}


@dataclass(frozen=True)
class Sm90Config(VariantFields):
    """One Hopper corrected-SGEMM variant: C (M, N) = A (M, K) · B (K, N) from hi/lo planes of A and Bᵀ.

    mode: `tf32tf32` or `halfhalf`. tile: (m, n, k) of a CTA's output tile and k-tile; cluster: (m, n) CTAs
    sharing loads by TMA multicast. schedule: `cooperative` (two consumer warpgroups on one tile) or `pingpong`
    (on alternating tiles). promotion: k-tiles between promotions of hi·hi into FP32 registers (1 = every k-tile;
    more keeps longer sums in the Tensor Core's truncating accumulator and costs fewer adds). swizzle: tiles
    launched in groups of up to this many (L2 reuse; name suffix `_wN` unless 1). epilogue: `plain` or `bias`
    (alpha · product + bias; name suffix `_bias`). Pipeline stages: as many as shared memory holds.
    """

    mode: str = "tf32tf32"
    tile: tuple[int, int, int] = (128, 128, 32)
    cluster: tuple[int, int] = (1, 1)
    schedule: str = "cooperative"
    promotion: int = 1
    swizzle: int = 1
    family: str = FAMILY
    epilogue: str = "plain"

    # `tf32tf32_sm90_128x128x32_c1x1_coop_p1[_w4][_bias]`
    NAME: ClassVar[NameGrammar] = NameGrammar(
        Word("mode", MODES),
        "_sm90_",
        Extent("tile", 3),
        "_c",
        Extent("cluster", 2),
        "_",
        Word("schedule", _SCHEDULE_TAGS),
        "_p",
        Number("promotion"),
        Optional("_w", Number("swizzle"), default={"swizzle": 1}),
        Optional("_", Word("epilogue", EPILOGUES), default={"epilogue": "plain"}),
    )
    EXAMPLE_NAME: ClassVar[str] = "tf32tf32_sm90_128x128x32_c1x1_coop_p1"
    KIND: ClassVar[str] = "a Hopper corrected"

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
        if self.epilogue not in EPILOGUES:
            raise ValueError(f"epilogue={self.epilogue!r} is not one of {list(EPILOGUES)}")


# Until the sweep tunes them: 128-byte k-tiles (32 TF32, 64 FP16) on a 128x128 cooperative tile, the largest
# whose three accumulator fragments (FP32, hi·hi, lo terms) fit a consumer thread's registers.
DEFAULTS = {
    "tf32tf32": Sm90Config("tf32tf32", (128, 128, 32)),
    "halfhalf": Sm90Config("halfhalf", (128, 128, 64)),
}
