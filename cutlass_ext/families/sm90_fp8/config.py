"""`Fp8Config`: one variant of the sm90_fp8 family, the FP8 GEMM (CUTLASS 3.x, Hopper: TMA + wgmma)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch

from ...config import Extent, NameGrammar, Number, Optional, VariantFields, Word

FAMILY = "sm90_fp8"
# short names of the FP8 input formats and the output types, with their torch dtypes
FP8_DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
OUT_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# fast: the whole K loop accumulates inside the Tensor Core; promoted: its partial sums are added into FP32
# registers every `promotion` k-blocks, as cuBLAS does without its fast-accumulation flag (every k-block: while the
# next k-block's wgmmas run, kernels/sm90_fp8_overlapped_promotion.hpp, or with `turns` while the other
# warpgroup's run, kernels/sm90_fp8_turn_taking_promotion.hpp; longer spans: CUTLASS's FP8 mainloop).
ACCUMULATIONS = ("fast", "promoted")
SCHEDULES = ("cooperative", "pingpong")  # two consumer warpgroups on one tile, or on alternating tiles
# persistent: whole output tiles per CTA; streamk: the last wave's tiles shared out along K (CUTLASS stream-K);
# splitk: every tile's K cut into `splits` slices, reduced through the workspace; dynamic: whole tiles, each CTA's
# next claimed from a counter as it starts its current one (kernels/sm90_dynamic_tile_scheduler.hpp), so that the
# CTAs finish together (cooperative kernels, one-CTA clusters).
SCHEDULERS = ("persistent", "streamk", "splitk", "dynamic")
SWIZZLES = (1, 2, 4, 8)
# which way the persistent CTAs walk the output tiles: down M first (`m`), along N first (`n`), or CUTLASS's
# choice (`auto`: along the side with fewer tiles, to keep the smaller operand's panels in L2)
RASTERS = ("auto", "m", "n")
PROMOTIONS = (1, 2, 4)
# k-blocks of weights a CTA asks L2 for before it waits on the kernel before it (programmatic launch); 0: none
L2_PREFETCHES = (0, 2, 4, 8, 16, 32)
_SCHEDULE_TAGS = {"cooperative": "coop", "pingpong": "pp"}


@dataclass(frozen=True)
class Fp8Config(VariantFields):
    """One FP8 GEMM variant: D (M, N) = scale_a · scale_b · A (M, K) · B (N, K)ᵀ (+ bias), both inputs K-major.

    a_dtype, b_dtype: `e4m3` or `e5m2`. out_dtype: `bf16`, `fp16` or `fp32`. accum: `fast` or `promoted`.
    tile: (m, n, k) of one CTA's output tile and k-block; cluster: (m, n) CTAs sharing loads by TMA multicast.
    schedule: `cooperative` or `pingpong`. scheduler: `persistent`, `streamk`, `splitk` (with `splits` > 1) or
    `dynamic` (cooperative, cluster (1, 1); name suffix `_dynamic`).
    swizzle: tiles launched in groups of up to this many (L2 reuse; name suffix `_wN` unless 1).
    raster: `m` or `n` (name suffix `_rm`, `_rn`): the output's side the tile order runs along first, a band of
    `swizzle` tiles wide on the other side; `auto` leaves it to CUTLASS, which runs along the side with fewer tiles
    so that the smaller operand stays in L2. That fails when the smaller operand is itself most of L2 (A of
    4096 x 8192, 32 MB, while B streams past it): `n` then keeps only a band of A and re-reads B once per band.
    promotion: k-blocks between promotions into FP32 registers, for `promoted` (name `_pN` unless 1): fewer
    promotions cost fewer instructions and keep longer sums in the Tensor Core's narrower accumulator (spans over
    128 k elements break the accuracy bound: filters.py). With 1, a 256- or 512-deep k-block is
    promoted in slices of 128 (kernels/sm90_fp8_overlapped_promotion.hpp).
    turns: promotion every k-block (cooperative) with the two warpgroups taking turns at the Tensor Core, each
    promoting while the other's k-block runs (name suffix `_turns`): two accumulator fragments per thread instead
    of three, so promoted tiles up to 128x224 fit (kernels/sm90_fp8_turn_taking_promotion.hpp).
    swap_ab: the kernel computes Dᵀ = B · Aᵀ (name suffix `_swap`), so `tile` is (n, m, k): its first side runs
    over N (the weights fill wgmma's 64 rows) and its second over M (decode's few tokens in a 16- or 32-wide n).
    l2_prefetch: k-blocks of weights (B) of its first tile that each CTA asks L2 for before it waits on the kernel
    before it (name suffix `_l2pfN`): the weight stream starts while that kernel drains. Persistent scheduler
    only (it knows each CTA's first tile before that wait).
    stage_epilogue: D written through the tile's last mainloop stage instead of an epilogue buffer of its own
    (name suffix `_se`), which leaves a 128x128x128 mainloop a seventh stage (kernels/sm90_stage_epilogue.hpp):
    cooperative, persistent, promoted every k-block without turns, 128x64 or 128x128 tiles, 16-bit output, not
    swapped.
    weights_first: the producer requests each k-block's weights (B) before its activations (name suffix `_wf`;
    CUTLASS requests A first): the activation reads of CTAs sharing a token tile then merge more often before L2
    (kernels/sm90_weights_load_mainloop.hpp). Not swapped (there the weights are A, already first).
    buffer_epilogue: the stage epilogue's code writing D through a tile-sized buffer of its own instead of a held
    stage (name suffix `_be`): CUTLASS's TMA epilogue's stage count and output, in less than half its compile.
    Where the stage epilogue fits, and not with it.
    """

    a_dtype: str = "e4m3"
    b_dtype: str = "e4m3"
    out_dtype: str = "bf16"
    accum: str = "promoted"
    tile: tuple[int, int, int] = (128, 128, 128)
    cluster: tuple[int, int] = (1, 1)
    schedule: str = "cooperative"
    scheduler: str = "persistent"
    splits: int = 1
    swizzle: int = 1
    raster: str = "auto"
    promotion: int = 1
    turns: bool = False
    swap_ab: bool = False
    l2_prefetch: int = 0
    stage_epilogue: bool = False
    weights_first: bool = False
    buffer_epilogue: bool = False
    family: str = FAMILY

    # `fp8_e4m3e4m3_bf16_128x128x128_c1x1_coop_promoted[_p2][_turns][_streamk|_splitkN|_dynamic][_wN][_rm|_rn]
    # [_swap][_l2pfN][_se][_wf][_be]`
    NAME: ClassVar[NameGrammar] = NameGrammar(
        "fp8_",
        Word("a_dtype", list(FP8_DTYPES)),
        Word("b_dtype", list(FP8_DTYPES)),
        "_",
        Word("out_dtype", list(OUT_DTYPES)),
        "_",
        Extent("tile", 3),
        "_c",
        Extent("cluster", 2),
        "_",
        Word("schedule", _SCHEDULE_TAGS),
        "_",
        Word("accum", ACCUMULATIONS),
        Optional("_p", Number("promotion"), default={"promotion": 1}),
        Optional(Word("turns", {True: "_turns"}), default={"turns": False}),
        Optional(
            Word("scheduler", {"streamk": "_streamk", "splitk": "_splitk", "dynamic": "_dynamic"}),
            default={"scheduler": "persistent"},
        ),
        Optional(Number("splits"), default={"splits": 1}),
        Optional("_w", Number("swizzle"), default={"swizzle": 1}),
        Optional(Word("raster", {"m": "_rm", "n": "_rn"}), default={"raster": "auto"}),
        Optional(Word("swap_ab", {True: "_swap"}), default={"swap_ab": False}),
        Optional("_l2pf", Number("l2_prefetch"), default={"l2_prefetch": 0}),
        Optional(Word("stage_epilogue", {True: "_se"}), default={"stage_epilogue": False}),
        Optional(Word("weights_first", {True: "_wf"}), default={"weights_first": False}),
        Optional(Word("buffer_epilogue", {True: "_be"}), default={"buffer_epilogue": False}),
    )
    EXAMPLE_NAME: ClassVar[str] = "fp8_e4m3e4m3_bf16_128x128x128_c1x1_coop_promoted"
    KIND: ClassVar[str] = "an FP8"

    def __post_init__(self):
        for field, choices in (("a_dtype", FP8_DTYPES), ("b_dtype", FP8_DTYPES), ("out_dtype", OUT_DTYPES)):
            if getattr(self, field) not in choices:
                raise ValueError(f"{field}={getattr(self, field)!r} is not one of {list(choices)}")
        for field, choices in (("accum", ACCUMULATIONS), ("schedule", SCHEDULES), ("scheduler", SCHEDULERS)):
            if getattr(self, field) not in choices:
                raise ValueError(f"{field}={getattr(self, field)!r} is not one of {list(choices)}")
        for field in ("turns", "swap_ab", "stage_epilogue", "weights_first", "buffer_epilogue"):
            if getattr(self, field) is not True and getattr(self, field) is not False:
                raise ValueError(f"{field}={getattr(self, field)!r} must be True or False")
        if self.family != FAMILY:
            raise ValueError(f"family={self.family!r} must be {FAMILY!r}")
        self._check_extents(tile="mnk", cluster="mn")
        if not isinstance(self.splits, int) or self.splits < 1:
            raise ValueError(f"splits={self.splits!r} must be a positive integer")
        if self.swizzle not in SWIZZLES:
            raise ValueError(f"swizzle={self.swizzle!r} must be one of {list(SWIZZLES)}")
        if self.raster not in RASTERS:
            raise ValueError(f"raster={self.raster!r} must be one of {list(RASTERS)}")
        if self.promotion not in PROMOTIONS:
            raise ValueError(f"promotion={self.promotion!r} must be one of {list(PROMOTIONS)}")
        if self.promotion > 1 and self.accum != "promoted":
            raise ValueError(f"promotion={self.promotion} is for accum='promoted'; fast accumulation never promotes")
        if self.turns and (self.accum, self.promotion, self.schedule) != ("promoted", 1, "cooperative"):
            raise ValueError(
                "turns=True takes promotion every k-block of a cooperative tile (accum='promoted', promotion=1, "
                f"schedule='cooperative'); got accum={self.accum!r}, promotion={self.promotion}, "
                f"schedule={self.schedule!r}"
            )
        if self.l2_prefetch not in L2_PREFETCHES:
            raise ValueError(f"l2_prefetch={self.l2_prefetch!r} must be one of {list(L2_PREFETCHES)}")
        if self.l2_prefetch and self.scheduler != "persistent":
            raise ValueError(
                f"l2_prefetch={self.l2_prefetch} runs ahead of the programmatic-launch wait for the first tile of "
                f"scheduler='persistent'; got scheduler={self.scheduler!r}"
            )
        if self.stage_epilogue and not self.stage_epilogue_fits:
            raise ValueError(
                "stage_epilogue=True takes a cooperative, persistent kernel promoting every k-block without turns, "
                "a 128x64x128 or 128x128x128 tile, bf16 or fp16 output and no swap; got " + self.name
            )
        if self.buffer_epilogue and (self.stage_epilogue or not self.stage_epilogue_fits):
            raise ValueError(
                "buffer_epilogue=True takes what stage_epilogue=True takes (a cooperative, persistent kernel promoting "
                "every k-block without turns, a 128x64x128 or 128x128x128 tile, bf16 or fp16 output, no swap), and "
                "not with it; got " + self.name
            )
        if self.weights_first and self.swap_ab:
            raise ValueError(
                "weights_first=True reorders B's loads before A's; swapped, the weights are A and load first"
            )
        if (self.scheduler == "splitk") != (self.splits > 1):
            raise ValueError(f"splits={self.splits} goes with scheduler='splitk' (and only it takes splits > 1)")

    @property
    def stage_epilogue_fits(self) -> bool:
        """Whether D can go through the tile's last mainloop stage: each warpgroup's 64 rows of 16-bit D fill at
        most its half (A's or B's) of one 128x128x128 FP8 stage."""
        return (
            (self.schedule, self.scheduler, self.accum, self.promotion, self.turns, self.swap_ab)
            == ("cooperative", "persistent", "promoted", 1, False, False)
            and self.out_dtype in ("bf16", "fp16")
            and self.tile in ((128, 64, 128), (128, 128, 128))
        )

    @property
    def programmatic_launch(self) -> bool:
        """Whether the kernel launches with programmatic dependent launch (not with stream-K or split-K: CUTLASS
        4.2's stream-K scheduler does not compile with it). A library holds variants that agree on it."""
        return self.scheduler in ("persistent", "dynamic")

    @property
    def mode(self) -> str:
        """The accuracy class that tables and peers are compared in: `fp8_fast` or `fp8_promoted`."""
        return f"fp8_{self.accum}"

    def with_dtypes(self, a_dtype: str, b_dtype: str, out_dtype: str) -> Fp8Config:
        """The same kernel shape for other input and output types (tuned tables are measured for one pair). FP32
        output does not fit through a mainloop stage (nor the buffer epilogue's 16-bit boxes): such a variant keeps
        CUTLASS's epilogue there."""
        sixteen_bit = out_dtype in ("bf16", "fp16")
        return dataclasses.replace(
            self,
            a_dtype=a_dtype,
            b_dtype=b_dtype,
            out_dtype=out_dtype,
            stage_epilogue=self.stage_epilogue and sixteen_bit,
            buffer_epilogue=self.buffer_epilogue and sixteen_bit,
        )


# When no tuned table applies: CUTLASS's stream-K scheduler runs whole tiles where they fill the GPU and shares
# the last wave (all of it, for decode's few tiles) out along K.
DEFAULT_FP8 = Fp8Config(tile=(128, 128, 128), schedule="cooperative", scheduler="streamk")


def dtype_name(dtype: torch.dtype, table: dict, argument: str) -> str:
    """`torch.float8_e4m3fn` -> `e4m3` for the dtypes in `table`; a TypeError naming `argument` otherwise."""
    for name, candidate in table.items():
        if candidate == dtype:
            return name
    raise TypeError(f"{argument} must be one of {list(table.values())}; got {dtype}")
