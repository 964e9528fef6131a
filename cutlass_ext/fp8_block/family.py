"""The sm90_fp8_block family registered with `cutlass_ext.families`: block-scaled FP8 GEMM, dense and grouped
(CUTLASS 3.x blockwise-scaled wgmma + TMA), built for sm_90a only."""

from ..families import Family
from ..families.sm90_fp8.render import DEFAULT_WGMMA_N
from ..toolchain import kernels_dir
from .config import FAMILY as NAME
from .config import Fp8BlockConfig, render_instance


def defines(config: Fp8BlockConfig) -> str:
    """Per translation unit: programmatic dependent launch (CUTLASS's kernels wait and trigger only with
    CUTLASS_ENABLE_GDC_FOR_SM90), and CuTe's extended wgmma shapes only for a tile whose n needs one (176 across
    weight blocks): without them CollectiveBuilder cuts it into n = 16 atoms, and every other tile parses less."""
    gdc = "#define CUTLASS_ENABLE_GDC_FOR_SM90 1\n" if config.programmatic else ""
    return gdc + ("" if config.tile[1] in DEFAULT_WGMMA_N else "#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED\n")


FAMILY = Family(
    name=NAME,
    config=Fp8BlockConfig,
    template=kernels_dir() / "sm90_fp8_block.cu.in",
    render_instance=render_instance,
    defines=defines,
    archs=("90a",),
    filters="cutlass_ext.fp8_block.filters",
    space="cutlass_ext.fp8_block.space",
    measure="cutlass_ext.fp8_block.measure",
)
