"""Block-scaled FP8 GEMM on Hopper (DeepSeek-V3's 1x128 / 128x128 scales) and its grouped form for
mixture-of-experts layers: `gemm_fp8_block`, `grouped_gemm_fp8`, the block quantizer and the FP64 references.

a8, scale_a = ext.quantize_fp8(x, granularity="block", block=(1, 128))      # (M, K) -> (M, ceil(K / 128))
w8, scale_w = ext.quantize_fp8(w, granularity="block", block=(128, 128))    # (N, K) -> (ceil(N / 128), ...)
y = ext.gemm_fp8(a8, w8, scale_a, scale_w)                                   # runs gemm_fp8_block
y = ext.grouped_gemm_fp8(a8, experts8, scale_a, experts_scale, offsets=ends)  # one launch over the experts
dw = ext.k_grouped_gemm_fp8(dy8_t, x8_t, scale_dy, scale_x, ends)             # their weight gradients (groups along K)
"""

from .api import dense_plan, dispatch_configs, gemm_fp8_block, grouped_gemm_fp8, is_block_scaled, k_grouped_gemm_fp8
from .config import Fp8BlockConfig
from .quantize import (
    block_scaled_reference,
    check_block,
    dequantize,
    grouped_reference,
    k_grouped_reference,
    quantize_block,
)

__all__ = [
    "Fp8BlockConfig",
    "block_scaled_reference",
    "check_block",
    "dense_plan",
    "dequantize",
    "dispatch_configs",
    "gemm_fp8_block",
    "grouped_gemm_fp8",
    "grouped_reference",
    "is_block_scaled",
    "k_grouped_gemm_fp8",
    "k_grouped_reference",
    "quantize_block",
]
