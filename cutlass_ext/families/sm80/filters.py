"""Named rules that remove sm80 configs that cannot build or would surely spill, before anything is compiled
(seed 000 section 3.5.1; `cutlass_ext.families.rules` applies them)."""

from __future__ import annotations

from ..rules import Rule
from .config import KernelConfig

BYTES_PER_ELEMENT = 4  # FP32 operands in shared memory (packed halfhalf words too)
# CUTLASS's sm80 shared-memory layouts for 32-bit Tensor Core operands are built from 128-byte lines.
SHARED_MEMORY_LINE_BYTES = 128
# Accumulators plus a row of per-step temporaries above this many registers spilled in every measured variant
# (ptxas reports: 128 with 238-248 registers in use, no spill).
REGISTER_BUDGET = 160
# Per n-tile (m16n8) of one warp row, the fresh accumulators each mode keeps while it issues a product across
# the row (kernels/split_mma.h): tf32tf32 one, halfhalf two (hi·hi and lo terms), markidis one.
_TEMPORARIES_PER_TILE = {"tf32": 0, "tf32tf32": 4, "halfhalf": 8, "markidis": 4}


def warp_count(config: KernelConfig) -> int:
    (bm, bn, bk), (wm, wn, wk) = config.threadblock, config.warp
    return (bm // wm) * (bn // wn) * (bk // wk)


def shared_memory_bytes(config: KernelConfig) -> int:
    bm, bn, bk = config.threadblock
    return (bm * bk + bk * bn) * BYTES_PER_ELEMENT * config.stages


def register_estimate(config: KernelConfig) -> int:
    """FP32 accumulators of the warp tile plus the per-step temporaries of one row of n-tiles."""
    wm, wn, _ = config.warp
    return wm * wn // 32 + _TEMPORARIES_PER_TILE[config.mode] * (wn // 8)


def _warp_exceeds(c, _):
    return any(w > b for w, b in zip(c.warp, c.threadblock))


def _warp_does_not_divide(c, _):
    return any(b % w for w, b in zip(c.warp, c.threadblock))


def _instruction_does_not_divide(c, _):
    return any(w % i for w, i in zip(c.warp, c.instruction))


def _warp_k_under_two_mma(c, _):
    # CUTLASS's multistage mainloop overlaps two warp-level mma steps per k-tile (mma_base.h static_assert)
    return c.warp[2] < 2 * c.instruction[2]


def _k_contiguous_tile_over_line(c, _):
    # an operand read along K (row-major A, column-major B) is stored "crosswise": one row of bk elements per
    # 128-B line (tensor_op_multiplicand_sm75.h static_assert)
    k_major = c.layout_a == "row" or c.layout_b == "col"
    return k_major and c.threadblock[2] * BYTES_PER_ELEMENT > SHARED_MEMORY_LINE_BYTES


def _mn_contiguous_tile_under_line(c, _):
    # an operand read along M or N (column-major A, row-major B) is stored "congruous": CUTLASS's warp-level
    # iterators exist only for tiles spanning a whole 128-B line
    bm, bn, _ = c.threadblock
    short = SHARED_MEMORY_LINE_BYTES // BYTES_PER_ELEMENT
    return (c.layout_a == "col" and bm < short) or (c.layout_b == "row" and bn < short)


def epilogue_map_fits(config: KernelConfig) -> bool:
    """Whether CUTLASS's epilogue can spread the output tile over the block's threads: a port of
    OutputTileOptimalThreadMap (epilogue/threadblock/output_tile_thread_map.h), whose static_asserts fail when a
    thread would get no row or no column of accesses (too many warps for a narrow or short tile)."""
    (bm, bn, _), (wm, _, _) = config.threadblock, config.warp
    warps, groups, tensor_op_rows, vector = warp_count(config), bm // wm, 8, config.alignment
    warps_for_rows = 1 if groups > warps else warps // groups
    if tensor_op_rows <= warps_for_rows:  # each warp covers whole rows, 32 vectors wide
        return bn // vector // 32 > 0
    shape_row, width = tensor_op_rows // warps_for_rows, bn // vector
    target_width = 256 // (vector * BYTES_PER_ELEMENT)  # 256-byte accesses per row
    if 32 // target_width > shape_row:
        access_width, access_rows = 32 // shape_row, shape_row
    else:
        access_width = min(width, 32, target_width)
        access_rows = min(tensor_op_rows, 32 // access_width)
    return access_width * vector <= bn and width // access_width > 0 and shape_row // access_rows > 0


def _epilogue_map_empty(c, _):
    return not epilogue_map_fits(c)


def _too_many_threads(c, _):
    return warp_count(c) * 32 > 1024


def _too_few_loads(c, _):
    bm, bn, bk = c.threadblock
    accesses_needed = warp_count(c) * 32 * c.alignment  # one vector access per thread per operand, at least
    return bm * bk < accesses_needed or bk * bn < accesses_needed


def _shared_memory_over_limit(c, limits):
    return shared_memory_bytes(c) > limits.shared_memory_bytes


def _register_estimate_over_budget(c, _):
    return register_estimate(c) > REGISTER_BUDGET


RULES = (
    Rule("warp_exceeds_threadblock", "a warp tile larger than its threadblock tile (seed rule 1)", _warp_exceeds),
    Rule("warp_does_not_divide_threadblock", "CUTLASS tiles a threadblock by whole warps", _warp_does_not_divide),
    Rule(
        "instruction_does_not_divide_warp", "a warp tile made of whole mma instructions", _instruction_does_not_divide
    ),
    Rule(
        "warp_k_under_two_mma",
        "a warp tile's k under two mma steps (CUTLASS's mainloop needs 2)",
        _warp_k_under_two_mma,
    ),
    Rule(
        "k_contiguous_tile_over_line",
        "row-major A / column-major B with bk x 4 B over a 128-B shared-memory line",
        _k_contiguous_tile_over_line,
    ),
    Rule(
        "mn_contiguous_tile_under_line",
        "column-major A / row-major B with bm or bn x 4 B under a 128-B line",
        _mn_contiguous_tile_under_line,
    ),
    Rule("too_many_threads", "more than 1024 threads per block", _too_many_threads),
    Rule("too_few_loads", "fewer tile elements than threads × vector width", _too_few_loads),
    Rule(
        "epilogue_map_empty",
        "CUTLASS's epilogue leaves threads without output rows or columns (too many warps for the tile)",
        _epilogue_map_empty,
    ),
    Rule(
        "shared_memory_over_limit",
        "stages × tiles over the device's opt-in limit (seed rule 2)",
        _shared_memory_over_limit,
    ),
    Rule(
        "register_estimate_over_budget",
        f"accumulators + temporaries > {REGISTER_BUDGET} registers: spills",
        _register_estimate_over_budget,
    ),
)
