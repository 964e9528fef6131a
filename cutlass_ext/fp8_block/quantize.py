"""Block quantization to FP8 (DeepSeek-V3's fine-grained scheme: 1x128 tiles of activations, 128x128 blocks of
weights) and the plain-PyTorch reference of the block-scaled product that the kernels are tested against.

Scale layout (what the kernels read): x (…, R, K) quantized in blocks of (br, 128) has float32 scales of shape
(…, ceil(R / br), ceil(K / 128)), row-major and dense. K need not be a multiple of 128: the last k-block is
partial, its scale covers the K mod 128 columns that exist (the kernels read zeros past K). Likewise for R.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..arguments import is_integer
from ..compiling import custom_op
from . import quantize_kernel

SCALE_BLOCK_K = 128
BLOCKS = ((1, 128), (128, 128))


def check_block(block) -> tuple[int, int]:
    if isinstance(block, (tuple, list)) or (hasattr(block, "tolist") and getattr(block, "ndim", 0) == 1):
        block = tuple(block.tolist() if hasattr(block, "tolist") else block)  # a numpy array or 1-D tensor too
    # (1.0, 128.0) equals (1, 128) but is no block size
    if block not in BLOCKS or not all(is_integer(size) for size in block):
        raise ValueError(f"block={block!r} must be one of {list(BLOCKS)}")
    return tuple(int(v) for v in block)


def quantize_block(x: torch.Tensor, dtype: torch.dtype, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_fp8, scales) with x ≈ x_fp8 · scale of its block: each block's largest magnitude maps to the format's
    largest finite value; an all-zero block gets the smallest normal float32 as its scale. x: (…, R, K) of a
    float type; x_fp8 has x's shape, scales (…, ceil(R / br), ceil(K / 128)) float32 (module docstring).
    On a GPU one Triton pass (quantize_kernel.py), elsewhere `quantize_block_torch`: the same bits. The op
    `cutlass_ext::quantize_fp8_block`, so torch.compile and CUDA graphs take it whole."""
    return quantize_fp8_block(x, dtype, block[0])


