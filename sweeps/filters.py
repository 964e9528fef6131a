"""Named rules that remove impossible or hopeless configs before anything is compiled (seed 000 section 3.5.1).

Each removed config is attributed to the first rule that removes it, so the per-rule counts add up. The rules only
remove what cannot work or would surely spill; everything else goes to the compiler, whose failures the sweep
records as rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from cutlass_ext.families.sm80.config import KernelConfig

# Opt-in shared memory per block, for --arch without a GPU (cudaDevAttrMaxSharedMemoryPerBlockOptin).
SHARED_MEMORY_BYTES = {"80": 166912, "86": 101376, "87": 166912, "89": 101376, "90": 232448, "90a": 232448}
BYTES_PER_ELEMENT = 4  # FP32 operands in shared memory (packed halfhalf words too)
# CUTLASS's sm80 shared-memory layouts for 32-bit Tensor Core operands are built from 128-byte lines.
SHARED_MEMORY_LINE_BYTES = 128
# Accumulators plus a row of per-step temporaries above this many registers spilled in every measured variant
# (ptxas reports: 128 with 238-248 registers in use, no spill).
REGISTER_BUDGET = 160
# Per n-tile (m16n8) of one warp row, the fresh accumulators each mode keeps while it issues a product across
# the row (kernels/split_mma.h): tf32tf32 one, halfhalf two (hi·hi and lo terms), markidis one.
_TEMPORARIES_PER_TILE = {"tf32": 0, "tf32tf32": 4, "halfhalf": 8, "markidis": 4}


@dataclass(frozen=True)
class DeviceLimits:
    arch: str
    shared_memory_bytes: int

    @classmethod
    def for_arch(cls, arch: str) -> DeviceLimits:
        if arch not in SHARED_MEMORY_BYTES:
            raise ValueError(f"arch={arch!r} has no shared-memory table entry; known: {sorted(SHARED_MEMORY_BYTES)}")
        return cls(arch, SHARED_MEMORY_BYTES[arch])

    @classmethod
    def from_device(cls, device=None) -> DeviceLimits:
        import torch

        from cutlass_ext.toolchain import device_arch

        properties = torch.cuda.get_device_properties(device)
        return cls(device_arch(device), properties.shared_memory_per_block_optin)


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


@dataclass(frozen=True)
class Rule:
    name: str
    why: str
    removes: Callable[[KernelConfig, DeviceLimits], bool]


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


@dataclass(frozen=True)
class FilterResult:
    survivors: list[KernelConfig]
    removed: dict[KernelConfig, str]  # config -> the first rule that removed it
    counts: Counter  # rule name -> configs it removed


def rules_for(family: str) -> tuple[Rule, ...]:
    """The rules of a kernel family: these for sm80, sweeps/filters_fp8.py's for sm90_fp8 and
    sweeps/filters_split.py's for sm90 (the Hopper corrected SGEMM)."""
    if family == "sm90_fp8":
        from .filters_fp8 import RULES as FP8_RULES

        return FP8_RULES
    if family == "sm90":
        from .filters_split import RULES as SPLIT_RULES

        return SPLIT_RULES
    return RULES


def apply_rules(configs: list, limits: DeviceLimits, rules: tuple[Rule, ...] = RULES) -> FilterResult:
    survivors, removed = [], {}
    for config in configs:
        rule = next((r for r in rules if r.removes(config, limits)), None)
        if rule is None:
            survivors.append(config)
        else:
            removed[config] = rule.name
    counts = Counter({rule.name: 0 for rule in rules})
    counts.update(removed.values())
    return FilterResult(survivors, removed, counts)
