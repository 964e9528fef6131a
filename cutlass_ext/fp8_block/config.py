"""`Fp8BlockConfig`: the one description of a block-scaled FP8 GEMM variant (CUTLASS 3.x, Hopper: TMA + wgmma).

The code generator renders it (kernels/sm90_fp8_block*.in), its fingerprint keys the build cache, its fields are
CSV columns and its derived `name` is what dispatch and the benchmarks record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from string import Template
from typing import ClassVar

from ..config import Extent, NameGrammar, Number, Optional, VariantFields, Word
from ..toolchain import kernels_dir

FAMILY = "sm90_fp8_block"
FP8_DTYPES = ("e4m3", "e5m2")  # torch.float8_e4m3fn, torch.float8_e5m2
OUT_DTYPES = ("bf16", "fp16", "fp32")
SCALE_BLOCK_K = 128  # k elements per scale: the k-tile, and one promotion span of the Tensor Core's sums
SCALE_NS = (128, 1)  # rows of B per scale: 128x128 weight blocks, or 1x128 like the activations
SCHEDULES = ("cooperative", "pingpong")  # two consumer warpgroups on one tile, or on alternating tiles
# Dense kernels: whole tiles per persistent CTA, CUTLASS's stream-K (the last wave shared out along K) or split-K
# (every tile's K cut into `splits` slices). Grouped kernels: the group scheduler's whole tiles (`persistent`).
SCHEDULERS = ("persistent", "streamk", "splitk")
_SCHEDULE_TAGS = {"cooperative": "coop", "pingpong": "pp"}
# How the dense kernel reads activation scales: K-major (unit stride along k-blocks, what quantize_fp8 writes) or
# M-major (unit stride along rows, DeepGEMM's layout: one k-block's scales of a tile loaded by TMA in one piece).
SCALE_A_MAJORS = ("k", "m")
# k-blocks of the first tile's weights a programmatically launched CTA asks L2 for before it waits; 0: none
L2_PREFETCHES = (0, 4, 8, 16)


@dataclass(frozen=True)
class Fp8BlockConfig(VariantFields):
    """One block-scaled FP8 GEMM variant: D (M, N) = Σ_kb scale_a[m, kb] · scale_b[n / scale_n, kb] · (A·Bᵀ)_kb
    (+ bias), A (M, K) and B (N, K) FP8, each 128-deep k-block's Tensor Core sums scaled as they are promoted
    into FP32 registers (CUTLASS's blockwise-scaled mainloop).

    tile: (m, n, k) of a CTA's output tile and k-tile (k = 128, one scale block); cluster: (m, n) CTAs sharing
    loads by TMA multicast. schedule: `cooperative` (128-row tiles, or 256-row ones whose warpgroups promote
    64 rows at a time: kernels/sm90_fp8_block_wave_promotion.hpp) or `pingpong` (64-row tiles). scale_n: rows
    of B per scale (128 or 1; name `_sbN`); a dense, unswapped 128-row cooperative tile may be n = 16·j > scale_n
    wide across 128-row weight blocks (e.g. 176 or 192: whole waves of tiles for N = 2112), the kernel then reading
    the weight scales expanded to `scale_rows_n` rows each. scheduler / splits: see SCHEDULERS (name `_streamk`,
    `_splitkN`).
    grouped: the mixture-of-experts kernel (name suffix `_grouped`): one launch over the experts' products,
    their row counts read on the device. k_grouped: its weight-gradient form (name suffix `_kgrouped`): groups cut
    along K (each expert's tokens), both operands' 1x128 scales M-/N-major (scale_n = 1, scale_a_major = 'm'),
    D = C + the product. scale_a_major: see SCALE_A_MAJORS (dense only; name suffix `_am`).
    swap_ab: the kernel computes Dᵀ = B · Aᵀ (name suffix `_swap`), so `tile` is (n, m, k): the weights fill its
    first side (128 rows cooperative, or 64 ping-pong: then half a 128-row weight block, whose scale row both
    halves read), decode's few tokens its second (a multiple of 32). Unswapped, a dense 64-row ping-pong tile's n
    may likewise lie inside a weight block (32 or 64 of 128: DeepGEMM's tilings at M <= 128; `in_block`).
    overlapped: each k-block's scaling and promotion run while the next k-block's wgmmas do (name suffix
    `_overlap`; kernels/sm90_fp8_block_overlapped_promotion.hpp), the same output bit for bit (dense only).
    programmatic: launched with programmatic dependent launch (name suffix `_pdl`): the kernel starts while the one
    before it drains and waits for it before reading memory; l2_prefetch k-blocks of its first tile's weights are
    asked of L2 before that wait (`_l2pfN`; kernels/sm90_fp8_block_programmatic_mainloop.hpp). Dense kernels with
    whole tiles per persistent CTA only.
    """

    a_dtype: str = "e4m3"
    b_dtype: str = "e4m3"
    out_dtype: str = "bf16"
    tile: tuple[int, int, int] = (128, 128, 128)
    cluster: tuple[int, int] = (1, 1)
    schedule: str = "cooperative"
    scale_n: int = 128
    scheduler: str = "persistent"
    splits: int = 1
    grouped: bool = False
    k_grouped: bool = False
    scale_a_major: str = "k"
    swap_ab: bool = False
    overlapped: bool = False
    programmatic: bool = False
    l2_prefetch: int = 0
    family: str = FAMILY

    # `fp8block_e4m3e4m3_bf16_128x128x128_c1x1_coop_sb128[_streamk|_splitk4][_grouped|_kgrouped][_am][_swap][_overlap]
    # [_pdl][_l2pfN]`
    NAME: ClassVar[NameGrammar] = NameGrammar(
        "fp8block_",
        Word("a_dtype", FP8_DTYPES),
        Word("b_dtype", FP8_DTYPES),
        "_",
        Word("out_dtype", OUT_DTYPES),
        "_",
        Extent("tile", 3),
        "_c",
        Extent("cluster", 2),
        "_",
        Word("schedule", _SCHEDULE_TAGS),
        "_sb",
        Number("scale_n"),
        Optional(Word("scheduler", {"streamk": "_streamk", "splitk": "_splitk"}), default={"scheduler": "persistent"}),
        Optional(Number("splits"), default={"splits": 1}),
        Optional(Word("grouped", {True: "_grouped"}), default={"grouped": False}),
        Optional(Word("k_grouped", {True: "_kgrouped"}), default={"k_grouped": False}),
        Optional(Word("scale_a_major", {"m": "_am"}), default={"scale_a_major": "k"}),
        Optional(Word("swap_ab", {True: "_swap"}), default={"swap_ab": False}),
        Optional(Word("overlapped", {True: "_overlap"}), default={"overlapped": False}),
        Optional(Word("programmatic", {True: "_pdl"}), default={"programmatic": False}),
        Optional("_l2pf", Number("l2_prefetch"), default={"l2_prefetch": 0}),
    )
    EXAMPLE_NAME: ClassVar[str] = "fp8block_e4m3e4m3_bf16_128x128x128_c1x1_coop_sb128_streamk"

    def __post_init__(self):
        for field, choices in (("a_dtype", FP8_DTYPES), ("b_dtype", FP8_DTYPES), ("out_dtype", OUT_DTYPES)):
            if getattr(self, field) not in choices:
                raise ValueError(f"{field}={getattr(self, field)!r} is not one of {list(choices)}")
        for field, choices in (
            ("schedule", SCHEDULES),
            ("scheduler", SCHEDULERS),
            ("scale_n", SCALE_NS),
            ("scale_a_major", SCALE_A_MAJORS),
        ):
            if getattr(self, field) not in choices:
                raise ValueError(f"{field}={getattr(self, field)!r} is not one of {list(choices)}")
        if self.family != FAMILY:
            raise ValueError(f"family={self.family!r} must be {FAMILY!r}")
        for field in ("grouped", "k_grouped", "swap_ab", "overlapped", "programmatic"):
            if getattr(self, field) is not True and getattr(self, field) is not False:
                raise ValueError(f"{field}={getattr(self, field)!r} must be True or False")
        self._check_extents(tile="mnk", cluster="mn")
        tile_m, tile_n, tile_k = self.tile
        if tile_k != SCALE_BLOCK_K:
            raise ValueError(f"tile={self.tile!r}: its k must be {SCALE_BLOCK_K}, one scale block")
        weights_side = tile_m if self.swap_ab else tile_n
        if self.swap_ab and weights_side % self.scale_n and self.scale_n % weights_side:
            raise ValueError(
                f"tile={self.tile!r}: its m (swapped: the weights' side) must be a multiple of scale_n={self.scale_n} "
                "or divide it"
            )
        if not self.swap_ab and weights_side % self.scale_n and (tile_n % 16 or tile_n < self.scale_n):
            if not self.in_block:
                raise ValueError(
                    f"tile={self.tile!r}: its n must be a multiple of scale_n={self.scale_n}, 32 or 64 inside a "
                    "weight block or, wider than one, a multiple of 16"
                )
            if self.schedule != "pingpong" or self.grouped or self.k_grouped:
                raise ValueError(
                    f"tile={self.tile!r} lies inside a weight-scale block of {self.scale_n} rows: built for dense "
                    f"64-row ping-pong tiles (DeepGEMM's at M <= 128); got schedule={self.schedule!r}, "
                    f"grouped={self.grouped}, k_grouped={self.k_grouped}"
                )
        if (
            not self.swap_ab
            and self.scale_rows_n != self.scale_n
            and (tile_m != 128 or self.schedule != "cooperative" or self.grouped or self.k_grouped or self.overlapped)
        ):
            raise ValueError(
                f"tile={self.tile!r} cuts across weight-scale blocks of {self.scale_n} rows: built for dense, "
                f"unswapped 128-row cooperative tiles, not overlapped; got schedule={self.schedule!r}, "
                f"grouped={self.grouped}, k_grouped={self.k_grouped}, overlapped={self.overlapped}"
            )
        if self.swap_ab and (tile_n % 32 or self.grouped or self.scale_a_major != "k"):
            raise ValueError(
                f"swap_ab=True takes dense kernels with K-major activation scales and a token side (tile n) that "
                f"is a multiple of 32; got {self.tile!r}, grouped={self.grouped}, scale_a_major={self.scale_a_major!r}"
            )
        wave_tile = tile_m == 256 and self.schedule == "cooperative"
        if tile_m != {"cooperative": 128, "pingpong": 64}[self.schedule] and not wave_tile:
            raise ValueError(
                f"tile={self.tile!r}: schedule={self.schedule!r} takes m = 128 or 256 (cooperative) or 64 (pingpong)"
            )
        if wave_tile and (self.swap_ab or self.grouped or self.k_grouped or self.overlapped or tile_n > 128):
            raise ValueError(
                f"tile={self.tile!r}: 256-row tiles (promoted 64 rows at a time) are built for dense, unswapped, "
                f"not overlapped kernels with n <= 128; got swap_ab={self.swap_ab}, grouped={self.grouped}, "
                f"k_grouped={self.k_grouped}, overlapped={self.overlapped}"
            )
        if not isinstance(self.splits, int) or self.splits < 1:
            raise ValueError(f"splits={self.splits!r} must be a positive integer")
        if (self.scheduler == "splitk") != (self.splits > 1):
            raise ValueError(f"splits={self.splits} goes with scheduler='splitk' (and only it takes splits > 1)")
        if self.grouped and self.scheduler != "persistent":
            raise ValueError(
                f"grouped kernels use the group scheduler (scheduler='persistent'); got {self.scheduler!r}"
            )
        if self.k_grouped and (
            self.grouped
            or self.swap_ab
            or self.scheduler != "persistent"
            or self.scale_n != 1
            or self.scale_a_major != "m"
        ):
            raise ValueError(
                "k_grouped kernels (the weight-gradient form) take 1x128 scales M-/N-major on both operands "
                "(scale_n=1, scale_a_major='m') under the group scheduler (scheduler='persistent', not grouped nor "
                f"swapped); got scale_n={self.scale_n}, scale_a_major={self.scale_a_major!r}, "
                f"scheduler={self.scheduler!r}, grouped={self.grouped}, swap_ab={self.swap_ab}"
            )
        if self.overlapped and (self.grouped or self.k_grouped):
            raise ValueError("overlapped promotion is built for the dense kernels (grouped=False, k_grouped=False)")
        if self.grouped and self.scale_a_major != "k":
            raise ValueError("grouped kernels read K-major activation scales (scale_a_major='k'): dense per group")
        if self.scheduler != "persistent" and self.schedule != "cooperative":
            raise ValueError(f"scheduler={self.scheduler!r} runs cooperative kernels; got schedule={self.schedule!r}")
        if self.programmatic and (self.scheduler != "persistent" or self.grouped or self.k_grouped):
            raise ValueError(
                "programmatic=True is built for dense kernels with whole tiles per persistent CTA; got "
                f"scheduler={self.scheduler!r}, grouped={self.grouped}, k_grouped={self.k_grouped}"
            )
        if self.l2_prefetch not in L2_PREFETCHES:
            raise ValueError(f"l2_prefetch={self.l2_prefetch!r} must be one of {list(L2_PREFETCHES)}")
        if self.l2_prefetch and not self.programmatic:
            raise ValueError(
                f"l2_prefetch={self.l2_prefetch} runs ahead of the programmatic-launch wait: it needs programmatic=True"
            )

    @property
    def scale_rows_n(self) -> int:
        """Rows of B per weight scale as the kernel reads them, to which the API expands the scales: scale_n, or for
        a tile across weight-scale blocks the largest g dividing both widths for which CUTLASS's producer can
        tile the scales' (g, rows / g) mode by a tile's n / g scales (kernels/sm90_fp8_block_gemm.cuh)."""
        if self.swap_ab or self.in_block:  # whole weight blocks per tile, or inside one, whose scale row it reads
            return self.scale_n
        tile_n, shared = self.tile[1], math.gcd(self.tile[1], self.scale_n)
        return next(
            (g for g in range(shared, 1, -1) if shared % g == 0 and ((tile_n // g) % g == 0 or g % (tile_n // g) == 0)),
            1,
        )

    @property
    def in_block(self) -> bool:
        """The tile's weights' side (n, or m swapped: 32 or 64) is narrower than a weight-scale block and divides it:
        every tile reads one weight scale per k-block, in place from its block's row."""
        weights_side = self.tile[0] if self.swap_ab else self.tile[1]
        return weights_side < self.scale_n and self.scale_n % weights_side == 0 and weights_side % 32 == 0

    @property
    def mode(self) -> str:
        """The tuned tables' mode: `fp8_block` (dense), `fp8_grouped` (mixture-of-experts), `fp8_k_grouped`."""
        return "fp8_grouped" if self.grouped else "fp8_k_grouped" if self.k_grouped else "fp8_block"


_ELEMENTS = {
    "e4m3": "cutlass::float_e4m3_t",
    "e5m2": "cutlass::float_e5m2_t",
    "bf16": "cutlass::bfloat16_t",
    "fp16": "cutlass::half_t",
    "fp32": "float",
}
_DECOMPOSITIONS = {"persistent": "DecomposePersistent", "streamk": "DecomposeStreamK", "splitk": "DecomposeSplitK"}


def render_instance(config: Fp8BlockConfig) -> str:
    """The variant's launchers in the family's translation unit (kernels/sm90_fp8_block_instance.in)."""
    (tile_m, tile_n, tile_k), (cluster_m, cluster_n) = config.tile, config.cluster
    if config.grouped:
        launcher, suffix, args, decomposition = "Sm90Fp8GroupedGemm", "_fp8_grouped", "cutlass_ext_fp8_grouped_args", ""
    elif config.k_grouped:
        launcher, suffix, decomposition = "Sm90Fp8KGroupedGemm", "_fp8_k_grouped", ""
        args = "cutlass_ext_fp8_k_grouped_args"
    else:
        launcher, suffix, args = "Sm90Fp8BlockGemm", "_fp8_block", "cutlass_ext_fp8_block_args"
        decomposition = (
            f", cutlass_ext::fp8_block::{_DECOMPOSITIONS[config.scheduler]}, {config.splits}, "
            f"{'true' if config.scale_a_major == 'm' else 'false'}, {'true' if config.swap_ab else 'false'}, "
            f"{'true' if config.overlapped else 'false'}, {'true' if config.programmatic else 'false'}, "
            f"{config.l2_prefetch}"
        )
    return Template((kernels_dir() / "sm90_fp8_block_instance.in").read_text()).substitute(
        name=config.name,
        suffix=suffix,
        args=args,
        launcher=launcher,
        element_a=_ELEMENTS[config.a_dtype],
        element_b=_ELEMENTS[config.b_dtype],
        element_d=_ELEMENTS[config.out_dtype],
        tile_m=tile_m,
        tile_n=tile_n,
        tile_k=tile_k,
        cluster_m=cluster_m,
        cluster_n=cluster_n,
        schedule={"cooperative": "ScheduleCooperative", "pingpong": "SchedulePingpong"}[config.schedule],
        scale_n=config.scale_n,
        decomposition=decomposition,
    )
