"""The optim family registered with `cutlass_ext.families`: the fused multi-tensor 16-bit optimizer step."""

from ..families import Family
from ..toolchain import kernels_dir
from .config import OptimConfig, render_optim_instance

FAMILY = Family(
    name="optim",
    config=OptimConfig,
    template=kernels_dir() / "optim_step.cu.in",
    render_instance=render_optim_instance,
)
