"""The sm90_fp8_block family registered with `cutlass_ext.families`: block-scaled FP8 GEMM, dense and grouped
(CUTLASS 3.x blockwise-scaled wgmma + TMA), built for sm_90a only."""

from ..families import Family
from ..toolchain import kernels_dir
from .config import FAMILY as NAME
from .config import Fp8BlockConfig, render_instance

FAMILY = Family(
    name=NAME,
    config=Fp8BlockConfig,
    template=kernels_dir() / "sm90_fp8_block.cu.in",
    render_instance=render_instance,
    archs=("90a",),
    filters="cutlass_ext.fp8_block.filters",
    space="cutlass_ext.fp8_block.space",
    measure="cutlass_ext.fp8_block.measure",
)
