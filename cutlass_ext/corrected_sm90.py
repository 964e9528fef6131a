"""The Hopper path of `gemm` for `tf32tf32` and `halfhalf`: one pass splits A and Bᵀ into hi/lo planes (K-major,
rows padded to 16 bytes, halfhalf's range scaling applied on the way), then a sm90 variant multiplies the planes
with wgmma and promotes hi·hi into FP32 registers (kernels/sm90_corrected_gemm.cuh)."""

from __future__ import annotations

import torch

from . import ops, registry
from .families.sm90.config import DEFAULTS

_FORMATS = {"tf32tf32": ops.PLANES_TF32, "halfhalf": ops.PLANES_HALF}


def supports_shapes(a_dim: int, b_dim: int, n: int) -> bool:
    """Whether this path takes such operands on a Hopper GPU: N a multiple of 4 (the output's TMA store moves
    16-byte rows), and a batch only where B has one too or A folds into one matrix (a 2-D B)."""
    return isinstance(n, int) and n % 4 == 0 and not (a_dim == 2 and b_dim == 3)


def default_variants(mode: str) -> list[str]:
    return [DEFAULTS[mode].name]


def product(
    a: torch.Tensor, b: torch.Tensor, mode: str, variants: list[str] | None = None, bias=None, alpha: float = 1.0
) -> torch.Tensor:
    """A·B for float32 CUDA a (…, M, K) and b (…, K, N) that `supports_shapes` accepts on a Hopper GPU, through the
    first of `variants` (SplitConfig names of `mode`) that can run it; the default variant if none are given.
    bias (N,) and alpha: alpha·A·B + bias, through variants with the bias epilogue."""
    variants = variants or default_variants(mode)
    if not torch.compiler.is_compiling():
        registry.ensure_names_registered(variants, a.device)  # loads the split pass with the kernels
    folded = a.dim() == 3 and b.dim() == 2  # one (batch·M, K) matrix times a shared B
    a_rows = a.reshape(-1, a.shape[-1]) if folded else a
    b_t = b.mT  # (…, N, K): both operands K-major, as TF32 wgmma wants them
    format = _FORMATS[mode]
    if mode == "halfhalf":
        row_shift = ops.range_shift(a_rows, -1)  # (…, M, 1), as scaling.fp16_range_shift
        column_shift = ops.range_shift(b, -2)  # (…, 1, N)
        a_hi, a_lo = ops.split_planes(a_rows, row_shift, format)
        b_hi, b_lo = ops.split_planes(b_t, column_shift.mT, format)
    else:
        row_shift = column_shift = None
        a_hi, a_lo = ops.split_planes(a_rows, None, format)
        b_hi, b_lo = ops.split_planes(b_t, None, format)
    c = ops.gemm_split(a_hi, a_lo, b_hi, b_lo, row_shift, column_shift, variants, bias, alpha)
    return c.view(*a.shape[:-1], c.shape[-1]) if folded else c
