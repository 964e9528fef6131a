"""The sm80 family: CUTLASS 2.x mma.sync kernels of the corrected SGEMM modes and TF32 (sm80 and later)."""

from .. import Family
from .config import KernelConfig
from .render import TEMPLATE, render_instance

FAMILY = Family(
    name="sm80",
    config=KernelConfig,
    template=TEMPLATE,
    render_instance=render_instance,
    torch_binding=True,
    filters="cutlass_ext.families.sm80.filters",
    space="cutlass_ext.families.sm80.space",
    measure="cutlass_ext.families.sm80.measure",
)
