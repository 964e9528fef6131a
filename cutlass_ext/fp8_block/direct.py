"""`Fp8BlockDirectConfig`: a block-scaled FP8 GEMM variant of the kernel written directly on TMA and wgmma
(kernels/sm90_fp8_block_direct.cuh), its own family `sm90_fp8_block_direct`: no CUTLASS collective, so one variant
compiles in seconds. It computes what the `sm90_fp8_block` family's dense kernels compute, with the same bits,
and runs through the same API (`gemm_fp8_block(..., variant=...)`), tuned tables and sweep.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import ClassVar

from ..config import Extent, NameGrammar, Number, Optional, VariantFields, Word
from ..families import Family, spaces
from ..toolchain import kernels_dir
from .config import SCALE_A_MAJORS, SCALE_BLOCK_K

FAMILY_NAME = "sm90_fp8_block_direct"
TILE_MS = (64, 128)  # one or two math warpgroups of 64 rows on one tile
TILE_NS = (16, 32, 64, 128)  # inside one 128-row weight-scale block: one weight scale per tile and k-block
CLUSTERS = (1, 2)  # a CTA alone, or two on neighbouring tiles along N sharing A by TMA multicast
WEIGHT_BLOCK = 128


@dataclass(frozen=True)
class Fp8BlockDirectConfig(VariantFields):
    """One variant of the directly written block-scaled FP8 GEMM: D (M, N) = Σ_kb scale_a[m, kb] ·
    scale_b[n / 128, kb] · (A·Bᵀ)_kb (+ bias), A (M, K) and B (N, K) e4m3, D bf16, 128x128 weight blocks.

    tile: (m, n, k), m one or two math warpgroups of 64 rows, n 16, 32, 64 or 128 (inside a weight block), k 128
    (one scale block); the ring holds as many stages as shared memory fits (kernels/sm90_fp8_block_direct.cuh).
    cluster: 1, or 2 (name suffix `_mc2`): two CTAs on neighbouring tiles along N, each loading half of their A
    tile by TMA multicast into both.
    grouped: the mixture-of-experts form (name suffix `_grouped`, `grouped_gemm_fp8`): every group's tiles in one
    launch, the groups' rows read on the device; its activation scales K-major.
    k_grouped: the weight-gradient form (name suffix `_kgrouped`, `k_grouped_gemm_fp8`): groups cut along K, 1x128
    scales along K for both operands (scale_n = 1), FP32 D = C + the product.
    scale_a_major: how it reads the activation scales (`k`: as quantize_fp8 writes them; `m`: name suffix `_am`).
    """

    a_dtype: str = "e4m3"
    b_dtype: str = "e4m3"
    out_dtype: str = "bf16"
    tile: tuple[int, int, int] = (64, 64, 128)
    cluster: int = 1
    grouped: bool = False
    k_grouped: bool = False
    scale_a_major: str = "k"
    family: str = FAMILY_NAME

    # `fp8direct_e4m3e4m3_bf16_64x64x128[_mc2][_grouped|_kgrouped][_am]`
    NAME: ClassVar[NameGrammar] = NameGrammar(
        "fp8direct_",
        Word("a_dtype", ["e4m3"]),
        Word("b_dtype", ["e4m3"]),
        "_",
        Word("out_dtype", ["bf16", "fp32"]),
        "_",
        Extent("tile", 3),
        Optional("_mc", Number("cluster"), default={"cluster": 1}),
        Optional(Word("grouped", {True: "_grouped"}), default={"grouped": False}),
        Optional(Word("k_grouped", {True: "_kgrouped"}), default={"k_grouped": False}),
        Optional(Word("scale_a_major", {"m": "_am"}), default={"scale_a_major": "k"}),
    )
    EXAMPLE_NAME: ClassVar[str] = "fp8direct_e4m3e4m3_bf16_64x64x128"

    @property
    def scale_n(self) -> int:
        """Rows of B per weight scale (what the block-scaled API checks): 128, or 1 for the weight-gradient form."""
        return 1 if self.k_grouped else WEIGHT_BLOCK

    @property
    def scale_rows_n(self) -> int:
        return self.scale_n

    @property
    def mode(self) -> str:
        """The tuned tables' mode: `fp8_block` (dense), `fp8_grouped` (mixture-of-experts) or `fp8_k_grouped`."""
        return "fp8_k_grouped" if self.k_grouped else "fp8_grouped" if self.grouped else "fp8_block"

    def __post_init__(self):
        out_dtype = "fp32" if self.k_grouped is True else "bf16"
        wanted = {"a_dtype": "e4m3", "b_dtype": "e4m3", "out_dtype": out_dtype, "family": FAMILY_NAME}
        for field, value in wanted.items():
            if getattr(self, field) != value:
                raise ValueError(f"{field}={getattr(self, field)!r}: the direct kernel is built for {value!r}")
        if self.cluster not in CLUSTERS:
            raise ValueError(f"cluster={self.cluster!r}: the direct kernel runs clusters of {list(CLUSTERS)} CTAs")
        for field in ("grouped", "k_grouped"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(f"{field}={getattr(self, field)!r}: True or False")
        if self.grouped and self.k_grouped:
            raise ValueError("grouped and k_grouped: one form or the other")
        if self.k_grouped and self.scale_a_major != "k":
            raise ValueError("k_grouped: the weight-gradient form's scale layout is fixed (scale_a_major='k')")
        if self.grouped and self.scale_a_major != "k":
            raise ValueError("grouped: the grouped form reads K-major activation scales (scale_a_major='k')")
        if self.scale_a_major not in SCALE_A_MAJORS:
            raise ValueError(f"scale_a_major={self.scale_a_major!r} is not one of {list(SCALE_A_MAJORS)}")
        self._check_extents(tile="mnk")
        tile_m, tile_n, tile_k = self.tile
        if tile_m not in TILE_MS or tile_n not in TILE_NS or tile_k != SCALE_BLOCK_K:
            raise ValueError(
                f"tile={self.tile!r}: the direct kernel takes m in {list(TILE_MS)}, n in {list(TILE_NS)} "
                f"and k = {SCALE_BLOCK_K}"
            )


def render_instance(config: Fp8BlockDirectConfig) -> str:
    """The variant's kernel or launchers (kernels/sm90_fp8_block_direct_instance.in)."""
    return Template((kernels_dir() / "sm90_fp8_block_direct_instance.in").read_text()).substitute(
        name=config.name,
        form="K_GROUPED" if config.k_grouped else "GROUPED" if config.grouped else "BLOCK",
        tile_m=config.tile[0],
        tile_n=config.tile[1],
        cluster=config.cluster,
    )


def load_space(path: Path, document: dict) -> list[Fp8BlockDirectConfig]:
    """A sweep space of direct variants: `tile`, `cluster`, `grouped`, `k_grouped` and `scale_a_major` axes; one
    mode per space: fp8_block (dense shapes), fp8_grouped (mixture-of-experts shapes, `grouped: [true]`) or
    fp8_k_grouped (weight-gradient shapes, `k_grouped: [true]`)."""
    modes = spaces.modes(path, document, ("fp8_block", "fp8_grouped", "fp8_k_grouped"))
    if len(modes) != 1:
        raise spaces.SpaceError(f"{path}: modes: one of fp8_block, fp8_grouped, fp8_k_grouped per space; got {modes!r}")
    choices = {
        "scale_a_major": list(SCALE_A_MAJORS),
        "cluster": list(CLUSTERS),
        "grouped": [False, True],
        "k_grouped": [False, True],
    }
    axes = spaces.axes(path, document.get("space"), {"tile": "mnk"}, choices, (), "Fp8BlockDirectConfig")
    configs = []
    for tile in axes.get("tile", [Fp8BlockDirectConfig.tile]):
        for cluster in axes.get("cluster", [1]):
            for grouped, k_grouped in itertools.product(axes.get("grouped", [False]), axes.get("k_grouped", [False])):
                for major in axes.get("scale_a_major", ["k"]):
                    fields = {"grouped": grouped, "k_grouped": k_grouped, "scale_a_major": major}
                    try:
                        config = Fp8BlockDirectConfig(
                            out_dtype="fp32" if k_grouped else "bf16", tile=tile, cluster=cluster, **fields
                        )
                    except ValueError:
                        continue  # a tile the kernel does not build
                    if config.mode != modes[0]:
                        raise spaces.SpaceError(f"{path}: modes {modes} takes no {config.mode} kernel ({config.name})")
                    configs.append(config)
    return list(dict.fromkeys(configs))


# The sweep's named filters (`cutlass_ext.families.rules`): none, every tile the config admits builds and fits.
RULES = ()

FAMILY = Family(
    name=FAMILY_NAME,
    config=Fp8BlockDirectConfig,
    template=kernels_dir() / "sm90_fp8_block_direct.cu.in",
    render_instance=render_instance,
    archs=("90a",),
    cubin=True,  # the kernel and its launchers compiled side by side (kernels/cubin_launch.h)
    filters="cutlass_ext.fp8_block.direct",
    space="cutlass_ext.fp8_block.direct",
    measure="cutlass_ext.fp8_block.measure",
)
