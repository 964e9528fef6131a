"""Property tests of `ext.gemm_fp8` against `numerics.dequantized_product` (FP64): random shapes within the
documented alignment (M any, including 0 and 1; K a multiple of 16; N of 8, or 4 for FP32 output; one dimension
past 65535), row-sliced operands, scales of every documented form (a float, one-element tensors, per row in each
accepted shape, negative too), bias or none, both accumulations, and FP8 values of every bit pattern (subnormals,
the largest finite, zeros).

The bound, componentwise: |D − ref| ≤ (r + 3·2^-24)·|ref| + c·S + r·|bias| + 2^-24·(the smallest normal of
out_dtype), where S = |scale_a·scale_b|·(|a|·|b|ᵀ), r is the output format's rounding (bf16 2^-8, fp16 2^-11, fp32
2^-24), and c covers the Tensor Core's FP8 accumulation in the worst case: products are exact, and each k = 32
instruction aligns its 32 products and the accumulator to their largest exponent and keeps about 13 bits below
it, so each of the 33 terms may lose 2^-12 of the largest: at most 33·2^-12 of S per instruction;
`promoted` adds the partial sums into FP32 every 128 k (4 instructions + 1), `fast` keeps all of K inside
(ceil(K/32) + 1).

NaN and Inf (gemm_fp8's docstring says nothing of them; this test is the statement): a NaN or Inf in a or b
makes exactly the outputs non-finite that the FP64 product makes non-finite, and NaN where it is NaN.
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import cutlass_ext as ext
from cutlass_ext import numerics

from .fuzz_inputs import with_specials

FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
ROUNDING = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}
SMALLEST_NORMAL = {torch.bfloat16: 2.0**-126, torch.float16: 2.0**-14, torch.float32: 2.0**-126}
M_SIZES = st.one_of(st.sampled_from([0, 1, 2, 7, 16, 17, 63, 64, 65, 127, 129, 257]), st.integers(1, 600))


def _fp8_values(dtype, shape, generator, finite=True) -> torch.Tensor:
    """Every bit pattern equally likely; non-finite patterns (e4m3's NaN, e5m2's NaN and Inf) zeroed if `finite`."""
    bits = torch.randint(0, 256, shape, generator=generator, dtype=torch.int32).to(torch.uint8)
    x = bits.view(dtype)
    if finite:
        x = torch.where(torch.isfinite(x.float()), x.float(), 0.0).to(dtype)
    return x


def _row_sliced(x: torch.Tensor, pad: int) -> torch.Tensor:
    """x (rows, K) as a view whose rows are `pad` elements longer (the row stride stays a multiple of 16 bytes)."""
    if pad == 0:
        return x
    wide = torch.zeros((x.shape[0], x.shape[1] + pad), dtype=x.dtype, device=x.device)
    wide[:, : x.shape[1]] = x
    return wide[:, : x.shape[1]]


# the forms gemm_fp8's docstring admits: one value (a float, a one-element tensor on the GPU or the CPU, 0-d or
# not), or one per row of the operand: scale_a (M, 1) or (M,); scale_b (1, N), (N, 1) or (N,)
SCALE_FORMS = {
    "scale_a": ["float", "0-d", "one", "cpu", "column", "flat"],
    "scale_b": ["float", "0-d", "one", "cpu", "column", "flat", "row"],
}


@st.composite
def scales(draw, rows: int, label: str):
    """A scale in one of the documented forms for an operand of `rows` rows, and its values as FP64 (the FP32
    values the kernel multiplies by)."""
    forms = SCALE_FORMS[label] if rows else SCALE_FORMS[label][:4]  # no rows: one value (the reference's forms)
    form = draw(st.sampled_from(forms), label=f"form of {label}")
    if form in ("float", "0-d", "one", "cpu"):
        value = draw(st.floats(2.0**-10, 2.0**4), label=label) * draw(st.sampled_from([1, -1]), label="sign")
        value32 = torch.tensor(value, dtype=torch.float32)
        if form == "float":
            return value, value32.double()
        tensor = value32 if form == "0-d" else value32.reshape(1)
        return (tensor if form == "cpu" else tensor.cuda()), value32.double()
    seed = draw(st.integers(0, 2**31 - 1))
    values = torch.rand(rows, generator=torch.Generator().manual_seed(seed)) * 2 + 2.0**-6
    shape = {"column": (rows, 1), "flat": (rows,), "row": (1, rows)}[form]
    return values.reshape(shape).cuda(), values.double()


def error_bound(a, b, scale_a, scale_b, bias, reference, out_dtype, accum):
    k = a.shape[1]
    magnitude = a.double().abs() @ b.double().abs().T
    scaled = magnitude * (scale_a.abs().reshape(-1, 1) if scale_a.numel() != 1 else scale_a.abs())
    scaled = scaled * (scale_b.abs().reshape(1, -1) if scale_b.numel() != 1 else scale_b.abs())
    instructions = -(-(min(k, 128) if accum == "promoted" else k) // 32) + 1
    rounding = ROUNDING[out_dtype]
    bound = (rounding + 3 * 2.0**-24) * reference.abs() + instructions * 33 * 2.0**-12 * scaled
    bound = bound + 2.0**-24 * SMALLEST_NORMAL[out_dtype]
    return bound if bias is None else bound + rounding * bias.double().abs()


def _check(a, b, scale_a, scale_b, bias, out_dtype, accum, scale_a64, scale_b64):
    out = ext.gemm_fp8(a, b, scale_a, scale_b, out_dtype=out_dtype, bias=bias, accum=accum)
    assert out.shape == (a.shape[0], b.shape[0]) and out.dtype == out_dtype
    scale_a64, scale_b64 = scale_a64.to(a.device), scale_b64.to(a.device)
    reference = numerics.dequantized_product(a, b, scale_a64, scale_b64, bias)  # FP64 on the GPU
    bound = error_bound(a, b, scale_a64, scale_b64, bias, reference, out_dtype, accum)
    excess = (out.double() - reference).abs() - bound
    assert not excess.numel() or excess.max() <= 0, (
        f"|D - ref| exceeds the bound by {excess.max().item():.3g}; relres "
        f"{numerics.relative_residual(out, reference):.3g}"
    )


@given(
    data=st.data(),
    m=M_SIZES,
    n=st.integers(1, 80).map(lambda v: 8 * v),
    k=st.integers(1, 64).map(lambda v: 16 * v),
    accum=st.sampled_from(["promoted", "fast"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_gemm_fp8_is_within_its_bound(data, m, n, k, accum, seed):
    """e4m3 operands and bf16 output: the variants dispatch runs (the defaults, the decode kernels up to M = 64)."""
    generator = torch.Generator().manual_seed(seed)
    a = _fp8_values(FP8["e4m3"], (m, k), generator).cuda()
    b = _fp8_values(FP8["e4m3"], (n, k), generator).cuda()
    a = _row_sliced(a, data.draw(st.sampled_from([0, 16, 48]), label="padding of a's rows"))
    b = _row_sliced(b, data.draw(st.sampled_from([0, 16]), label="padding of b's rows"))
    scale_a, scale_a64 = data.draw(scales(m, "scale_a"))
    scale_b, scale_b64 = data.draw(scales(n, "scale_b"))
    bias = None
    if data.draw(st.booleans(), label="bias"):
        bias = torch.randn(n, generator=generator).to(torch.bfloat16).cuda()
    _check(a, b, scale_a, scale_b, bias, torch.bfloat16, accum, scale_a64, scale_b64)


# The componentwise bound above grows with K for fast accumulation (the worst case of every k = 32 instruction's
# alignment), so at K = 1024 it would pass a kernel that skipped a slice of K. Operands of -1, 0 and 1 close that
# gap: every product is exact and every partial sum an integer of at most 2^10, well inside the ~13 bits either
# accumulation keeps, so the FP32 output is the exact integer product for every variant dispatch runs.
@given(
    m=M_SIZES,
    n=st.integers(1, 80).map(lambda v: 4 * v),
    k=st.integers(1, 64).map(lambda v: 16 * v),
    accum=st.sampled_from(["promoted", "fast"]),
    row_scales=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_small_integers_give_the_exact_product(m, n, k, accum, row_scales, seed):
    row_scales = row_scales and m > 0  # no rows: one value (the forms the reference takes)
    generator = torch.Generator().manual_seed(seed)
    a = torch.randint(-1, 2, (m, k), generator=generator).float()
    b = torch.randint(-1, 2, (n, k), generator=generator).float()
    # powers of two keep the scaled sums exact in FP32
    scale_a = 2.0 ** torch.randint(-3, 4, (m, 1), generator=generator).float() if row_scales else torch.tensor(0.5)
    scale_b = 2.0 ** torch.randint(-3, 4, (n,), generator=generator).float() if row_scales else torch.tensor(4.0)
    out = ext.gemm_fp8(
        a.to(FP8["e4m3"]).cuda(),
        b.to(FP8["e4m3"]).cuda(),
        scale_a.cuda(),
        scale_b.cuda(),
        out_dtype=torch.float32,
        accum=accum,
    )
    exact = (a @ b.T) * scale_a.reshape(-1, 1) * scale_b.reshape(1, -1)
    assert torch.equal(out.cpu(), exact), f"{(out.cpu() != exact).sum().item()} of {out.numel()} outputs differ"


@pytest.mark.parametrize(
    "a_dtype, b_dtype, out_dtype",
    [("e5m2", "e4m3", torch.bfloat16), ("e4m3", "e5m2", torch.float16), ("e5m2", "e5m2", torch.float32)],
)
@pytest.mark.parametrize("m, n, k", [(129, 264, 400), (5, 40, 48)])
def test_other_dtypes_are_within_the_bound(a_dtype, b_dtype, out_dtype, m, n, k):
    generator = torch.Generator().manual_seed(m + n + k)
    a = _fp8_values(FP8[a_dtype], (m, k), generator).cuda()
    b = _fp8_values(FP8[b_dtype], (n, k), generator).cuda()
    # small scales: e5m2's products reach 2^31, and FP16 output holds 2^16
    scale_a = torch.rand(m, 1, generator=generator) * 2.0**-13
    scale_b = torch.rand(n, generator=generator) * 2.0**-13
    bias = torch.randn(n, generator=generator).to(out_dtype)
    _check(a, b, scale_a.cuda(), scale_b.cuda(), bias.cuda(), out_dtype, "promoted", scale_a.double(), scale_b.double())


@pytest.mark.parametrize("m, n, k", [(70001, 16, 32), (1, 65544, 16), (3, 8, 65552)])
@pytest.mark.parametrize("accum", ["promoted", "fast"])
def test_one_dimension_past_65535(m, n, k, accum):
    generator = torch.Generator().manual_seed(m + n + k)
    a = _fp8_values(FP8["e4m3"], (m, k), generator).cuda()
    b = _fp8_values(FP8["e4m3"], (n, k), generator).cuda()
    scale = torch.tensor(2.0**-8, dtype=torch.float64)
    _check(a, b, 2.0**-8, 1.0, None, torch.bfloat16, accum, scale, torch.tensor(1.0, dtype=torch.float64))


def _check_non_finite(a, b, accum):
    out = ext.gemm_fp8(a.cuda(), b.cuda(), 0.5, 0.25, accum=accum).cpu()
    reference = numerics.dequantized_product(a, b, 0.5, 0.25)
    assert torch.equal(torch.isfinite(out), torch.isfinite(reference))
    assert out[reference.isnan()].isnan().all()
    infinite = reference.isinf()
    assert (out[infinite].isnan() | (out[infinite].double() == reference[infinite])).all()


def _with_specials(m, n, k, dtype, specials, seed):
    generator = torch.Generator().manual_seed(seed)
    a, b = torch.randn(m, k, generator=generator), torch.randn(n, k, generator=generator)
    non_finite = [math.nan] if dtype == "e4m3" else [math.nan, math.inf, -math.inf]  # e4m3fn has no Inf
    planted = [(name, position, non_finite[i % len(non_finite)]) for i, (name, position) in enumerate(specials)]
    a = with_specials(a, [(position, value) for name, position, value in planted if name == "a"])
    b = with_specials(b, [(position, value) for name, position, value in planted if name == "b"])
    return a.to(FP8[dtype]), b.to(FP8[dtype])


@given(
    m=st.integers(1, 100),
    n=st.integers(1, 20).map(lambda v: 8 * v),
    k=st.integers(1, 20).map(lambda v: 16 * v),
    accum=st.sampled_from(["promoted", "fast"]),
    specials=st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 10**6)), min_size=1, max_size=3),
    seed=st.integers(0, 2**31 - 1),
)
def test_nan_propagates_as_in_fp64(m, n, k, accum, specials, seed):
    _check_non_finite(*_with_specials(m, n, k, "e4m3", specials, seed), accum)


@pytest.mark.parametrize("accum", ["promoted", "fast"])
@pytest.mark.parametrize("m", [3, 130])
def test_other_dtypes_propagate_nan_and_inf(m, accum):
    """e5m2 holds ±Inf: inf·0 is NaN, inf + (−inf) is NaN, inf·x is inf, as in FP64."""
    specials = [("a", 5), ("a", 77), ("b", 300), ("b", 1000), ("a", 2000), ("b", 4001)]
    _check_non_finite(*_with_specials(m, 64, 96, "e5m2", specials, m), accum)
