"""cutlass_ext.numerics against the seed's tables (seed 000) and hand-made cases at ties, subnormals, overflow."""

import math

import pytest
import torch

from cutlass_ext import numerics

inf, nan = math.inf, math.nan


def f32(values):
    return torch.tensor(values, dtype=torch.float32)


def same(result, expected):
    """Bitwise equality (so -0.0 differs from 0.0), with any NaN equal to any NaN."""
    expected = expected if isinstance(expected, torch.Tensor) else f32(expected)
    nan_agrees = torch.equal(result.isnan(), expected.isnan())
    numbers = ~expected.isnan()
    return nan_agrees and torch.equal(result[numbers].view(torch.int32), expected[numbers].view(torch.int32))


@pytest.mark.parametrize("rounding, expected", [("rn", 22.75), ("rna", 22.75), ("rz", 22.25)])
def test_mantissa_length_expectation_reproduces_tables_1_and_2(rounding, expected):
    assert abs(numerics.mantissa_length_expectation(rounding) - expected) <= 0.01


def test_mantissa_length_expectation_sampled_agrees_with_exhaustive():
    sampled = numerics.mantissa_length_expectation("rn", samples=200_000, generator=torch.Generator().manual_seed(1))
    assert abs(sampled - 22.75) < 0.02


@pytest.mark.parametrize(
    "fmt, mode, inputs, expected",
    [
        # ties: 1 + 2^-11 is halfway between FP16 neighbours 1 and 1 + 2^-10
        ("fp16", "rn", [1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11)], [1.0, 1 + 2**-9, -1.0]),
        ("fp16", "rna", [1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11)], [1 + 2**-10, 1 + 2**-9, -(1 + 2**-10)]),
        ("fp16", "rz", [1 + 2**-10 - 2**-20, -(1 + 2**-10 - 2**-20)], [1.0, -1.0]),
        # subnormals: the FP16 quantum stops at 2^-24
        (
            "fp16",
            "rn",
            [2**-24, 2**-25, 1.5 * 2**-25, 3 * 2**-25, 2**-14 - 2**-25],
            [2**-24, 0.0, 2**-24, 2**-23, 2**-14],
        ),
        ("fp16", "rna", [2**-25, -(2**-25)], [2**-24, -(2**-24)]),
        ("fp16", "rz", [1.9 * 2**-24, -1.9 * 2**-24], [2**-24, -(2**-24)]),
        # overflow: RN ties 65520 to the even 65536 = inf; RZ saturates
        ("fp16", "rn", [65519.0, 65520.0, -1e6, inf, nan], [65504.0, inf, -inf, inf, nan]),
        ("fp16", "rz", [65535.0, 1e6, -1e6, inf], [65504.0, 65504.0, -65504.0, inf]),
        ("fp16", "rn", [-0.0, -(2**-26)], [-0.0, -0.0]),
        ("tf32", "rna", [1 + 2**-11, 1 + 2**-11 - 2**-23, 3.4028235e38], [1 + 2**-10, 1.0, inf]),
        ("tf32", "rn", [1 + 2**-11, 1 + 3 * 2**-11], [1.0, 1 + 2**-9]),
        ("tf32", "rz", [1 + 2**-10 - 2**-23, 3.4028235e38], [1.0, (2 - 2**-10) * 2.0**127]),
        ("bf16", "rn", [1 + 2**-8, 1 + 3 * 2**-8, 2**-133], [1.0, 1 + 2**-6, 2**-133]),
        # FP8 converts with .satfinite: overflow and inf clamp to the largest finite value, NaN stays
        (
            "fp8_e4m3",
            "rn",
            [448.0, 464.0, 500.0, -inf, nan, 2**-9, 2**-10, 1.5 * 2**-10],
            [448.0, 448.0, 448.0, -448.0, nan, 2**-9, 0.0, 2**-9],
        ),
        (
            "fp8_e5m2",
            "rn",
            [57344.0, 1e9, inf, 2**-16, 2**-17, 1 + 2**-3],
            [57344.0, 57344.0, 57344.0, 2**-16, 0.0, 1.0],
        ),
    ],
)
def test_round_to_hand_made_cases(fmt, mode, inputs, expected):
    assert same(numerics.round_to(f32(inputs), fmt, mode), expected)


