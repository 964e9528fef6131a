"""The lowbit family registered with `cutlass_ext.families`: the low-bit-accumulator GEMM (SIMT, any arch)."""

from ..families import Family
from ..toolchain import kernels_dir
from .kernel import LowbitKernelConfig, render_instance

FAMILY = Family(
    name="lowbit",
    config=LowbitKernelConfig,
    template=kernels_dir() / "lowbit_gemm.cu.in",
    render_instance=render_instance,
    parts=7,  # the forward, and each STE's gradient kernels with and without underflow, side by side (lowbit_gemm.cuh)
    filters="cutlass_ext.lowbit.filters",
    space="cutlass_ext.lowbit.space",
    measure="cutlass_ext.lowbit.measure",
)
