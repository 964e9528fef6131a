"""cutlass_ext: CUTLASS GEMM kernels that make low-precision Tensor Cores do full-precision work.

import cutlass_ext as ext
c = ext.gemm(a, b, mode="tf32tf32")      # FP32 accuracy on the Tensor Cores
layer = ext.nn.Linear(1024, 1024, mode="halfhalf")
a8, scale_a = ext.quantize_fp8(x, granularity="row")
y = ext.gemm_fp8(a8, w8, scale_a, scale_w)  # FP8 on Hopper, y ≈ x @ w.T in bf16
y = ext.lowbit.matmul(a, b, ext.lowbit.LowbitConfig(ext.lowbit.LowbitFormat.make(7, 4)))  # low-bit accumulators
optimizer = ext.optim.AdamW(model.parameters(), update="stochastic")  # BF16 weights, reproducible SR
"""

from . import lowbit, nn, numerics, optim, requirements
from .families.sm80.config import KernelConfig
from .families.sm90_fp8.config import Fp8Config
from .fp8 import gemm_fp8, quantize_fp8
from .fp8_block import grouped_gemm_fp8, k_grouped_gemm_fp8
from .gemm import MODES, gemm
from .precision import precision, set_precision
from .tuned import set_tuned_table

__all__ = [
    "MODES",
    "Fp8Config",
    "KernelConfig",
    "gemm",
    "gemm_fp8",
    "grouped_gemm_fp8",
    "k_grouped_gemm_fp8",
    "lowbit",
    "nn",
    "numerics",
    "optim",
    "precision",
    "quantize_fp8",
    "set_precision",
    "set_tuned_table",
]
__version__ = "0.1.0"

requirements.check_torch()
