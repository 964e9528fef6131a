"""The sm90 family: the Hopper corrected SGEMM (CUTLASS 3.x wgmma + TMA on hi/lo planes), built for sm_90a only."""

from .. import Family
from .config import Sm90Config
from .render import TEMPLATE, render_instance

FAMILY = Family(
    name="sm90",
    config=Sm90Config,
    template=TEMPLATE,
    render_instance=render_instance,
    archs=("90a",),
    cubin=True,
    cubin_nvcc_part="CUTLASS_EXT_OPERAND_PASS_CODE",  # the operand pass's kernels, launched with <<<>>>
    torch_binding=True,
    filters="cutlass_ext.families.sm90.filters",
    space="cutlass_ext.families.sm90.space",
    measure="cutlass_ext.families.sm90.measure",
)
