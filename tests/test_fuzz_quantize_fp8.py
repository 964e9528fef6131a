"""Property tests of `ext.quantize_fp8` (CPU tensors): x ≈ x_fp8·scale within the FP8 format's rounding, the
largest magnitude (of x or of each row) on the format's largest finite value, an all-zero row on the smallest normal
float32 scale, and non-finite values of x giving non-finite scales, as its docstring says."""

import math

import torch
from hypothesis import given
from hypothesis import strategies as st

import cutlass_ext as ext

# dtype -> (stored mantissa bits, exponent of its smallest subnormal)
FORMATS = {torch.float8_e4m3fn: (3, -9), torch.float8_e5m2: (2, -16)}


@st.composite
def matrices(draw):
    rows, columns = draw(st.integers(1, 6)), draw(st.integers(1, 12))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16, torch.float16]))
    low, high = (-20, 10) if dtype == torch.float16 else (-140, 100)  # inside the input format's range
    x = torch.randn(rows, columns, generator=generator)
    exponents = torch.tensor(draw(st.lists(st.integers(low, high), min_size=rows, max_size=rows)))
    x = x * torch.ldexp(torch.ones(rows, 1), exponents.reshape(-1, 1))  # rows of very different magnitudes
    if draw(st.booleans()):
        x[draw(st.integers(0, rows - 1))] = 0.0
    return x.to(dtype)


@given(x=matrices(), dtype=st.sampled_from(list(FORMATS)), granularity=st.sampled_from(["tensor", "row"]))
def test_quantized_values_times_the_scale_are_x(x, dtype, granularity):
    x8, scale = ext.quantize_fp8(x, dtype=dtype, granularity=granularity)
    assert x8.dtype == dtype and x8.shape == x.shape and scale.dtype == torch.float32
    assert scale.shape == (() if granularity == "tensor" else (x.shape[0], 1))
    mantissa, subnormal = FORMATS[dtype]
    x64, scale64 = x.double(), scale.double()
    error = (x8.double() * scale64 - x64).abs()
    assert (error <= 2.0 ** -(mantissa + 1) * x64.abs() + 2.0 ** (subnormal - 1) * scale64).all()
    largest = torch.finfo(dtype).max
    rows = x64.abs().amax(dim=1, keepdim=True) if granularity == "row" else x64.abs().amax()
    magnitudes = x8.double().abs().amax(dim=1, keepdim=True) if granularity == "row" else x8.double().abs().amax()
    normal_scale = rows / largest >= torch.finfo(torch.float32).tiny
    assert ((magnitudes == largest) | ~normal_scale).all()
    assert (scale64[~normal_scale.expand_as(scale64)] == torch.finfo(torch.float32).tiny).all()


@given(
    value=st.sampled_from([math.nan, math.inf, -math.inf]),
    position=st.integers(0, 47),
    granularity=st.sampled_from(["tensor", "row"]),
)
def test_non_finite_values_give_non_finite_scales(value, position, granularity):
    x = torch.randn(4, 12, generator=torch.Generator().manual_seed(position))
    x.view(-1)[position] = value
    _, scale = ext.quantize_fp8(x, granularity=granularity)
    row = position // 12
    assert not math.isfinite(float(scale if granularity == "tensor" else scale[row]))
