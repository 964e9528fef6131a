"""One sm90_fp8 variant's launchers, rendered from sm90_fp8_gemm_instance.in; `kernel_fields`, the template fields
both FP8 families (this one and sm90_fp8_block) spell alike."""

from __future__ import annotations

from pathlib import Path
from string import Template

from .config import Fp8Config

TEMPLATE = Path(__file__).with_name("sm90_fp8_gemm.cu.in")
_INSTANCE = Template(TEMPLATE.with_name("sm90_fp8_gemm_instance.in").read_text())
ELEMENTS = {
    "e4m3": "cutlass::float_e4m3_t",
    "e5m2": "cutlass::float_e5m2_t",
    "bf16": "cutlass::bfloat16_t",
    "fp16": "cutlass::half_t",
    "fp32": "float",
}
SCHEDULES = {"cooperative": "ScheduleCooperative", "pingpong": "SchedulePingpong"}
_RASTERS = {"auto": "Raster::Auto", "m": "Raster::AlongM", "n": "Raster::AlongN"}
DECOMPOSITIONS = {
    "persistent": "DecomposePersistent",
    "streamk": "DecomposeStreamK",
    "splitk": "DecomposeSplitK",
    "dynamic": "DecomposeDynamic",
}


def _flag(value: bool) -> str:
    return "true" if value else "false"


def kernel_fields(config) -> dict:
    """An FP8 config's name, element types, tile, cluster and schedule as its instance template spells them (the
    CUTLASS types, the tile and cluster extents one by one, the schedule struct of the family's header)."""
    (tile_m, tile_n, tile_k), (cluster_m, cluster_n) = config.tile, config.cluster
    return {
        "name": config.name,
        "element_a": ELEMENTS[config.a_dtype],
        "element_b": ELEMENTS[config.b_dtype],
        "element_d": ELEMENTS[config.out_dtype],
        "tile_m": tile_m,
        "tile_n": tile_n,
        "tile_k": tile_k,
        "cluster_m": cluster_m,
        "cluster_n": cluster_n,
        "schedule": SCHEDULES[config.schedule],
    }


def render_instance(config: Fp8Config) -> str:
    return _INSTANCE.substitute(
        **kernel_fields(config),
        fast_accum=_flag(config.accum == "fast"),
        decomposition=DECOMPOSITIONS[config.scheduler],
        splits=config.splits,
        swizzle=config.swizzle,
        raster=_RASTERS[config.raster],
        promotion=config.promotion,
        swap_ab=_flag(config.swap_ab),
        l2_prefetch=config.l2_prefetch,
        turns=_flag(config.turns),
        stage_epilogue=_flag(config.stage_epilogue),
        weights_first=_flag(config.weights_first),
    )


def defines(config: Fp8Config) -> str:
    """Programmatic dependent launch is compiled in per translation unit (not with CUTLASS 4.2's stream-K)."""
    return "#define CUTLASS_ENABLE_GDC_FOR_SM90 1\n" if config.programmatic_launch else ""