@custom_op("cutlass_ext::quantize_fp8_block", mutates_args=())
def quantize_fp8_block(x: torch.Tensor, dtype: torch.dtype, rows_per_block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize_block with (rows_per_block, 128) blocks."""
    block = (rows_per_block, SCALE_BLOCK_K)
    if x.is_cuda and quantize_kernel.available():
        return quantize_kernel.quantize_block_kernel(x, dtype, block)
    x_fp8, scales = quantize_block_torch(x, dtype, block)
    return x_fp8.contiguous(), scales.contiguous()  # an op's outputs: tensors of their own


@quantize_fp8_block.register_fake
def _quantize_fp8_block_fake(x: torch.Tensor, dtype: torch.dtype, rows_per_block: int):
    *batch, rows, columns = x.shape
    scales = (*batch, -(-rows // rows_per_block), -(-columns // SCALE_BLOCK_K))
    return x.new_empty(x.shape, dtype=dtype), x.new_empty(scales, dtype=torch.float32)


def quantize_block_torch(x: torch.Tensor, dtype: torch.dtype, block: tuple[int, int]):
    """quantize_block in PyTorch operations: the definition the one-pass kernel is tested against."""
    rows_per_block, columns_per_block = block
    *batch, rows, columns = x.shape
    row_blocks = -(-rows // rows_per_block)
    column_blocks = -(-columns // columns_per_block)
    # Padding with zeros leaves every block's largest magnitude unchanged.
    padded = F.pad(x.float(), (0, column_blocks * columns_per_block - columns, 0, row_blocks * rows_per_block - rows))
    tiles = padded.reshape(*batch, row_blocks, rows_per_block, column_blocks, columns_per_block)
    largest = torch.finfo(dtype).max
    amax = tiles.abs().amax(dim=(-3, -1), keepdim=True)
    # a tensor divisor: CUDA divides by a Python scalar as a product with its rounded reciprocal, one ulp off
    # the IEEE quotient the one-pass kernels compute
    scale = (amax / torch.full((), largest, device=amax.device)).clamp_min(torch.finfo(torch.float32).tiny)
    quantized = (tiles / scale).clamp(-largest, largest).to(dtype)
    quantized = quantized.reshape(*batch, row_blocks * rows_per_block, column_blocks * columns_per_block)
    x_fp8 = quantized[..., :rows, :columns]
    if x_fp8.shape != quantized.shape:
        x_fp8 = x_fp8.contiguous()
    return x_fp8, scale.reshape(*batch, row_blocks, column_blocks)


def dequantize(x_fp8: torch.Tensor, scales: torch.Tensor, rows_per_block: int) -> torch.Tensor:
    """x_fp8 · its block scales in float64 (exact: FP8 times FP32 fits float64's mantissa). x_fp8 (…, R, K),
    scales (…, ceil(R / rows_per_block), ceil(K / 128))."""
    rows, columns = x_fp8.shape[-2:]
    expanded = scales.double().repeat_interleave(rows_per_block, dim=-2)[..., :rows, :]
    expanded = expanded.repeat_interleave(SCALE_BLOCK_K, dim=-1)[..., :columns]
    return x_fp8.double() * expanded


def block_scaled_reference(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    scale_n: int,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """The exact product the block-scaled kernels approximate, in float64: dequantize(a) @ dequantize(b)ᵀ + bias.
    a (…, M, K) FP8 with scale_a (…, M, ceil(K / 128)); b (…, N, K) FP8 with scale_b (…, ceil(N / scale_n),
    ceil(K / 128))."""
    product = dequantize(a, scale_a, 1) @ dequantize(b, scale_b, scale_n).transpose(-1, -2)
    return product if bias is None else product + bias.double()


def grouped_reference(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    scale_n: int,
    offsets: torch.Tensor | None = None,
    masked_counts: torch.Tensor | None = None,
) -> torch.Tensor:
    """The grouped product in float64, group by group (rows a group does not own are 0).
    contiguous (offsets (G,), the groups' cumulative ends): a (M, K), scale_a (M, kb) -> (M, N);
    masked (masked_counts (G,)): a (G, C, K), scale_a (G, C, kb) -> (G, C, N), rows past a count 0."""
    groups, n = b.shape[0], b.shape[1]
    if offsets is not None:
        out = torch.zeros(a.shape[0], n, dtype=torch.float64, device=a.device)
        ends = offsets.tolist()
        for g, end in enumerate(ends):
            start = ends[g - 1] if g else 0
            out[start:end] = block_scaled_reference(a[start:end], b[g], scale_a[start:end], scale_b[g], scale_n)
        return out
    out = torch.zeros(groups, a.shape[1], n, dtype=torch.float64, device=a.device)
    for g, count in enumerate(masked_counts.tolist()):
        count = max(0, min(count, a.shape[1]))
        out[g, :count] = block_scaled_reference(a[g, :count], b[g], scale_a[g, :count], scale_b[g], scale_n)
    return out


def k_grouped_reference(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    offsets: torch.Tensor,
    c: torch.Tensor | None = None,
) -> torch.Tensor:
    """The weight-gradient form in float64: per group g, c[g] + dequantize(a)[:, cols] @ dequantize(b)[:, cols]ᵀ
    over the columns [offsets[g-1], offsets[g]) it owns. a (M, K), b (N, K) FP8 with 1x128 scales (M, kb), (N, kb)
    -> (G, M, N); groups whose offsets the kernel refuses (non-empty and not starting on a 128-column block,
    running backwards or past K) are NaN, as the kernel writes them."""
    dense_a, dense_b = dequantize(a, scale_a, 1), dequantize(b, scale_b, 1)
    ends = offsets.tolist()
    out = torch.zeros(len(ends), a.shape[0], b.shape[0], dtype=torch.float64, device=a.device)
    for g, end in enumerate(ends):
        start = ends[g - 1] if g else 0
        if start < 0 or end < start or end > a.shape[1] or (start % SCALE_BLOCK_K and end > start):
            out[g] = float("nan")
            continue
        out[g] = dense_a[:, start:end] @ dense_b[:, start:end].T
    return out if c is None else out + c.double()
