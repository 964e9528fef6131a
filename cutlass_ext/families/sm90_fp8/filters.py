"""Named rules that remove FP8 (sm90a, CUTLASS 3.x) configs that cannot build or would surely spill, before
anything is compiled (`cutlass_ext.families.rules` applies them)."""

from __future__ import annotations

from ..rules import Rule
from .config import Fp8Config

WGMMA_M = 64  # rows one warpgroup's wgmma covers
WGMMA_MAX_N = 256
WGMMA_N_STEP = 8  # FP8 wgmma n: every multiple of 8 (render.defines enables the ones CuTe leaves out by default)
SWIZZLE_K = 64  # FP8 elements: tile k in whole 64-byte swizzle atoms of shared memory
MAX_CLUSTER = 8  # CTAs in a portable thread-block cluster
EPILOGUE_SHARED_BYTES = 32 * 1024  # the TMA-store epilogue's staging buffers, at most (EpilogueTileAuto); swapped
# kernels store from registers (kernels/sm90_register_epilogue.hpp) and need none
# FP32 accumulator registers per consumer thread above this spill in the mainloop: consumers get 232-240 registers
# through setmaxnreg, and addresses, scales and the pipeline take the rest. A 128x144 cooperative promoted tile
# (three fragments of 72: 216) builds without spills; a 128x224 turn-taking tile (two fragments of 112: 224)
# spills 60-68 bytes around the tile loop, none inside the mainloop (SASS), and is the fastest promoted tile at
# N = 57344 prefill (docs/design-notes.md, FP8 tiles).
ACCUMULATOR_BUDGET = 224
# K elements summed inside the Tensor Core between two promotions into FP32 registers, at most. cuBLAS's promoted
# mode is as accurate as promoting every 128; every 256, 512 and 1024 measured 1.6x, 2.7x and 4.2x its relres at
# FP32 output (relres grows with the span; docs/design-notes.md, FP8 promotion). A bf16 output's rounding hides
# this, so the sweep's gate cannot see it: the rule removes such variants before they are built.
MAX_PROMOTION_SPAN = 128


def consumer_threads(config: Fp8Config) -> int:
    """Threads that hold one tile's accumulators: two warpgroups (cooperative) or one (ping-pong)."""
    return 256 if config.schedule == "cooperative" else 128


def accumulator_registers(config: Fp8Config) -> int:
    """Per consumer thread, in fragments of the tile's accumulator: fast accumulation holds one; promotion every
    k-block the FP32 totals and two Tensor Core partial sums (one promoted while the next k-block's wgmmas write
    the other: kernels/sm90_fp8_overlapped_promotion.hpp), or with `turns` one partial (promoted while the other
    warpgroup's k-block runs); a longer promotion span (CUTLASS's mainloop) two."""
    tm, tn, _ = config.tile
    fragments = 1 if config.accum == "fast" else 3 if config.promotion == 1 and not config.turns else 2
    return tm * tn // consumer_threads(config) * fragments


def two_stage_shared_bytes(config: Fp8Config) -> int:
    tm, tn, tk = config.tile
    if config.swap_ab:
        epilogue = 0
    elif config.buffer_epilogue:  # a 16-bit tile of D, and two tiles' column scales and bias
        epilogue = tm * tn * 2 + 2 * tn * (4 + 2)
    else:
        epilogue = EPILOGUE_SHARED_BYTES
    return 2 * (tm + tn) * tk + epilogue


def slices_k_blocks(config: Fp8Config) -> bool:
    """Whether the overlapped mainloop runs it (promotion every k-block, not by turns): it promotes each k-block
    in slices of 128 k elements (kernels/sm90_fp8_overlapped_promotion.hpp)."""
    return config.accum == "promoted" and config.promotion == 1 and not config.turns


def promotion_span(config: Fp8Config) -> int:
    """K elements between promotions: every `promotion` k-blocks, or 128 where the overlapped mainloop slices a
    k-block of 256, 512, ... into pairs of slices."""
    tile_k = config.tile[2]
    if slices_k_blocks(config) and tile_k % 256 == 0:
        return 128
    return tile_k * config.promotion


RULES = (
    Rule("tile_m_not_whole_wgmma", f"tile m is whole {WGMMA_M}-row wgmma blocks", lambda c, _: c.tile[0] % WGMMA_M),
    Rule(
        "cooperative_tile_m_under_128",
        "a cooperative tile is split in m between two warpgroups",
        lambda c, _: c.schedule == "cooperative" and c.tile[0] < 2 * WGMMA_M,
    ),
    Rule(
        "tile_n_not_wgmma",
        f"wgmma's n is a multiple of {WGMMA_N_STEP} up to {WGMMA_MAX_N}",
        lambda c, _: c.tile[1] % WGMMA_N_STEP or c.tile[1] > WGMMA_MAX_N,
    ),
    Rule(
        "tile_k_not_swizzle_atoms",
        f"tile k is a multiple of {SWIZZLE_K} FP8 elements",
        lambda c, _: c.tile[2] % SWIZZLE_K,
    ),
    Rule(
        "pingpong_split_k_or_stream_k",
        "CUTLASS's ping-pong kernel takes only the persistent scheduler",
        lambda c, _: c.schedule == "pingpong" and c.scheduler != "persistent",
    ),
    Rule(
        "dynamic_scheduler_cluster_or_pingpong",
        "the dynamic tile scheduler runs cooperative kernels with one CTA per cluster",
        lambda c, _: c.scheduler == "dynamic" and (c.schedule != "cooperative" or c.cluster != (1, 1)),
    ),
    Rule(
        "cluster_over_limit",
        f"more than {MAX_CLUSTER} CTAs per cluster",
        lambda c, _: c.cluster[0] * c.cluster[1] > MAX_CLUSTER,
    ),
    Rule(
        "shared_memory_under_two_stages",
        "two pipeline stages and the epilogue over the device's opt-in shared memory",
        lambda c, limits: two_stage_shared_bytes(c) > limits.shared_memory_bytes,
    ),
    Rule(
        "promotion_span_over_128",
        f"promoted accumulation sums more than {MAX_PROMOTION_SPAN} k elements between promotions (tile k x promotion)",
        lambda c, _: c.accum == "promoted" and promotion_span(c) > MAX_PROMOTION_SPAN,
    ),
    Rule(
        "promoted_k_block_under_128",
        "the overlapped mainloop promotes k-blocks in slices of 128 k elements: a shallower k-block does not build",
        lambda c, _: slices_k_blocks(c) and c.tile[2] < 128,
    ),
    Rule(
        "accumulator_registers_over_budget",
        f"accumulators (x3 when promoted every k-block, x2 taking turns) > {ACCUMULATOR_BUDGET} registers per "
        "consumer thread",
        lambda c, _: accumulator_registers(c) > ACCUMULATOR_BUDGET,
    ),
)
