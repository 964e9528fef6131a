"""The block quantizer in one pass over x on the GPU (Triton): each program reads a tile of 128 columns, finds its
blocks' largest magnitudes, writes their scales and the FP8 values. Bit for bit `quantize.quantize_block_torch`
(IEEE division, round-to-nearest-even conversion after clamping, NaN propagated through the maxima).

Every division is `tl.math.div_rn`, PTX div.rn.f32: the correctly rounded quotient, subnormals kept, as PyTorch's
CUDA division by a tensor. Triton's `/` is div.full.f32, up to 2 ulp off.

On Hopper each program first lets the next kernel launch (griddepcontrol.launch_dependents): a block-scaled GEMM
launched programmatically after it (`_pdl` variants) then runs its prologue and asks L2 for its weights while the
quantizer works, and waits for the quantizer's end before it reads what it wrote. Kernels launched plainly ignore
the signal."""

from __future__ import annotations

import functools
import math

import torch

from .. import device as device_info

_ROWS_PER_PROGRAM = {1: 32, 128: 128}  # a (1, 128) program quantizes 32 rows' blocks; a (128, 128) one its block
# Signal the next kernel's launch at each program's start (on Hopper, where the `_pdl` GEMMs run; the benchmark
# turns it off to time its worth).
LAUNCH_DEPENDENTS_EARLY = True


@functools.cache
def _kernel():
    import triton
    import triton.language as tl
    import triton.language.extra.cuda  # noqa: F401  (tl.extra.cuda.gdc_launch_dependents)

    @triton.jit
    def quantize(
        x_ptr,
        q_ptr,
        s_ptr,
        rows,
        columns,
        x_batch_stride,
        x_row_stride,
        q_batch_stride,
        q_row_stride,
        s_batch_stride,
        s_row_stride,
        LARGEST: tl.constexpr,
        TINY: tl.constexpr,
        ROWS: tl.constexpr,
        BLOCK_ROWS: tl.constexpr,
        OUT: tl.constexpr,
        LAUNCH_DEPENDENTS: tl.constexpr,
    ):
        if LAUNCH_DEPENDENTS:
            tl.extra.cuda.gdc_launch_dependents()
        row_program, column_block, batch = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        r = row_program * ROWS + tl.arange(0, ROWS)
        c = column_block * 128 + tl.arange(0, 128)
        inside = (r[:, None] < rows) & (c[None, :] < columns)
        x_tile = x_ptr + batch.to(tl.int64) * x_batch_stride + r[:, None].to(tl.int64) * x_row_stride + c[None, :]
        x = tl.load(x_tile, mask=inside, other=0.0).to(tl.float32)
        magnitude = tl.abs(x)
        nans = (x != x).to(tl.int32)  # Triton's maxima skip NaN; the definition's amax keeps it
        if BLOCK_ROWS == 1:
            amax = tl.where(tl.sum(nans, axis=1) > 0, float("nan"), tl.max(magnitude, axis=1))
            scale = tl.maximum(tl.math.div_rn(amax, LARGEST), TINY, propagate_nan=tl.PropagateNan.ALL)
            s_tile = s_ptr + batch.to(tl.int64) * s_batch_stride + r.to(tl.int64) * s_row_stride + column_block
            tl.store(s_tile, scale, mask=r < rows)
            scaled = tl.math.div_rn(x, scale[:, None])
        else:
            amax = tl.where(tl.sum(tl.sum(nans, axis=1), axis=0) > 0, float("nan"), tl.max(tl.max(magnitude, axis=1)))
            scale = tl.maximum(tl.math.div_rn(amax, LARGEST), TINY, propagate_nan=tl.PropagateNan.ALL)
            tl.store(s_ptr + batch.to(tl.int64) * s_batch_stride + row_program * s_row_stride + column_block, scale)
            scaled = tl.math.div_rn(x, scale)
        clamped = tl.minimum(
            tl.maximum(scaled, -LARGEST, propagate_nan=tl.PropagateNan.ALL), LARGEST, propagate_nan=tl.PropagateNan.ALL
        )
        q_tile = q_ptr + batch.to(tl.int64) * q_batch_stride + r[:, None].to(tl.int64) * q_row_stride + c[None, :]
        tl.store(q_tile, clamped.to(OUT), mask=inside)

    return quantize


def available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def quantize_block_kernel(x: torch.Tensor, dtype: torch.dtype, block: tuple[int, int]):
    """quantize.quantize_block for a CUDA x, in one pass (the same bits)."""
    import triton.language as tl

    rows_per_block = block[0]
    *batch, rows, columns = x.shape
    x3 = x.reshape(math.prod(batch), rows, columns)  # not -1: x may be empty
    if x3.stride(-1) != 1:
        x3 = x3.contiguous()
    count = x3.shape[0]
    row_blocks, column_blocks = -(-rows // rows_per_block), -(-columns // 128)
    q = torch.empty((count, rows, columns), dtype=dtype, device=x.device)
    scales = torch.empty((count, row_blocks, column_blocks), dtype=torch.float32, device=x.device)
    if q.numel():
        per_program = _ROWS_PER_PROGRAM[rows_per_block]
        grid = (-(-rows // per_program), column_blocks, count)
        _kernel()[grid](
            x3,
            q,
            scales,
            rows,
            columns,
            x3.stride(0),
            x3.stride(1),
            q.stride(0),
            q.stride(1),
            scales.stride(0),
            scales.stride(1),
            LARGEST=torch.finfo(dtype).max,
            TINY=torch.finfo(torch.float32).tiny,
            ROWS=per_program,
            BLOCK_ROWS=rows_per_block,
            OUT=tl.float8e4nv if dtype == torch.float8_e4m3fn else tl.float8e5,
            LAUNCH_DEPENDENTS=LAUNCH_DEPENDENTS_EARLY and device_info.info(x.device.index).hopper,  # read once
            num_warps=8,
        )
    return q.reshape(*batch, rows, columns), scales.reshape(*batch, row_blocks, column_blocks)
