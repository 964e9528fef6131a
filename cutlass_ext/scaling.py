"""Exact power-of-two scaling that keeps halfhalf operands inside FP16's range (seed 4.1.1, Figure 9).

Rows of A and columns of B are multiplied by 2^s with s chosen on the device so that each row's (column's)
largest magnitude lands just under 2^15; the product is multiplied back by 2^-(s_row + s_col). Powers of two
change no mantissa bit, nothing waits for the host, and NaN and Inf pass through.
"""

from __future__ import annotations

import torch

from . import ops

# Largest magnitudes land in [2^14, 2^15): hi stays under FP16's 65504 and lo = (x - hi)·2^11 under hi.
_TARGET_EXPONENT = 15
# Shifts stay where 2^shift is a normal FP32 number, and a sum of two shifts splits into two such halves.
_SHIFT_LIMIT = 126


def power_of_two(exponent: torch.Tensor) -> torch.Tensor:
    """2^exponent as float32, built from the bits, for integer exponents in [-126, 127]."""
    return ((exponent.to(torch.int32) + 127) << 23).view(torch.float32)


def fp16_range_shift(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Per-slice shifts s (int32, reduced along `dim`, kept as size 1) with max|x|·2^s < 2^15."""
    if x.shape[dim] == 0:  # no elements to reduce: an all-zero slice's shift
        largest = torch.zeros_like(x.sum(dim=dim, keepdim=True))
    else:
        largest = torch.linalg.vector_norm(x, ord=float("inf"), dim=dim, keepdim=True)  # max |x| in one read
    _, exponent = torch.frexp(largest)  # largest < 2^exponent; 0 for an all-zero slice
    return (_TARGET_EXPONENT - exponent).clamp(-_SHIFT_LIMIT, _SHIFT_LIMIT)


def packed_operands(a: torch.Tensor, b: torch.Tensor):
    """(pack(a·2^s_rows), pack(b·2^s_cols), s_rows (…,M,1), s_cols (…,1,N)) for CUDA a (…,M,K) and b (…,K,N).

    pack splits each scaled element into FP16 hi and lo·2^11 in one 32-bit word (ops.halfhalf_pack), in one
    pass that writes row-major whatever the inputs' strides; the kernels regroup the halves.
    """
    row_shift = ops.range_shift(a, -1)
    column_shift = ops.range_shift(b, -2)
    return ops.halfhalf_pack(a, row_shift), ops.halfhalf_pack(b, column_shift), row_shift, column_shift


def packed_unscaled(a: torch.Tensor, b: torch.Tensor):
    """Packed operands without range scaling, for inputs known to fit FP16 (benchmarks of a packed kernel alone)."""
    zero = torch.zeros((), dtype=torch.int32, device=a.device)
    shift_a = zero.expand(*a.shape[:-1], 1)
    shift_b = zero.expand(*b.shape[:-2], 1, b.shape[-1])
    return ops.halfhalf_pack(a, shift_a), ops.halfhalf_pack(b, shift_b)


def unscaled_product(c: torch.Tensor, row_shift: torch.Tensor, column_shift: torch.Tensor) -> torch.Tensor:
    """c·2^-(s_row + s_col), rounded once, in one pass on the GPU (ops.halfhalf_unscale)."""
    return ops.halfhalf_unscale(c, row_shift, column_shift)


# The torch reference of the scaling the CUDA passes above fuse (the tests compare them).


def scaled_operands(a: torch.Tensor, b: torch.Tensor):
    """(a·2^s_rows, b·2^s_cols, s_rows (M,1), s_cols (1,N)) for a (M,K) and b (K,N), written row-major."""
    row_shift = fp16_range_shift(a, dim=-1)
    column_shift = fp16_range_shift(b, dim=-2)
    a_scaled = torch.mul(a, power_of_two(row_shift), out=torch.empty(a.shape, dtype=a.dtype, device=a.device))
    b_scaled = torch.mul(b, power_of_two(column_shift), out=torch.empty(b.shape, dtype=b.dtype, device=b.device))
    return a_scaled, b_scaled, row_shift, column_shift


def unscale(c: torch.Tensor, row_shift: torch.Tensor, column_shift: torch.Tensor) -> torch.Tensor:
    """c·2^-(s_row + s_col): the factor is exact in float64 (|exponent| <= 252), so one rounding to float32."""
    factor = _power_of_two_f64(-row_shift) * _power_of_two_f64(-column_shift)
    return (c * factor).to(torch.float32)


def _power_of_two_f64(exponent: torch.Tensor) -> torch.Tensor:
    """2^exponent as float64, built from the bits, for integer exponents in [-1022, 1023]."""
    return ((exponent.to(torch.int64) + 1023) << 52).view(torch.float64)
