"""`KernelConfig`: one variant of the sm80 family (CUTLASS 2.x mma.sync, runs on sm80 and later): the corrected
SGEMM modes and TF32, built from one warp-level MMA specialization (kernels/split_mma.h)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ...config import Extent, NameGrammar, Number, Optional, VariantFields, Word

# Tensor Core instruction shape (m, n, k) of each mode's operands on the CUTLASS 2.x mma.sync path.
# The split modes read FP32 fragments and multiply in TF32 m16n8k8 or FP16 m16n8k16 (kernels/split_mma.h).
INSTRUCTION_SHAPES = {
    "tf32": (16, 8, 8),
    "tf32tf32": (16, 8, 8),
    "halfhalf": (16, 8, 16),
    "markidis": (16, 8, 16),
    "cutlass3xtf32": (16, 8, 8),
}
# CUTLASS's own 3xTF32 (OpMultiplyAddFastF32, its examples 27-29): built from our template as the benchmarks'
# peer, not a mode of `ext.gemm`.
PEER_MODES = ("cutlass3xtf32",)
KERNEL_MODES = tuple(sorted(mode for mode in INSTRUCTION_SHAPES if mode not in PEER_MODES))
FAMILIES = ("sm80",)
LAYOUTS = ("row", "col")  # how A (m, k) and B (k, n) are stored: unit stride along rows or down columns
# What the kernel reads: FP32 operands split in registers, or (halfhalf) FP16 hi and lo·2^11 packed in each
# 32-bit word by a pass over memory before the GEMM (kernels/halfhalf_operands.cuh).
OPERANDS = ("fp32", "packed")
SWIZZLES = (1, 2, 4, 8)
_PACKABLE_MODES = ("halfhalf",)
_LAYOUT_LETTERS = {layout: layout[0] for layout in LAYOUTS}


@dataclass(frozen=True)
class KernelConfig(VariantFields):
    """One CUTLASS kernel variant.

    family: the instruction path, `sm80` = CUTLASS 2.x mma.sync (runs on sm80 and later).
    threadblock, warp: (m, n, k) tiles. stages: software-pipeline depth.
    alignment: elements per vector access of A, B and C; 4 (16 bytes of FP32) or 1 for any shape and stride.
    layout_a, layout_b: `row` or `col`, how the kernel reads A and B (C is row-major); the name carries them as
    a suffix (`_cr`, `_rc`, `_cc`) unless both are `row`.
    operands: `fp32`, or `packed` (halfhalf only: hi/lo split by a pass over memory; the name ends `_packed`).
    swizzle: CUTLASS's threadblock swizzle width (GemmIdentityThreadblockSwizzle<N>): N > 1 launches tiles in
    groups of up to N columns, so that blocks running together share panels of A and B in L2; the name carries
    `_wN` unless it is 1.
    """

    mode: str
    family: str = "sm80"
    threadblock: tuple[int, int, int] = (128, 128, 32)
    warp: tuple[int, int, int] = (64, 64, 32)
    stages: int = 3
    alignment: int = 4
    layout_a: str = "row"
    layout_b: str = "row"
    operands: str = "fp32"
    swizzle: int = 1

    # `tf32tf32_sm80_128x128x32_64x32x32_s3_a4[_w4][_cr][_packed]`
    NAME: ClassVar[NameGrammar] = NameGrammar(
        Word("mode", list(INSTRUCTION_SHAPES)),
        "_",
        Word("family", FAMILIES),
        "_",
        Extent("threadblock", 3),
        "_",
        Extent("warp", 3),
        "_s",
        Number("stages"),
        "_a",
        Number("alignment"),
        Optional("_w", Number("swizzle"), default={"swizzle": 1}),
        Optional(
            "_",
            Word("layout_a", _LAYOUT_LETTERS),
            Word("layout_b", _LAYOUT_LETTERS),
            default={"layout_a": "row", "layout_b": "row"},
        ),
        Optional(Word("operands", {"packed": "_packed"}), default={"operands": "fp32"}),
    )
    EXAMPLE_NAME: ClassVar[str] = "tf32tf32_sm80_128x128x32_64x32x32_s3_a4"

    def __post_init__(self):
        if self.mode not in INSTRUCTION_SHAPES:
            raise ValueError(f"mode={self.mode!r} is not one of {sorted(INSTRUCTION_SHAPES)}")
        if self.family not in FAMILIES:
            raise ValueError(f"family={self.family!r} is not one of {list(FAMILIES)}")
        self._check_extents(threadblock="mnk", warp="mnk")
        if isinstance(self.stages, bool) or not isinstance(self.stages, int) or self.stages < 2:
            raise ValueError(f"stages={self.stages!r} must be an integer of at least 2 (CUTLASS's pipelined mainloops)")
        if self.alignment not in (1, 2, 4):
            raise ValueError(f"alignment={self.alignment!r} must be 1, 2 or 4")
        for field in ("layout_a", "layout_b"):
            if getattr(self, field) not in LAYOUTS:
                raise ValueError(f"{field}={getattr(self, field)!r} is not one of {list(LAYOUTS)}")
        if self.swizzle not in SWIZZLES:
            raise ValueError(f"swizzle={self.swizzle!r} must be one of {list(SWIZZLES)}")
        if self.operands not in OPERANDS:
            raise ValueError(f"operands={self.operands!r} is not one of {list(OPERANDS)}")
        if self.operands == "packed" and self.mode not in _PACKABLE_MODES:
            raise ValueError(f"operands='packed' is for modes {list(_PACKABLE_MODES)}; got mode={self.mode!r}")

    @property
    def instruction(self) -> tuple[int, int, int]:
        return INSTRUCTION_SHAPES[self.mode]

    @property
    def shared_memory_bytes(self) -> int:
        """The multistage mainloop's A and B tiles, every stage (32-bit words, packed halfhalf ones too)."""
        bm, bn, bk = self.threadblock
        return (bm * bk + bk * bn) * 4 * self.stages


