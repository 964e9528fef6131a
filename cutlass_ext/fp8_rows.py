"""Per-row (per-token) FP8 quantization in one pass on the GPU, as the `cutlass_ext::quantize_fp8_rows` op.

`ext.quantize_fp8(x, granularity="row")` takes about nine elementwise and reduction kernels over x; at decode
sizes they cost as much as the FP8 GEMM they feed. Here one Triton program per row finds the row's largest
magnitude, writes its scale and the FP8 values, reading the row twice (the second time from cache): the same bits
as `quantize_fp8` (IEEE division, clamping, then round-to-nearest-even conversion; NaN propagated through the
maxima). Without Triton, or for CPU tensors, the op runs `quantize_fp8` itself.

Every division is `tl.math.div_rn`, PTX div.rn.f32: the correctly rounded quotient, subnormals kept, as PyTorch's
CUDA division by a tensor. Triton's `/` is div.full.f32, up to 2 ulp off.
"""

from __future__ import annotations

import functools

import torch

from .compiling import custom_op
from .fp8 import quantize_fp8

_INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
_COLUMNS_PER_STEP = 2048  # a program's vector along the row: 16 values per thread at 4 warps


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def quantize_rows(
        x_ptr,
        q_ptr,
        s_ptr,
        columns,
        x_row_stride,
        q_row_stride,
        LARGEST: tl.constexpr,
        TINY: tl.constexpr,
        STEP: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        x_row, q_row = x_ptr + row * x_row_stride, q_ptr + row * q_row_stride
        largest = tl.zeros([STEP], dtype=tl.float32)
        nans = tl.zeros([STEP], dtype=tl.int32)
        for start in range(0, columns, STEP):
            c = start + tl.arange(0, STEP)
            x = tl.load(x_row + c, mask=c < columns, other=0.0).to(tl.float32)
            largest = tl.maximum(largest, tl.abs(x))
            nans += (x != x).to(tl.int32)  # Triton's maxima skip NaN; quantize_fp8's amax keeps it
        amax = tl.where(tl.sum(nans, axis=0) > 0, float("nan"), tl.max(largest, axis=0))
        scale = tl.maximum(tl.math.div_rn(amax, LARGEST), TINY, propagate_nan=tl.PropagateNan.ALL)
        tl.store(s_ptr + row, scale)
        for start in range(0, columns, STEP):
            c = start + tl.arange(0, STEP)
            x = tl.load(x_row + c, mask=c < columns, other=0.0).to(tl.float32)
            scaled = tl.math.div_rn(x, scale)
            clamped = tl.minimum(
                tl.maximum(scaled, -LARGEST, propagate_nan=tl.PropagateNan.ALL),
                LARGEST,
                propagate_nan=tl.PropagateNan.ALL,
            )
            tl.store(q_row + c, clamped.to(q_ptr.dtype.element_ty), mask=c < columns)

    return quantize_rows


@functools.cache
def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@custom_op("cutlass_ext::quantize_fp8_rows", mutates_args=())
def quantize_fp8_rows(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_fp8, scale (rows, 1) float32) for a 2-D x: `quantize_fp8(x, dtype, granularity="row")`, in one pass."""
    if not (x.is_cuda and _triton_available()):
        return quantize_fp8(x, dtype, granularity="row")
    if x.dtype not in _INPUT_DTYPES:
        raise TypeError(f"x must be one of {list(_INPUT_DTYPES)}; got {x.dtype}")
    if dtype not in _FP8_DTYPES:
        raise TypeError(f"dtype must be one of {list(_FP8_DTYPES)}; got {dtype}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D (rows, columns); got shape {tuple(x.shape)}")
    rows, columns = x.shape
    if x.stride(1) != 1:
        x = x.contiguous()
    x_fp8 = torch.empty((rows, columns), dtype=dtype, device=x.device)
    scale = torch.empty((rows, 1), dtype=torch.float32, device=x.device)
    if rows:
        with torch.cuda.device(x.device):
            _kernel()[(rows,)](
                x,
                x_fp8,
                scale,
                columns,
                x.stride(0),
                x_fp8.stride(0),
                LARGEST=torch.finfo(dtype).max,
                TINY=torch.finfo(torch.float32).tiny,
                STEP=_COLUMNS_PER_STEP,
                num_warps=4,
            )
    return x_fp8, scale


@quantize_fp8_rows.register_fake
def _quantize_fp8_rows_fake(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape, dtype=dtype), x.new_empty((x.shape[0], 1), dtype=torch.float32)