def random_float32(count, seed):
    """Values over FP32's whole range: normals, subnormals, both signs, infinities and NaN."""
    generator = torch.Generator().manual_seed(seed)
    wide = numerics.exp_rand((count,), -126, 127, generator=generator)
    subnormal_bits = torch.randint(0, 2**23, (count // 8,), generator=generator, dtype=torch.int32)
    subnormals = subnormal_bits.view(torch.float32) * (torch.randint(0, 2, (count // 8,), generator=generator) * 2 - 1)
    special = f32([math.inf, -math.inf, math.nan, 0.0, -0.0])
    return torch.cat([wide, subnormals, torch.randn(count, generator=generator), special])


@pytest.mark.parametrize("fmt, dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_round_to_nearest_matches_torch_casts(fmt, dtype):
    x = random_float32(200_000, seed=2)
    assert same(numerics.round_to(x, fmt, "rn"), x.to(dtype).float())


@pytest.mark.parametrize("fmt, dtype", [("fp8_e4m3", torch.float8_e4m3fn), ("fp8_e5m2", torch.float8_e5m2)])
def test_round_to_fp8_matches_torch_casts_in_range(fmt, dtype):
    x = random_float32(200_000, seed=3)
    largest = numerics.FORMATS[fmt].max_finite
    in_range = x[x.abs() <= largest]
    assert same(numerics.round_to(in_range, fmt, "rn"), in_range.to(dtype).float())


def test_round_to_tf32_rna_matches_cutlass_bit_trick():
    # CUTLASS's round_half_ulp_truncate: add 0x1000 to the bits; the Tensor Core ignores the low 13.
    x = random_float32(200_000, seed=4)
    x = x[x.abs() < 3e38]
    bits = x.view(torch.int32).to(torch.int64)
    cutlass = (((bits + 0x1000) & ~0x1FFF) & 0xFFFFFFFF).to(torch.uint32).view(torch.int32).view(torch.float32)
    assert same(numerics.round_to(x, "tf32", "rna"), cutlass)


def test_stochastic_rounding_picks_a_neighbour_with_the_right_probability():
    x = torch.full((200_000,), 1 + 2**-12)  # a quarter of the way from 1 to the next FP16 value
    rounded = numerics.round_to(x, "fp16", "sr", generator=torch.Generator().manual_seed(5))
    assert set(rounded.unique().tolist()) == {1.0, 1 + 2**-10}
    assert abs((rounded > 1).float().mean().item() - 0.25) < 0.01


def test_round_to_rejects_unknown_format_and_mode():
    with pytest.raises(ValueError, match="fmt="):
        numerics.round_to(f32([1.0]), "fp12", "rn")
    with pytest.raises(ValueError, match="mode="):
        numerics.round_to(f32([1.0]), "fp16", "up")
    with pytest.raises(ValueError, match=r"fmt=\['fp16'\] is not one of"):
        numerics.round_to(f32([1.0]), ["fp16"])
    with pytest.raises(ValueError, match=r"mode=\['rn'\] is not one of"):
        numerics.round_to(f32([1.0]), "fp16", ["rn"])
    with pytest.raises(TypeError, match="x must be a torch.Tensor; got list"):
        numerics.round_to([1.0], "fp16")
    with pytest.raises(TypeError, match="generator must be a torch.Generator or None; got int"):
        numerics.round_to(f32([1.0]), "fp16", "sr", generator=5)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: numerics.FloatFormat(0, 0, 1.0), "exponent_bits=0 must be an integer of at least 2"),
        (lambda: numerics.FloatFormat(5, "b", 1.0), "mantissa_bits='b' must be an integer"),
        (lambda: numerics.FloatFormat(5, 10, None), "max_finite=None must be a positive finite number"),
        (lambda: numerics.emulated_gemm(f32([[1.0]]), f32([[1.0]]), "halfhalf", mma_k=0), "mma_k=0"),
        (lambda: numerics.emulated_gemm(f32([[1.0]]), f32([[1.0]]), "halfhalf", mma_k=-8), "mma_k=-8"),
        (
            lambda: numerics.emulated_gemm(f32([[1.0]]), f32([[1.0]]), "halfhalf", accumulator_bits=0),
            "accumulator_bits=0",
        ),
        (
            lambda: numerics.emulated_gemm(f32([[1.0]]), f32([[1.0]]), "tf32tf32", fold="block", block_k=-32),
            "block_k=-32",
        ),
    ],
)
def test_formats_and_the_emulated_gemm_name_bad_sizes(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def bits_kept(x, approximation):
    """Significant bits of x that `approximation` reproduces (24 = exact)."""
    error = (x.double() - approximation).abs() / x.double().abs()
    return torch.where(error == 0, 24.0, -torch.log2(error))


def test_halfhalf_round_trips_to_22_bits_on_exp_rand():
    x = numerics.exp_rand((100_000,), -15, 14, generator=torch.Generator().manual_seed(6))
    hi, lo = numerics.split(x, "halfhalf")
    kept = bits_kept(x, hi.double() + lo.double() * 2.0**-11)
    _, exponent = torch.frexp(x)
    assert kept[exponent - 1 >= -14].min() >= 22
    # Below FP16's smallest normal (2^-14) hi is subnormal and holds fewer bits (seed Figure 9): one bit less.
    assert kept.min() >= 21


def test_markidis_split_underflows_where_halfhalf_does_not():
    # seed 3.3: without the 2^11 scaling the lo part falls into FP16's subnormals for small exponents
    x = numerics.exp_rand((100_000,), -14, -5, generator=torch.Generator().manual_seed(7))
    hi, lo = numerics.split(x, "markidis")
    markidis_bits = bits_kept(x, hi.double() + lo.double())
    hi, lo = numerics.split(x, "halfhalf")
    halfhalf_bits = bits_kept(x, hi.double() + lo.double() * 2.0**-11)
    assert halfhalf_bits.min() >= 22
    assert (markidis_bits < 22).float().mean() > 0.3


def test_tf32tf32_round_trips_over_the_whole_fp32_range():
    x = numerics.exp_rand((100_000,), -100, 100, generator=torch.Generator().manual_seed(8))
    hi, lo = numerics.split(x, "tf32tf32")
    assert bits_kept(x, hi.double() + lo.double()).min() >= 21


@pytest.fixture(scope="module")
def uniform_operands():
    generator = torch.Generator().manual_seed(9)
    a = torch.rand(16, 4096, generator=generator) * 2 - 1
    b = torch.rand(4096, 16, generator=generator) * 2 - 1
    return a, b


def emulated_residual(operands, k, scheme, accumulate):
    a, b = operands[0][:, :k], operands[1][:k]
    return numerics.relative_residual(numerics.emulated_gemm(a, b, scheme, accumulate), a.double() @ b.double())


def test_markidis_loses_accuracy_with_k_under_rz_but_not_rn(uniform_operands):
    """Figure 5's ordering: RZ inside the Tensor Core, not the split, costs Markidis' method its accuracy."""
    rz_short = emulated_residual(uniform_operands, 256, "markidis", "rz")
    rz_long = emulated_residual(uniform_operands, 4096, "markidis", "rz")
    rn_long = emulated_residual(uniform_operands, 4096, "markidis", "rn")
    assert rz_long > 8 * rz_short
    assert rz_long > 20 * rn_long
    assert rn_long < 2e-6


@pytest.mark.parametrize("scheme", ["halfhalf", "tf32tf32"])
def test_corrected_schemes_reach_fp32_accuracy_even_with_rz(uniform_operands, scheme):
    a, b = uniform_operands
    fp32 = numerics.relative_residual(a @ b, a.double() @ b.double())
    residual = emulated_residual(uniform_operands, 4096, scheme, "rz")
    assert residual < 3 * max(fp32, 2e-7)


def test_uncorrected_tf32_has_tf32_accuracy(uniform_operands):
    assert 1e-4 < emulated_residual(uniform_operands, 1024, "tf32", "rz") < 6e-4


def test_emulated_gemm_handles_k_not_a_multiple_of_mma_k():
    generator = torch.Generator().manual_seed(10)
    a, b = torch.randn(5, 13, generator=generator), torch.randn(13, 3, generator=generator)
    result = numerics.emulated_gemm(a, b, "tf32tf32", "rz")
    assert result.shape == (5, 3)
    assert numerics.relative_residual(result, a.double() @ b.double()) < 1e-6


def test_exp_rand_draws_every_exponent_in_range_and_both_signs():
    x = numerics.exp_rand((50_000,), -35, -15, generator=torch.Generator().manual_seed(11))
    assert x.dtype == torch.float32
    _, exponent = torch.frexp(x)
    assert set((exponent - 1).unique().tolist()) == set(range(-35, -14))
    assert (x > 0).any() and (x < 0).any()
    with pytest.raises(ValueError, match="exponent range"):
        numerics.exp_rand((4,), -127, 0)


def test_relative_residual_is_the_frobenius_ratio():
    ref = torch.randn(64, 64, dtype=torch.float64)
    assert numerics.relative_residual(ref * (1 + 1e-3), ref) == pytest.approx(1e-3, rel=1e-9)
    assert math.isinf(numerics.relative_residual(torch.full((2, 2), inf), ref[:2, :2]))


def test_rna_of_a_value_just_below_a_tie_rounds_down():
    """float64 input a hair below half the smallest subnormal step: adding 0.5 in FP64 would round it up."""
    x = torch.tensor([2**-25 - 2**-78, 2**-25, -(2**-25) + 2**-78], dtype=torch.float64)
    assert numerics.round_to(x, "fp16", "rna").tolist() == [0.0, 2**-24, -0.0]


def test_stochastic_rounding_keeps_the_sign_of_zero():
    out = numerics.round_to(f32([-0.0, -1e-30, 0.0]), "fp16", "sr", generator=torch.Generator().manual_seed(0))
    assert torch.equal(out.view(torch.int32), f32([-0.0, -0.0, 0.0]).view(torch.int32))


@pytest.mark.parametrize("magnitude", [1e-200, 1.0, 1e200])
def test_relative_residual_of_float64_values_of_any_size(magnitude):
    ref = torch.randn(10, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * magnitude
    assert numerics.relative_residual(ref * (1 + 1e-3), ref) == pytest.approx(1e-3, rel=1e-9)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: numerics.relative_residual(torch.tensor([1 + 1j]), torch.tensor([1 + 0j])), TypeError, "real"),
        (lambda: numerics.relative_residual([1.0], f32([1.0])), TypeError, "c must be a torch.Tensor"),
        (lambda: numerics.emulated_gemm([[1.0]], f32([[1.0]]), "tf32"), TypeError, "a must be a torch.Tensor"),
        (lambda: numerics.split([3.0], "halfhalf"), TypeError, "x must be a torch.Tensor"),
        (lambda: numerics.emulated_gemm(f32([[1.0]]), f32([[1.0]]), "tf32", accumulator_bits=1024), ValueError, "53"),
        (lambda: numerics.emulated_gemm(f32([[1.0]]), f32([[1.0]]), "markidis", fold="block"), ValueError, "fold"),
        (lambda: numerics.exp_rand((3,), -3.0, 2.0), ValueError, "must be integers"),
        (lambda: numerics.exp_rand((3,), -3, 2, generator=1), TypeError, "generator"),
        (lambda: numerics.FloatFormat(5, 2, 57344.0, saturates="no"), ValueError, "saturates"),
        (lambda: numerics.mantissa_length_expectation(samples=0), ValueError, "samples=0"),
    ],
)
def test_bad_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_exp_rand_takes_an_integer_shape():
    assert numerics.exp_rand(3, -3, 2).shape == (3,)


@pytest.mark.parametrize("scheme", ["halfhalf", "tf32tf32", "markidis"])
def test_a_non_finite_hi_has_lo_zero_as_the_kernels_split(scheme):
    x = f32([math.inf, -math.inf, math.nan, 3.4028235e38, 65520.0, 1.5])
    hi, lo = numerics.split(x, scheme)
    assert torch.equal(lo[~torch.isfinite(hi)], torch.zeros(int((~torch.isfinite(hi)).sum())))
    assert torch.isfinite(lo).all()
