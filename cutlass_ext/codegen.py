"""Render `KernelConfig`s into a torch-free CUDA translation unit from the templates in `kernels/`."""

from __future__ import annotations

import re
from string import Template

from .config import KernelConfig
from .fp8_config import Fp8Config
from .lowbit.kernel import render_instance as render_lowbit_instance
from .optim.config import render_optim_instance
from .split_config import SplitConfig
from .toolchain import kernels_dir

_LOCAL_INCLUDE = re.compile(r'#include "([^"/]+)"')  # kernels/ headers, not CUTLASS's
_LAYOUT_TYPES = {"row": "RowMajor", "col": "ColumnMajor"}
_MODE_TAGS = {
    ("tf32", "fp32"): "ModeTf32",
    ("tf32tf32", "fp32"): "ModeTf32Tf32",
    ("halfhalf", "fp32"): "ModeHalfHalf",
    ("halfhalf", "packed"): "ModeHalfHalfPacked",
    ("markidis", "fp32"): "ModeMarkidis",
    ("cutlass3xtf32", "fp32"): "ModeCutlass3xTf32",
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


_FP8_ELEMENTS = {
    "e4m3": "cutlass::float_e4m3_t",
    "e5m2": "cutlass::float_e5m2_t",
    "bf16": "cutlass::bfloat16_t",
    "fp16": "cutlass::half_t",
    "fp32": "float",
}
_FP8_SCHEDULES = {"cooperative": "ScheduleCooperative", "pingpong": "SchedulePingpong"}
_FP8_RASTERS = {"auto": "Raster::Auto", "m": "Raster::AlongM", "n": "Raster::AlongN"}
_FP8_DECOMPOSITIONS = {
    "persistent": "DecomposePersistent",
    "streamk": "DecomposeStreamK",
    "splitk": "DecomposeSplitK",
    "dynamic": "DecomposeDynamic",
}


def render_fp8_instance(config: Fp8Config) -> str:
    (tile_m, tile_n, tile_k), (cluster_m, cluster_n) = config.tile, config.cluster
    return _template("sm90_fp8_gemm_instance.in").substitute(
        name=config.name,
        element_a=_FP8_ELEMENTS[config.a_dtype],
        element_b=_FP8_ELEMENTS[config.b_dtype],
        element_d=_FP8_ELEMENTS[config.out_dtype],
        tile_m=tile_m,
        tile_n=tile_n,
        tile_k=tile_k,
        cluster_m=cluster_m,
        cluster_n=cluster_n,
        schedule=_FP8_SCHEDULES[config.schedule],
        fast_accum="true" if config.accum == "fast" else "false",
        decomposition=_FP8_DECOMPOSITIONS[config.scheduler],
        splits=config.splits,
        swizzle=config.swizzle,
        raster=_FP8_RASTERS[config.raster],
        promotion=config.promotion,
        swap_ab="true" if config.swap_ab else "false",
        l2_prefetch=config.l2_prefetch,
        turns="true" if config.turns else "false",
        stage_epilogue="true" if config.stage_epilogue else "false",
        weights_first="true" if config.weights_first else "false",
    )


_SPLIT_MODES = {"tf32tf32": "SplitTf32Tf32", "halfhalf": "SplitHalfHalf"}
_SPLIT_SCHEDULES = {"cooperative": "SplitCooperative", "pingpong": "SplitPingpong"}


def render_split_instance(config: SplitConfig) -> str:
    (tile_m, tile_n, tile_k), (cluster_m, cluster_n) = config.tile, config.cluster
    return _template("sm90_corrected_gemm_instance.in").substitute(
        name=config.name,
        mode_tag=_SPLIT_MODES[config.mode],
        tile_m=tile_m,
        tile_n=tile_n,
        tile_k=tile_k,
        cluster_m=cluster_m,
        cluster_n=cluster_n,
        schedule=_SPLIT_SCHEDULES[config.schedule],
        swizzle=config.swizzle,
        promotion=config.promotion,
    )


# family -> (library template, instance renderer)
_FAMILIES = {
    "sm80": ("sm80_gemm.cu.in", render_instance),
    "sm90_fp8": ("sm90_fp8_gemm.cu.in", render_fp8_instance),
    "sm90": ("sm90_corrected_gemm.cu.in", render_split_instance),
    "optim": ("optim_step.cu.in", render_optim_instance),
    "lowbit": ("lowbit_gemm.cu.in", render_lowbit_instance),
}


def source_files(family: str) -> list:
    """The files of kernels/ a library of this family is made of: its templates and every kernels/ header they
    include, transitively (what its cache key covers: editing one family's header rebuilds only that family)."""
    library_template, _ = _FAMILIES[family]
    instance_template = library_template.replace(".cu.in", "_instance.in")
    pending = [kernels_dir() / library_template, kernels_dir() / instance_template]
    found = []
    while pending:
        path = pending.pop()
        if path in found or not path.is_file():
            continue
        found.append(path)
        pending.extend(kernels_dir() / name for name in _LOCAL_INCLUDE.findall(path.read_text()))
    return sorted(found)


def translation_unit_key(config) -> tuple:
    """Configs that can share a translation unit have equal keys: one family and, for FP8, one launch mode."""
    return (config.family, getattr(config, "programmatic_launch", False))


def render_library(configs: list[KernelConfig | Fp8Config | SplitConfig]) -> str:
    """One translation unit exporting a launcher per config (several per unit amortise header parsing)."""
    if not configs:
        raise ValueError("configs must name at least one kernel config")
    keys = {translation_unit_key(c) for c in configs}
    families = {family for family, _ in keys}
    if len(families) != 1 or not families <= set(_FAMILIES):
        raise ValueError(f"one translation unit holds one family of {sorted(_FAMILIES)}; got {sorted(families)}")
    if len(keys) != 1:
        raise ValueError("FP8 variants with and without programmatic launch need separate translation units")
    ((family, programmatic_launch),) = keys
    library_template, render = _FAMILIES[family]
    return _template(library_template).substitute(
        names=", ".join(c.name for c in configs),
        instances="".join(render(c) for c in configs),
        defines="#define CUTLASS_ENABLE_GDC_FOR_SM90 1\n" if programmatic_launch else "",
    )
