"""cutlass_ext: CUTLASS GEMM kernels that make low-precision Tensor Cores do full-precision work.

    import cutlass_ext as ext
    c = ext.gemm(a, b, mode="tf32")
"""

from . import numerics
from .config import KernelConfig
from .gemm import MODES, gemm

__all__ = ["KernelConfig", "MODES", "gemm", "numerics"]
__version__ = "0.1.0"
