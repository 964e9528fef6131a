"""FP8 weights and activations with a flexible per-tensor bias (seed 002 Table 3): the rounding against
numerics.round_to and torch's float8 casts, the bias choice, special values, and the low-bit GEMM on rounded
operands with the gradient passed straight through."""

import math

import pytest
import torch

from cutlass_ext import lowbit, numerics
from cutlass_ext.lowbit.format import LowbitFormat
from cutlass_ext.lowbit.operands import (
    E4M3,
    E5M2,
    M4E3,
    OperandFormat,
    check_operand,
    round_operand,
    round_operand_values,
)
from cutlass_ext.lowbit.reference import lowbit_matmul_fmt

# The same formats as numerics.round_to knows them (saturating, subnormals kept).
ROUND_TO_FORMATS = {
    E4M3: "fp8_e4m3",
    E5M2: "fp8_e5m2",
    M4E3: numerics.FloatFormat(exponent_bits=3, mantissa_bits=4, max_finite=15.5, saturates=True),
}
DISTRIBUTIONS = {
    "normal": lambda g, shape: torch.randn(shape, generator=g),
    "wide": lambda g, shape: torch.randn(shape, generator=g) * 2.0 ** torch.randint(-20, 20, shape, generator=g),
    "tiny": lambda g, shape: torch.randn(shape, generator=g) * 1e-30,
    "huge": lambda g, shape: torch.rand(shape, generator=g) * 1e35,
}


def _draw(distribution, shape, seed):
    return DISTRIBUTIONS[distribution](torch.Generator().manual_seed(seed), shape)


def _same(x, y) -> bool:
    return x.shape == y.shape and torch.equal(x.view(torch.int32), y.view(torch.int32))


@pytest.mark.parametrize("fmt", list(ROUND_TO_FORMATS), ids=lambda f: f.name)
@pytest.mark.parametrize("distribution", list(DISTRIBUTIONS))
@pytest.mark.parametrize("shape", [(1,), (7, 13), (3, 5, 31)])
def test_flex_bias_is_round_to_of_the_scaled_tensor(fmt, distribution, shape):
    x = _draw(distribution, shape, seed=len(shape) * 100 + sum(shape))
    largest = float(x.abs().max())
    shift = fmt.top_exponent - (math.frexp(largest)[1] - 1)  # the top binade ...
    if largest * 2.0**shift > fmt.max_finite:
        shift -= 1  # ... or the one below, where the top binade ends first
    expected = (numerics.round_to(x.double() * 2.0**shift, ROUND_TO_FORMATS[fmt]).double() / 2.0**shift).float()
    got = round_operand_values(x, fmt)
    assert _same(got, expected)
    # nothing overflows and the range is used to the top: one more doubling would pass the largest finite value
    assert largest * 2.0**shift <= fmt.max_finite < largest * 2.0 ** (shift + 1)
    assert float(got.abs().max()) <= fmt.max_finite * 2.0**-shift


def test_e4m3_flex_bias_uses_the_binade_up_to_448():
    """float8_e4m3fn's top exponent code holds finite values (256..448): a largest magnitude of 1 is scaled to 256,
    so 2^-17 lands on the smallest subnormal 2^-9 rather than below it; one of 1.9 (486 at that scale) goes a
    binade lower."""
    assert E4M3.top_exponent == 8 and E4M3.max_finite == 1.75 * 2.0**8
    got = round_operand_values(torch.tensor([1.0, 2.0**-17]), E4M3)
    assert got.tolist() == [1.0, 2.0**-17]
    got = round_operand_values(torch.tensor([1.9, 2.0**-17]), E4M3)
    assert got.tolist() == [1.875, 0.0]  # scaled by 2^7: 243.2 → 240, 2^-10 flushes below 2^-9's half


@pytest.mark.parametrize("fmt, dtype", [(E4M3, torch.float8_e4m3fn), (E5M2, torch.float8_e5m2)])
def test_fixed_bias_is_the_saturating_float8_cast(fmt, dtype):
    x = _draw("wide", (40, 50), seed=11) * 1e-3
    fixed = OperandFormat(fmt.man, fmt.exp, flex_bias=False)
    expected = x.clamp(-fmt.max_finite, fmt.max_finite).to(dtype).float()
    assert _same(round_operand_values(x, fixed), expected)


