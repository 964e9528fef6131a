"""One sm90_fp8 variant's launchers, rendered from sm90_fp8_gemm_instance.in."""

from __future__ import annotations

from pathlib import Path
from string import Template

from .config import Fp8Config

TEMPLATE = Path(__file__).with_name("sm90_fp8_gemm.cu.in")
_INSTANCE = Template(TEMPLATE.with_name("sm90_fp8_gemm_instance.in").read_text())
_ELEMENTS = {
    "e4m3": "cutlass::float_e4m3_t",
    "e5m2": "cutlass::float_e5m2_t",
    "bf16": "cutlass::bfloat16_t",
    "fp16": "cutlass::half_t",
    "fp32": "float",
}
_SCHEDULES = {"cooperative": "ScheduleCooperative", "pingpong": "SchedulePingpong"}
_RASTERS = {"auto": "Raster::Auto", "m": "Raster::AlongM", "n": "Raster::AlongN"}
_DECOMPOSITIONS = {
    "persistent": "DecomposePersistent",
    "streamk": "DecomposeStreamK",
    "splitk": "DecomposeSplitK",
    "dynamic": "DecomposeDynamic",
}


def _flag(value: bool) -> str:
    return "true" if value else "false"


def render_instance(config: Fp8Config) -> str:
    (tile_m, tile_n, tile_k), (cluster_m, cluster_n) = config.tile, config.cluster
    return _INSTANCE.substitute(
        name=config.name,
        element_a=_ELEMENTS[config.a_dtype],
        element_b=_ELEMENTS[config.b_dtype],
        element_d=_ELEMENTS[config.out_dtype],
        tile_m=tile_m,
        tile_n=tile_n,
        tile_k=tile_k,
        cluster_m=cluster_m,
        cluster_n=cluster_n,
        schedule=_SCHEDULES[config.schedule],
        fast_accum=_flag(config.accum == "fast"),
        decomposition=_DECOMPOSITIONS[config.scheduler],
        splits=config.splits,
        swizzle=config.swizzle,
        raster=_RASTERS[config.raster],
        promotion=config.promotion,
        swap_ab=_flag(config.swap_ab),
        l2_prefetch=config.l2_prefetch,
        turns=_flag(config.turns),
        stage_epilogue=_flag(config.stage_epilogue),
        weights_first=_flag(config.weights_first),
        buffer_epilogue=_flag(config.buffer_epilogue),
    )


# The FP8 wgmma n that CuTe defines by default; the others (multiples of 8 up to 256) come with
# CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED, whose ~130k lines of definitions cost about a third of a variant's compile.
DEFAULT_WGMMA_N = (8, 16, 32, 64, 96, 128, 192, 256)


def defines(config: Fp8Config) -> str:
    """Per translation unit: programmatic dependent launch (not with CUTLASS 4.2's stream-K), and CuTe's extended
    wgmma shapes only where the tile's n needs one (without them CollectiveBuilder would cut a 144- or 160-column
    tile into n = 16 or 32 atoms; a tile n of the default set gets the same atom either way)."""
    gdc = "#define CUTLASS_ENABLE_GDC_FOR_SM90 1\n" if config.programmatic_launch else ""
    extended = "" if config.tile[1] in DEFAULT_WGMMA_N else "#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED\n"
    return gdc + extended
