"""`OzakiConfig`: one variant of the Ozaki-II GEMM family (FP32-accurate products from INT8 Tensor Core GEMMs).

A variant is a library of three launchers: the operand pass (row shifts and INT8 residue planes), the batched
s8·s8→s32 GEMM over every modulus (CUTLASS 3.x, TMA + wgmma, sm90a) and the recombination (CRT and scale back).
`moduli` fixes the accuracy (`reference.py`); the tile and cluster shape only the GEMM's speed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..config import VariantFields
from .reference import check_moduli_count, shift_budget

FAMILY = "ozaki"
DEFAULT_MODULI = 8  # the fewest within 1.1x of SGEMM's error for K up to 65536 (python/ozaki_accuracy.py)
# What the GEMM writes: INT8 residues of its products, reduced in the epilogue (a quarter of the bytes of INT32
# products to write and to read back), or the INT32 products themselves (name suffix `_p32`).
OUTPUTS = ("residues", "products")
_NAME_PATTERN = re.compile(
    r"ozaki_int8x(?P<moduli>\d+)_(?P<tile>\d+x\d+x\d+)_c(?P<cluster>\d+x\d+)(?:_w(?P<swizzle>\d+))?(?P<products>_p32)?"
)


@dataclass(frozen=True)
class OzakiConfig(VariantFields):
    """moduli: INT8 GEMMs per product (3..14; 8 reaches SGEMM's accuracy). tile: (m, n, k) of the GEMM's CTA
    tile, k in bytes of INT8; cluster: (m, n) CTAs sharing TMA loads by multicast; swizzle: tiles launched in
    groups of up to this many (L2 reuse; name suffix `_wN` unless 1). The GEMM runs the cooperative
    warp-specialized schedule with a persistent tile scheduler. output: one of OUTPUTS. The defaults are the FP8
    family's fastest at 8192³ on the H100 (128x256x128, one CTA per cluster, swizzle 8: 1284 TFLOP/s), the same
    wgmma shapes and rates as INT8."""

    moduli: int = DEFAULT_MODULI
    tile: tuple[int, int, int] = (128, 256, 128)
    cluster: tuple[int, int] = (1, 1)
    swizzle: int = 8
    output: str = "residues"
    family: str = FAMILY

    def __post_init__(self):
        check_moduli_count(self.moduli)
        if self.family != FAMILY:
            raise ValueError(f"family={self.family!r} must be {FAMILY!r}")
        self._check_extents(tile="mnk", cluster="mn")
        if self.swizzle not in (1, 2, 4, 8):
            raise ValueError(f"swizzle={self.swizzle!r} must be 1, 2, 4 or 8")
        if self.output not in OUTPUTS:
            raise ValueError(f"output={self.output!r} is not one of {list(OUTPUTS)}")
        if self.tile[0] % 64 or self.tile[1] % 16 or self.tile[2] % 64:
            raise ValueError(f"tile={self.tile!r}: m must be a multiple of 64, n of 16 and k of 64 (wgmma on INT8)")

    @property
    def shift_budget(self) -> int:
        return shift_budget(self.moduli)

    @property
    def name(self) -> str:
        (tm, tn, tk), (cm, cn) = self.tile, self.cluster
        swizzle = f"_w{self.swizzle}" if self.swizzle != 1 else ""
        products = "_p32" if self.output == "products" else ""
        return f"ozaki_int8x{self.moduli}_{tm}x{tn}x{tk}_c{cm}x{cn}{swizzle}{products}"

    @classmethod
    def from_name(cls, name: str) -> OzakiConfig:
        match = _NAME_PATTERN.fullmatch(name)
        if match is None:
            raise ValueError(f"{name!r} is not an Ozaki-II variant name such as {cls().name!r}")
        return cls(
            moduli=int(match["moduli"]),
            tile=tuple(int(v) for v in match["tile"].split("x")),
            cluster=tuple(int(v) for v in match["cluster"].split("x")),
            swizzle=int(match["swizzle"]) if match["swizzle"] else 1,
            output="products" if match["products"] else "residues",
        )._named(name)

    @staticmethod
    def is_name(name: str) -> bool:
        return name.startswith("ozaki_")


def default_config(moduli: int = DEFAULT_MODULI) -> OzakiConfig:
    return OzakiConfig(moduli=moduli)
