"""Named rules that remove Hopper corrected-SGEMM (family sm90, kernels/sm90_corrected_gemm.cuh) configs that
cannot build or would surely spill, before anything is compiled (`cutlass_ext.families.rules` applies them)."""

from __future__ import annotations

from ..rules import Rule
from ..sm90_fp8.filters import RULES as FP8_RULES
from .config import PLANE_BYTES, Sm90Config

SWIZZLE_ATOM_BYTES = 32  # a k-tile row fills whole 32-, 64- or 128-byte swizzle atoms of shared memory
# Three FP32 fragments per consumer thread (accumulator, hi·hi since the last promotion, lo terms): 192 registers
# at a 128x128 cooperative tile built without spills (ptxas, 2026-11-23); consumers get 240 through setmaxnreg.
ACCUMULATOR_BUDGET = 192


def consumer_threads(config: Sm90Config) -> int:
    return 256 if config.schedule == "cooperative" else 128


def accumulator_registers(config: Sm90Config) -> int:
    tm, tn, _ = config.tile
    return 3 * tm * tn // consumer_threads(config)


def two_stage_shared_bytes(config: Sm90Config) -> int:
    """Two pipeline stages of four planes (hi and lo of A and B); the epilogue stores from registers."""
    tm, tn, tk = config.tile
    return 2 * 2 * (tm + tn) * tk * PLANE_BYTES[config.mode]


# The wgmma tile shape and cluster rules read `tile`, `schedule` and `cluster` alike in both Hopper families.
_SHARED_WITH_FP8 = ("tile_m_not_whole_wgmma", "cooperative_tile_m_under_128", "tile_n_not_wgmma", "cluster_over_limit")

RULES = (
    *(rule for rule in FP8_RULES if rule.name in _SHARED_WITH_FP8),
    Rule(
        "tile_k_not_swizzle_atoms",
        f"a k-tile row is a multiple of {SWIZZLE_ATOM_BYTES} bytes of plane",
        lambda c, _: (c.tile[2] * PLANE_BYTES[c.mode]) % SWIZZLE_ATOM_BYTES,
    ),
    Rule(
        "shared_memory_under_two_stages",
        "two pipeline stages of four planes and the epilogue over the device's opt-in shared memory",
        lambda c, limits: two_stage_shared_bytes(c) > limits.shared_memory_bytes,
    ),
    Rule(
        "accumulator_registers_over_budget",
        f"three accumulator fragments > {ACCUMULATOR_BUDGET} registers per consumer thread: spills",
        lambda c, _: accumulator_registers(c) > ACCUMULATOR_BUDGET,
    ),
)