def test_special_values():
    x = torch.tensor([0.0, -0.0, 1.0, -3.0, math.inf, -math.inf, math.nan, 1e-30])
    q = round_operand_values(x, M4E3)  # the largest finite magnitude, 3, sets the shift: s = 3 − 1
    assert q[2] == 1.0 and q[3] == -3.0
    assert q[4] == 15.5 / 4 and q[5] == -15.5 / 4  # ±inf saturate at the shifted largest value
    assert math.isnan(q[6]) and q[7] == 0.0
    assert torch.equal(round_operand_values(torch.zeros(3, 4), E4M3), torch.zeros(3, 4))
    assert round_operand_values(torch.zeros(0, 5), E4M3).shape == (0, 5)


def test_matmul_on_rounded_operands_and_straight_through_gradients():
    fmt = LowbitFormat.make(7, 4)
    a = _draw("normal", (9, 40), seed=12).requires_grad_()
    b = (_draw("normal", (40, 6), seed=13) * 0.05).requires_grad_()
    g = _draw("normal", (9, 6), seed=14)
    config = lowbit.LowbitConfig(fmt, operands=M4E3)
    c = lowbit.matmul(a, b, config)
    qa, qb = round_operand_values(a, M4E3), round_operand_values(b, M4E3)
    assert not _same(qa, a.detach()) and not _same(qb, b.detach())
    assert _same(c, lowbit_matmul_fmt(qa, qb, fmt))
    grad_a, grad_b = torch.autograd.grad(c, (a, b), g)
    assert torch.allclose(grad_a, g @ qb.T) and torch.allclose(grad_b, qa.T @ g)
    assert _same(torch.autograd.grad(round_operand(a, M4E3), a, g[:, :1].expand(9, 40))[0], g[:, :1].expand(9, 40))


def test_layers_carry_the_operand_format():
    config = lowbit.LowbitConfig(LowbitFormat.make(7, 4), operands=lowbit.M4E3)
    layer = lowbit.Linear(20, 4, config=config)
    assert "operands=M4E3flex" in repr(layer)
    x = _draw("normal", (3, 20), seed=15)
    expected = lowbit_matmul_fmt(
        round_operand_values(x, M4E3), round_operand_values(layer.weight, M4E3).t(), config.format
    )
    assert _same(layer(x), expected + layer.bias.detach())


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: OperandFormat(0, 4), ValueError, "man=0"),
        (lambda: OperandFormat(3, 9), ValueError, "exp=9"),
        (lambda: OperandFormat(3, 4, flex_bias=1), ValueError, "flex_bias="),
        (lambda: lowbit.LowbitConfig(LowbitFormat.make(7, 4), operands="e4m3"), TypeError, "operands must be"),
        (lambda: round_operand_values(torch.zeros(2, dtype=torch.int32), E4M3), TypeError, "x must be"),
        (lambda: round_operand_values(torch.zeros(2), "e4m3"), TypeError, "fmt must be"),
        # the one check of the API's and the kernel's operands
        (lambda: check_operand("a", [1.0]), TypeError, "a must be a torch.Tensor; got list"),
        (lambda: check_operand("b", torch.zeros(2, dtype=torch.int64)), TypeError, "b must be a floating-point"),
        (lambda: check_operand("a", torch.zeros(2, 2).double(), torch.float32), TypeError, "a must be float32"),
        (lambda: check_operand("b", torch.zeros(2, 2), torch.float32, "cuda"), ValueError, "b must be a CUDA tensor"),
        (lambda: check_operand("a", torch.zeros(3), min_dim=2), ValueError, r"a must have at least 2 .* \(3,\)"),
    ],
)
def test_bad_arguments_name_themselves(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_operands_that_pass_the_check():
    check_operand("x", torch.zeros(2, dtype=torch.bfloat16))  # any floating dtype without one named
    check_operand("a", torch.zeros(2, 3), torch.float32, "cpu", min_dim=2)
