"""Weights and activations rounded to an 8-bit float before the low-bit GEMM (seed 002 section 5, Table 3).

The seed fine-tunes ResNets with M4E3 weights and activations "with flex-bias": per tensor, the largest
exponent is read and the exponent bias is the largest integer that keeps the tensor from overflowing. Here an
`OperandFormat` (man, exp) rounds to nearest-even with subnormals and saturates at its largest finite value;
with `flex_bias` the tensor is first scaled by 2^s, s the largest integer with 2^s·max|x| ≤ the largest finite
value (max|x| over the finite elements; s = e_top − ⌊log2 max|x|⌋, one less where that would pass it), rounded,
and scaled back (exact: powers of two). That is the format with bias b_fixed + s. The rounding passes the
gradient straight through (the seed's quantized training).

E4M3 is the hardware `float8_e4m3fn` (largest finite 448: its top code is NaN only); other (man, exp) are
IEEE-like (top exponent code reserved), e.g. E5M2 (57344) and the seed's M4E3 (15.5).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .format import as_int, check_bits

# 8-bit float formats of interest have 1..10 mantissa and 2..8 exponent bits; wider ones are allowed.
OPERAND_MANTISSA_RANGE = (1, 22)
OPERAND_EXPONENT_RANGE = (2, 8)


@dataclass(frozen=True)
class OperandFormat:
    """Round weights and activations to 1 + exp + man bits; flex_bias: the bias is chosen per tensor (Table 3)."""

    man: int
    exp: int
    flex_bias: bool = True

    def __post_init__(self):
        object.__setattr__(self, "man", as_int(self.man))
        object.__setattr__(self, "exp", as_int(self.exp))
        check_bits("man", self.man, OPERAND_MANTISSA_RANGE)
        check_bits("exp", self.exp, OPERAND_EXPONENT_RANGE)
        if not isinstance(self.flex_bias, bool):
            raise ValueError(f"flex_bias={self.flex_bias!r} must be True or False")

    @property
    def top_exponent(self) -> int:
        """The exponent of the largest finite value: 8 for E4M3 (float8_e4m3fn uses its top exponent code), else
        IEEE's 2^(E−1) − 1 (the top code reserved)."""
        return 8 if (self.man, self.exp) == (3, 4) else 2 ** (self.exp - 1) - 1

    @property
    def min_exponent(self) -> int:
        """The exponent of the smallest normal value; below it the quantum stays 2^(min_exponent − man)."""
        return 2 - 2 ** (self.exp - 1)

    @property
    def max_finite(self) -> float:
        if (self.man, self.exp) == (3, 4):
            return 448.0  # float8_e4m3fn: S.1111.111 is NaN, S.1111.110 = 1.75·2^8 the largest
        return (2.0 - 2.0**-self.man) * 2.0**self.top_exponent

    @property
    def name(self) -> str:
        return f"M{self.man}E{self.exp}" + ("flex" if self.flex_bias else "")


E4M3 = OperandFormat(3, 4)
E5M2 = OperandFormat(2, 5)
M4E3 = OperandFormat(4, 3)  # the seed's weights and activations (Table 3)


def check_operand(name: str, x, dtype: torch.dtype | None = None, device_type: str | None = None, min_dim: int = 0):
    """`x` is a tensor of `dtype` (None: any floating dtype) on a `device_type` device (None: any) with at least
    `min_dim` dimensions; the error names the argument (the API's and the kernel's checks of their operands)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if dtype is None and not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor; got {x.dtype}")
    if dtype is not None and x.dtype != dtype:
        raise TypeError(f"{name} must be {str(dtype).removeprefix('torch.')}; got {x.dtype}")
    if device_type is not None and x.device.type != device_type:
        raise ValueError(f"{name} must be a {device_type.upper()} tensor; got device {x.device}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimensions; got shape {tuple(x.shape)}")


def _round(x64: torch.Tensor, fmt: OperandFormat) -> torch.Tensor:
    """x (float64) rounded to nearest-even in `fmt`, subnormals kept, saturating (±inf too), NaN kept."""
    _, exponent = torch.frexp(x64)  # x = f·2^exponent, |f| in [0.5, 1)
    leading = torch.clamp(exponent - 1, min=fmt.min_exponent)
    quantum = torch.ldexp(torch.ones_like(x64), leading - fmt.man)
    rounded = torch.round(x64 / quantum) * quantum  # exact: power-of-two scalings
    saturated = torch.copysign(torch.full_like(x64, fmt.max_finite), x64)
    rounded = torch.where(rounded.abs() > fmt.max_finite, saturated, rounded)
    return torch.where(torch.isnan(x64), x64, rounded)


def _flex_shift(x64: torch.Tensor, fmt: OperandFormat) -> torch.Tensor:
    """The largest s with 2^s·max|x| ≤ fmt.max_finite, max over the finite magnitudes (0-d int tensor, on
    device): the top binade, or the one below where the top binade ends before 2^s·max|x| (E4M3's 448; the
    last ulp below 2^(e_top+1) in IEEE-like formats)."""
    largest = torch.where(torch.isfinite(x64), x64.abs(), 0.0).amax() if x64.numel() else x64.new_zeros(())
    _, exponent = torch.frexp(largest)  # largest = f·2^exponent: its binade is 2^(exponent − 1); 0 gives 0
    shift = fmt.top_exponent - (exponent - 1)
    return shift - (torch.ldexp(largest, shift) > fmt.max_finite).to(shift.dtype)


def round_operand_values(x: torch.Tensor, fmt: OperandFormat) -> torch.Tensor:
    """`x` rounded to `fmt` (module docstring) as float32, without autograd."""
    if not isinstance(fmt, OperandFormat):
        raise TypeError(f"fmt must be an OperandFormat; got {type(fmt).__name__}")
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError("x must be a floating-point tensor")
    x64 = x.detach().double()
    if not fmt.flex_bias:
        return _round(x64, fmt).float()
    shift = _flex_shift(x64, fmt)
    return torch.ldexp(_round(torch.ldexp(x64, shift), fmt), -shift).float()


class _RoundOperand(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, fmt):
        return round_operand_values(x, fmt)

    @staticmethod
    def backward(ctx, grad):
        return grad, None  # straight through the rounding


def round_operand(x: torch.Tensor, fmt: OperandFormat) -> torch.Tensor:
    """`x` rounded to `fmt` as float32; the gradient passes straight through."""
    return _RoundOperand.apply(x, fmt)