# (threadblock, warp, stages) when no tuned table applies. The corrected modes hold hi and lo fragments and two
# accumulators per MMA step, so their warp tiles are half as wide. The corrected picks are the fastest of the
# tiles measured at 4096-16384 on the H100 (docs/design-notes.md, corrected SGEMM on sm80+) until the sweep tunes
# them.
DEFAULT_TILES = {
    "tf32": ((128, 128, 32), (64, 64, 32), 3),
    "tf32tf32": ((128, 128, 32), (64, 32, 32), 3),
    "halfhalf": ((128, 128, 32), (32, 64, 32), 4),
    "markidis": ((128, 128, 32), (32, 64, 32), 3),
}


# The dispatch default per mode: halfhalf's pre-split packed operands beat its in-register split (73 -> 104 TFLOP/s
# at 8192^3; docs/design-notes.md, corrected SGEMM on sm80+).
DEFAULT_OPERANDS = {"halfhalf": "packed"}

# halfhalf (packed or not) spills with 32x64 and 64x32 warps reading B column-major (ptxas, sm_80 and sm_90a):
# smaller warps.
_COLUMN_MAJOR_B_TILES = {"halfhalf": ((128, 64, 32), (32, 32, 32), 4)}


def default_configs(
    mode: str,
    layout_a: str = "row",
    layout_b: str = "row",
    operands: str | None = None,
    shared_memory_bytes: int | None = None,
) -> list[KernelConfig]:
    """Variants `ext.gemm` uses when no tuned table applies: the vectorized one first, then one for any shape.
    shared_memory_bytes: the device's opt-in limit; stages are dropped until the tiles fit (sm86/sm89 have 99 KB,
    where halfhalf's 4 stages take 128)."""
    operands = operands or DEFAULT_OPERANDS.get(mode, "fp32")
    override = _COLUMN_MAJOR_B_TILES.get(mode) if layout_b == "col" else None
    threadblock, warp, stages = override or DEFAULT_TILES[mode]
    config = KernelConfig(mode, "sm80", threadblock, warp, stages, 4, layout_a, layout_b, operands)
    while shared_memory_bytes is not None and config.shared_memory_bytes > shared_memory_bytes and config.stages > 2:
        config = dataclasses.replace(config, stages=config.stages - 1)
    return [config, dataclasses.replace(config, alignment=1)]


# CUTLASS example 27's kernel (27_ampere_3xtf32_fast_accurate_tensorop_gemm.cu): its tiles, stages, alignment and
# layouts (A row-major, B column-major).
CUTLASS_3XTF32 = KernelConfig("cutlass3xtf32", "sm80", (128, 64, 16), (64, 32, 16), 3, 4, "row", "col")
