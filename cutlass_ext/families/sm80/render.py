"""One sm80 variant's launchers, rendered from sm80_gemm_instance.in."""

from __future__ import annotations

from pathlib import Path
from string import Template

from .config import KernelConfig

TEMPLATE = Path(__file__).with_name("sm80_gemm.cu.in")
_INSTANCE = Template(TEMPLATE.with_name("sm80_gemm_instance.in").read_text())
_LAYOUT_TYPES = {"row": "RowMajor", "col": "ColumnMajor"}
_MODE_TAGS = {
    ("tf32", "fp32"): "ModeTf32",
    ("tf32tf32", "fp32"): "ModeTf32Tf32",
    ("halfhalf", "fp32"): "ModeHalfHalf",
    ("halfhalf", "packed"): "ModeHalfHalfPacked",
    ("markidis", "fp32"): "ModeMarkidis",
    ("cutlass3xtf32", "fp32"): "ModeCutlass3xTf32",
}


def render_instance(config: KernelConfig) -> str:
    (block_m, block_n, block_k), (warp_m, warp_n, warp_k) = config.threadblock, config.warp
    inst_m, inst_n, inst_k = config.instruction
    return _INSTANCE.substitute(
        name=config.name,
        mode_tag=_MODE_TAGS[config.mode, config.operands],
        block_m=block_m,
        block_n=block_n,
        block_k=block_k,
        warp_m=warp_m,
        warp_n=warp_n,
        warp_k=warp_k,
        inst_m=inst_m,
        inst_n=inst_n,
        inst_k=inst_k,
        stages=config.stages,
        swizzle=config.swizzle,
        alignment=config.alignment,
        layout_a=_LAYOUT_TYPES[config.layout_a],
        layout_b=_LAYOUT_TYPES[config.layout_b],
    )
