"""cutlass_ext: CUTLASS GEMM kernels that make low-precision Tensor Cores do full-precision work.

import cutlass_ext as ext
c = ext.gemm(a, b, mode="tf32tf32")      # FP32 accuracy on the Tensor Cores
layer = ext.nn.Linear(1024, 1024, mode="halfhalf")
"""

from . import nn, numerics
from .config import KernelConfig
from .gemm import MODES, gemm
from .tuned import set_tuned_table

__all__ = ["MODES", "KernelConfig", "gemm", "nn", "numerics", "set_tuned_table"]
__version__ = "0.1.0"
