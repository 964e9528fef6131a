"""Render `KernelConfig`s into a torch-free CUDA translation unit from the templates in `kernels/`."""

from __future__ import annotations

from string import Template

from .config import KernelConfig
from .toolchain import kernels_dir

_LAYOUT_TYPES = {"row": "RowMajor", "col": "ColumnMajor"}
_MODE_TAGS = {
    ("tf32", "fp32"): "ModeTf32",
    ("tf32tf32", "fp32"): "ModeTf32Tf32",
    ("halfhalf", "fp32"): "ModeHalfHalf",
    ("halfhalf", "packed"): "ModeHalfHalfPacked",
    ("markidis", "fp32"): "ModeMarkidis",
}


def _template(filename: str) -> Template:
    return Template((kernels_dir() / filename).read_text())


def render_instance(config: KernelConfig) -> str:
    (block_m, block_n, block_k), (warp_m, warp_n, warp_k) = config.threadblock, config.warp
    inst_m, inst_n, inst_k = config.instruction
    return _template("sm80_gemm_instance.in").substitute(
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


def render_library(configs: list[KernelConfig]) -> str:
    """One translation unit exporting a launcher per config (several per unit amortise header parsing)."""
    if not configs:
        raise ValueError("configs must name at least one KernelConfig")
    families = {c.family for c in configs}
    if families != {"sm80"}:
        raise ValueError(f"one translation unit holds one family; got {sorted(families)}")
    return _template("sm80_gemm.cu.in").substitute(
        names=", ".join(c.name for c in configs),
        instances="".join(render_instance(c) for c in configs),
    )
