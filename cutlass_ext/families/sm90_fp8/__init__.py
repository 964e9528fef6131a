"""The sm90_fp8 family: FP8 GEMM (CUTLASS 3.x warp-specialized wgmma + TMA), built for sm_90a only."""

from .. import Family
from .config import Fp8Config
from .render import TEMPLATE, defines, render_instance

FAMILY = Family(
    name="sm90_fp8",
    config=Fp8Config,
    template=TEMPLATE,
    render_instance=render_instance,
    archs=("90a",),
    defines=defines,
    cubin=True,
    torch_binding=True,
    filters="cutlass_ext.families.sm90_fp8.filters",
    space="cutlass_ext.families.sm90_fp8.space",
    measure="cutlass_ext.families.sm90_fp8.measure",
)
