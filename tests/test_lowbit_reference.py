"""cutlass_ext.lowbit reference (seed 002 eq. 2, Fig. 1) against an independent scalar chain and hand-made cases."""

import math
import struct
import zlib

import numpy as np
import pytest
import torch

from cutlass_ext import numerics
from cutlass_ext.lowbit.format import LowbitFormat
from cutlass_ext.lowbit.reference import fmaq, lowbit_matmul, lowbit_matmul_events, lowbit_matmul_fmt, quantize

inf, nan = math.inf, math.nan


def f32(values):
    return torch.tensor(values, dtype=torch.float32)


def same(result, expected):
    """Bitwise equality (so -0.0 differs from 0.0), with any NaN equal to any NaN."""
    expected = expected if isinstance(expected, torch.Tensor) else f32(expected)
    nan_agrees = torch.equal(result.isnan(), expected.isnan())
    numbers = ~expected.isnan()
    return nan_agrees and torch.equal(result[numbers].view(torch.int32), expected[numbers].view(torch.int32))


# ---- an independent scalar implementation: Python ints for the bits, numpy float32 for each rounded operation


def bits_of(value: np.float32) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def from_bits(bits: int) -> np.float32:
    return np.float32(struct.unpack("<f", struct.pack("<I", bits))[0])


def scalar_q(y: np.float32, man: int, exp: int, bias: int, underflow: bool) -> np.float32:
    r_of = np.float32(2.0 ** (2**exp - bias - 1) * (2.0 - 2.0**-man))
    r_uf = np.float32(2.0**-bias)
    if np.isnan(y):
        return y
    v = from_bits(bits_of(y) & (0xFFFFFFFF << (23 - man)) & 0xFFFFFFFF)
    if abs(v) >= r_of:
        return np.float32(math.copysign(r_of, v))
    if underflow and abs(v) < r_uf:
        return np.float32(0.0)
    return v


def scalar_chain(a: torch.Tensor, b: torch.Tensor, fmt: LowbitFormat) -> torch.Tensor:
    """C[i, j] by the issue's words, one scalar at a time."""
    an, bn = a.numpy(), b.numpy()
    m, k = an.shape
    n = bn.shape[1]
    out = np.zeros((m, n), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(m):
            for j in range(n):
                total = np.float32(0.0)
                for start in range(0, k, fmt.chunk):
                    s = np.float32(0.0)
                    for kk in range(start, min(k, start + fmt.chunk)):
                        p = scalar_q(an[i, kk] * bn[kk, j], fmt.prod_man, fmt.prod_exp, fmt.prod_bias, fmt.underflow)
                        s = scalar_q(p + s, fmt.man, fmt.exp, fmt.acc_bias, fmt.underflow)
                    total = scalar_q(total + s, fmt.man, fmt.exp, fmt.acc_bias, fmt.underflow)
                out[i, j] = total
    return torch.from_numpy(out)


def scalar_q_eq2(x: float, man: int, exp: int, bias: int) -> float:
    """Eq. 2 with floor in place of Round, in float64 arithmetic (exact for these powers of two)."""
    r_of = 2.0 ** (2**exp - bias - 1) * (2.0 - 2.0**-man)
    if abs(x) >= r_of:
        return math.copysign(r_of, x)
    if abs(x) < 2.0**-bias:
        return 0.0
    e = math.floor(math.log2(abs(x)))
    if 2.0**e > abs(x):  # log2 rounding just below a power of two
        e -= 1
    m = math.floor(2.0**man * (abs(x) * 2.0**-e - 1.0)) * 2.0**-man
    return math.copysign(2.0**e * (m + 1.0), x)


def sample(kind: str, shape, generator) -> torch.Tensor:
    if kind == "normal":
        return torch.randn(shape, generator=generator)
    if kind == "uniform":
        return torch.rand(shape, generator=generator) * 2 - 1
    if kind == "wide":  # seed 000 eq. 25: exponents spread over many binades, to hit overflow, underflow, swamping
        return numerics.exp_rand(shape, -14, 4, generator=generator)
    if kind == "positive":  # no cancellation: long sums grow and saturate
        return torch.rand(shape, generator=generator) * 4
    raise ValueError(kind)


FORMATS = [
    LowbitFormat.make(7, 4),  # the seed's M7E4, b_acc = 10, b_prod = 12 (Table 2)
    LowbitFormat.make(7, 4, underflow=False),
    LowbitFormat.make(4, 3, 5, 5, chunk=4),  # the seed's MNIST M4E3 with bias 5 (appendix C.3)
    LowbitFormat.make(10, 5, chunk=1),
    LowbitFormat.make(3, 2, 1, 2, chunk=5, prod_man=6, prod_exp=3),  # distinct product format
    LowbitFormat.make(12, 6, chunk=64, underflow=False),
]


# ---- Q


def test_quantize_hand_cases_m7e4():
    # R_OF = 2^(16-10-1)·(2 - 2^-7) = 63.75, R_UF = 2^-10
    x = f32([1 + 2**-8, 1 + 2**-7, -(1 + 2**-7 + 2**-8), 63.75, 63.8, 100.0, -inf, inf, 2**-10, 2**-11, -(2**-11), 0.0])
    expected = [1.0, 1 + 2**-7, -(1 + 2**-7), 63.75, 63.75, 63.75, -63.75, 63.75, 2**-10, 0.0, 0.0, 0.0]
    assert same(quantize(x, 7, 4, 10, True), expected)
    no_flush = quantize(f32([2**-11, -(2**-30)]), 7, 4, 10, False)
    assert same(no_flush, [2**-11, -(2**-30)])


def test_quantize_nan_and_subnormals():
    signalling = torch.tensor([0x7F800001, 0x7FC00000, 0xFF800003 - (1 << 32)], dtype=torch.int32).view(torch.float32)
    assert quantize(signalling, 7, 4, 10, True).isnan().all()
    # FP32 subnormals: kept and masked when underflow is off (2^-127 is field bit 22, 2^-149 field bit 0)
    sub = f32([2**-127, 2**-149, -(2**-127 + 2**-149)])
    assert same(quantize(sub, 7, 4, 10, False), [2**-127, 0.0, -(2**-127)])
    assert same(quantize(sub, 7, 4, 10, True), [0.0, 0.0, 0.0])
    # a bias whose R_UF is itself subnormal flushes below it and keeps it
    assert same(quantize(f32([2**-149, 2**-148]), 23, 8, 148, True), [0.0, 2**-148])


@pytest.mark.parametrize("man, exp, bias", [(7, 4, 10), (4, 3, 5), (10, 5, 15), (1, 2, 0), (23, 8, 140), (16, 6, -20)])
def test_quantize_matches_eq2_with_floor(man, exp, bias):
    generator = torch.Generator().manual_seed(man * 100 + exp)
    r_of = 2.0 ** (2**exp - bias - 1)
    low, high = max(-126, -bias - 3), min(127, int(math.log2(r_of)) + 3)
    x = numerics.exp_rand((4000,), low, high, generator=generator)
    expected = f32([scalar_q_eq2(float(v), man, exp, bias) for v in x])
    assert same(quantize(x, man, exp, bias, True), expected)


def test_quantize_rejects_bad_arguments():
    with pytest.raises(TypeError, match="x must be float32"):
        quantize(torch.ones(2, dtype=torch.float64), 7, 4, 10)
    with pytest.raises(ValueError, match="man=24"):
        quantize(torch.ones(2), 24, 4, 10)
    with pytest.raises(ValueError, match="bias=200"):
        quantize(torch.ones(2), 7, 4, 200)
    with pytest.raises(ValueError, match="exp=9"):
        quantize(torch.ones(2), 7, 9, 10)


# ---- the format


def test_default_biases_follow_the_seed():
    fmt = LowbitFormat.make(7, 4)
    assert (fmt.acc_bias, fmt.prod_bias, fmt.chunk) == (10, 12, 16)  # Table 2
    assert fmt.acc_overflow == 63.75 and fmt.acc_underflow == 2**-10
    assert fmt.prod_overflow == 2.0**3 * (2 - 2**-7) and fmt.prod_underflow == 2**-12
    # b_acc = b_prod − round(½·log2 chunk), halves rounded up
    expected = {1: 12, 2: 11, 3: 11, 4: 11, 8: 10, 16: 10, 31: 10, 32: 9, 64: 9, 256: 8, 1000: 7}
    assert {c: LowbitFormat.make(7, 4, chunk=c).acc_bias for c in expected} == expected
    assert LowbitFormat.make(4, 3, prod_bias=5, chunk=1).acc_bias == 5
    assert LowbitFormat.make(4, 5, prod_exp=3).prod_bias == 8


def test_masks_and_names():
    fmt = LowbitFormat.make(7, 4, prod_man=3, prod_exp=3)
    assert fmt.acc_mask == 0xFFFF0000 and fmt.prod_mask == 0xFFF00000
    assert LowbitFormat.make(23, 8, 128, 128).acc_mask == 0xFFFFFFFF
    assert fmt.name == "M7E4_b6_p8M3E3_c16_uf"
    assert fmt.with_underflow(False).name == "M7E4_b6_p8M3E3_c16_nouf"
    assert fmt.with_underflow(False).with_underflow(True) == fmt


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(man=0, exp=4), "man=0"),
        (dict(man=24, exp=4), "man=24"),
        (dict(man=7, exp=1), "exp=1"),
        (dict(man=7, exp=9), "exp=9"),
        (dict(man=7.0, exp=4), "man=7.0"),
        (dict(man=7, exp=4, chunk=0), "chunk=0"),
        (dict(man=7, exp=4, chunk=2.5), "chunk=2.5"),
        (dict(man=7, exp=4, prod_man=30), "prod_man=30"),
        (dict(man=7, exp=4, prod_exp=0), "prod_exp=0"),
        (dict(man=7, exp=8, acc_bias=127, prod_bias=130), "acc_bias=127"),  # R_OF = 2^128·(…) is not finite
        (dict(man=7, exp=4, acc_bias=150, prod_bias=12), "acc_bias=150"),  # R_UF = 2^-150 < 2^-149
        (dict(man=7, exp=4, prod_bias=-120), "prod_bias=-120"),
        (dict(man=7, exp=4, underflow=1), "underflow=1"),
    ],
)
def test_format_errors_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LowbitFormat.make(**kwargs)


# ---- FMAq and the chain


def test_fmaq_hand_cases():
    fmt = LowbitFormat.make(7, 4)  # products: R_OF 15.9375, R_UF 2^-12; accumulator: R_OF 63.75, R_UF 2^-10
    x = f32([1.0, 2**-8, 10.0, 2**-7, 3.0, 1.0])
    w = f32([1.0, 1.0, 10.0, 2**-6, 1 + 2**-6, -1.0])
    s = f32([2**-8, 1.0, 60.0, 0.0, 0.0, 1.0])
    expected = [
        1.0,  # 1 + 2^-8 truncated to 7 mantissa bits: the partial sum is swamped
        1.0,  # the product is swamped entirely (section 2.3, full swamping)
        63.75,  # product saturates at 15.9375, the sum 75.9375 at R_OF
        0.0,  # product 2^-13 < 2^-12 flushes
        3.0 + 3 * 2**-6,  # 3.046875 = 1.1000011b·2: the product's 7 mantissa bits are kept
        0.0,  # exact cancellation gives +0
    ]
    assert same(fmaq(x, w, s, fmt), expected)
    assert same(fmaq(x[3:4], w[3:4], s[3:4], fmt.with_underflow(False)), [2**-13])


def test_chunked_chain_hand_case():
    # chunk 2, M7E4: chunk sums 1 + 2^-8 → 1 and 2^-8 + 2^-8 = 2^-7; then 1 + 2^-7 is kept (7 bits)
    fmt = LowbitFormat.make(7, 4, chunk=2)
    a = f32([[1.0, 2**-8, 2**-8, 2**-8]])
    b = f32([[1.0], [1.0], [1.0], [1.0]])
    assert same(lowbit_matmul_fmt(a, b, fmt), [[1 + 2**-7]])
    assert same(lowbit_matmul_fmt(a, b, LowbitFormat.make(7, 4, chunk=4)), [[1.0]])  # one chain: all swamped


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("kind", ["normal", "uniform", "wide", "positive"])
def test_chain_matches_scalar_definition(fmt, kind):
    generator = torch.Generator().manual_seed(zlib.crc32(f"{fmt.name} {kind}".encode()))  # stable across runs
    for m, k, n in [(3, 37, 2), (1, 1, 1), (2, 16, 3), (2, 70, 1)]:
        a, b = sample(kind, (m, k), generator), sample(kind, (k, n), generator)
        assert same(lowbit_matmul_fmt(a, b, fmt), scalar_chain(a, b, fmt)), (m, k, n)


@pytest.mark.parametrize(
    "fmt",
    [
        LowbitFormat.make(7, 4, 10, 12, underflow=False),
        LowbitFormat.make(23, 8, 140, 142),
        LowbitFormat.make(5, 8, 149, 149, chunk=3),
    ],
    ids=lambda f: f.name,
)
def test_chain_with_subnormal_products_matches_scalar_definition(fmt):
    generator = torch.Generator().manual_seed(21)
    a, b = torch.randn(3, 40, generator=generator) * 2.0**-64, torch.randn(40, 2, generator=generator) * 2.0**-64
    c = lowbit_matmul_fmt(a, b, fmt)
    assert ((c != 0) & (c.abs() < 2.0**-126)).any()  # subnormal results survive
    assert same(c, scalar_chain(a, b, fmt))


@pytest.mark.parametrize("chunk", [1, 16])
def test_fp32_format_without_underflow_is_plain_fp32_accumulation(chunk):
    # M23E8 with b = 128: R_OF is FP32's largest finite value and the mask keeps every bit
    fmt = LowbitFormat.make(23, 8, 128, 128, chunk=chunk, underflow=False)
    generator = torch.Generator().manual_seed(chunk)
    a, b = torch.randn(9, 75, generator=generator), torch.randn(75, 6, generator=generator)
    total = torch.zeros(9, 6)
    for start in range(0, 75, chunk):
        s = torch.zeros(9, 6)
        for k in range(start, min(75, start + chunk)):
            s = s + a[:, k : k + 1] * b[k : k + 1, :]
        total = total + s
    assert same(lowbit_matmul_fmt(a, b, fmt), total)


@pytest.mark.parametrize("underflow", [True, False])
def test_chunk_one_is_one_sequential_chain_when_formats_agree(underflow):
    generator = torch.Generator().manual_seed(7)
    a, b = sample("wide", (5, 53), generator), sample("wide", (53, 4), generator)
    one = LowbitFormat.make(7, 4, 10, 10, chunk=1, underflow=underflow)
    whole = LowbitFormat.make(7, 4, 10, 10, chunk=53, underflow=underflow)
    longer = LowbitFormat.make(7, 4, 10, 10, chunk=1000, underflow=underflow)
    assert same(lowbit_matmul_fmt(a, b, one), lowbit_matmul_fmt(a, b, whole))
    assert same(lowbit_matmul_fmt(a, b, whole), lowbit_matmul_fmt(a, b, longer))


def test_batched_broadcast_and_strided_inputs():
    fmt = LowbitFormat.make(7, 4, chunk=8)
    generator = torch.Generator().manual_seed(3)
    a = torch.randn(2, 1, 5, 29, generator=generator)
    b = torch.randn(3, 29, 4, generator=generator)
    c = lowbit_matmul_fmt(a, b, fmt)
    assert c.shape == (2, 3, 5, 4)
    for i in range(2):
        for j in range(3):
            assert same(c[i, j], scalar_chain(a[i, 0], b[j], fmt))
    at = torch.randn(29, 5, generator=generator).T  # transposed, non-contiguous
    bt = torch.randn(4, 29, generator=generator).T
    assert same(lowbit_matmul_fmt(at, bt, fmt), lowbit_matmul_fmt(at.contiguous(), bt.contiguous(), fmt))


def test_chunk_groups_do_not_change_the_result(monkeypatch):
    from cutlass_ext.lowbit import reference

    fmt = LowbitFormat.make(7, 4, chunk=3)
    generator = torch.Generator().manual_seed(11)
    a, b = torch.randn(4, 100, generator=generator), torch.randn(100, 3, generator=generator)
    whole = lowbit_matmul_fmt(a, b, fmt)
    monkeypatch.setattr(reference, "_GROUP_ELEMENTS", 12 * 5)  # five chunks per group, last group short
    assert same(lowbit_matmul_fmt(a, b, fmt), whole)


def test_empty_k_gives_zeros():
    assert same(lowbit_matmul_fmt(torch.ones(2, 0), torch.ones(0, 3), LowbitFormat.make(7, 4)), torch.zeros(2, 3))


def test_nan_and_inf_inputs():
    fmt = LowbitFormat.make(7, 4)
    a = f32([[inf, 1.0], [inf, 1.0], [nan, 1.0]])
    b = f32([[2.0, 0.0], [1.0, 1.0]])
    c = lowbit_matmul_fmt(a, b, fmt)
    # inf·2 saturates to the product's R_OF, then 15.9375 + 1 = 16.9375 → 16.875; inf·0 and NaN give NaN
    assert same(c, [[16.875, nan], [16.875, nan], [nan, nan]])


def test_lowbit_matmul_keyword_api():
    generator = torch.Generator().manual_seed(5)
    a, b = torch.randn(6, 40, generator=generator), torch.randn(40, 7, generator=generator)
    fmt = LowbitFormat.make(5, 4, 9, 11, chunk=4, underflow=False, prod_man=6)
    kwargs = dict(man=5, exp=4, acc_bias=9, prod_bias=11, chunk=4, underflow=False, prod_man=6)
    assert same(numerics.lowbit_matmul(a, b, **kwargs), lowbit_matmul_fmt(a, b, fmt))
    assert same(lowbit_matmul(a, b, **kwargs), lowbit_matmul_fmt(a, b, fmt))
    with pytest.raises(TypeError):
        lowbit_matmul(a, b, man=7, exp=4)  # the biases are required


@pytest.mark.parametrize(
    "a, b, error, message",
    [
        (torch.ones(2, 3, dtype=torch.float16), torch.ones(3, 2), TypeError, "a must be float32"),
        (torch.ones(2, 3), torch.ones(3, 2, dtype=torch.int32), TypeError, "b must be float32"),
        (torch.ones(2, 3), torch.ones(4, 2), ValueError, "agree on K"),
        (torch.ones(3), torch.ones(3, 2), ValueError, "at least 2 dimensions"),
        (torch.ones(2, 2, 3), torch.ones(3, 3, 2), ValueError, "do not broadcast"),
    ],
)
def test_chain_rejects_bad_operands(a, b, error, message):
    with pytest.raises(error, match=message):
        lowbit_matmul_fmt(a, b, LowbitFormat.make(7, 4))


# ---- Table 1 event counts


def test_events_hand_case():
    fmt = LowbitFormat.make(7, 4, 10, 12, chunk=2)  # products: R_OF 15.9375, R_UF 2^-12; accumulator: 63.75, 2^-10
    a = f32([[1.0, 2**-8, 20.0, 2**-13, 2**-11]])
    b = f32([[1.0], [1.0], [1.0], [1.0], [1.0]])
    events = lowbit_matmul_events(a, b, fmt)
    # chunk 0: 0 + 1 exact; 1 + 2^-8 → 1 (swamping, full). chunk 1: 20 saturates to 15.9375 (product OF);
    # 0 + 15.9375 exact; 2^-13 flushes (product UF), 15.9375 + 0 exact. chunk 2: 2^-11 + 0 = 2^-11 < 2^-10
    # (accumulator UF). Second level: 0 + 1, 1 + 15.9375 = 16.9375 → 16.875 (swamping), 16.875 + 0 exact.
    assert events == dict(
        products=5,
        additions=8,
        prod_overflow=1,
        prod_underflow=1,
        acc_overflow=0,
        acc_underflow=1,
        swamping=2,
        full_swamping=1,
        overflow=1,
        underflow=2,
    )
    # five products saturate at 15.9375; second level: 31.875 + 31.875 = 63.75 = R_OF (eq. 5 counts |y| ≥ R_OF),
    # then 63.75 + 15.9375
    saturating = lowbit_matmul_events(f32([[40.0, 40.0, 40.0, 40.0, 40.0]]), b, fmt)
    assert (saturating["prod_overflow"], saturating["acc_overflow"]) == (5, 2)


def test_events_bounds_on_random_data():
    generator = torch.Generator().manual_seed(1)
    a, b = sample("wide", (8, 300), generator), sample("wide", (300, 5), generator)
    fmt = LowbitFormat.make(4, 3, 5, 5, chunk=16)
    events = lowbit_matmul_events(a, b, fmt)
    assert events["products"] == 8 * 5 * 300 and events["additions"] == 8 * 5 * (300 + 19)
    assert 0 < events["full_swamping"] < events["swamping"] < events["additions"]
    assert events["prod_underflow"] > 0 and events["acc_underflow"] > 0
    exact = lowbit_matmul_events(a, b, LowbitFormat.make(23, 8, 128, 128, underflow=False))
    assert exact["overflow"] == 0 and exact["swamping"] > 0  # FP32 itself rounds


@pytest.mark.parametrize("chunk", [2**31, 2**62, 2**63 - 1])
def test_a_chunk_past_any_k_is_one_chain(chunk):
    g = torch.Generator().manual_seed(chunk % 1000)
    a, b = torch.randn(3, 5, generator=g), torch.randn(5, 4, generator=g)
    huge, whole = (LowbitFormat.make(7, 4, acc_bias=10, chunk=c) for c in (chunk, 5))
    assert torch.equal(lowbit_matmul_fmt(a, b, huge), lowbit_matmul_fmt(a, b, whole))
    assert lowbit_matmul_events(a, b, huge) == lowbit_matmul_events(a, b, whole)
    assert huge.for_depth(0).chunk == 1 and huge.for_depth(5).chunk == 5 and whole.for_depth(9) is whole


def test_numpy_integers_are_sizes_and_stored_as_ints():
    fmt = LowbitFormat.make(np.int64(7), np.int32(4), acc_bias=np.int64(10), chunk=np.int64(4))
    assert fmt == LowbitFormat.make(7, 4, acc_bias=10, chunk=4)
    assert all(type(getattr(fmt, f)) is int for f in ("man", "exp", "acc_bias", "prod_bias", "chunk"))
    with pytest.raises(ValueError, match="chunk=4.0 must be an integer"):
        LowbitFormat.make(7, 4, chunk=4.0)
    with pytest.raises(ValueError, match=r"chunk=tensor\(16.\) must be an integer"):  # a tensor is no size here
        LowbitFormat.make(7, 4, chunk=torch.tensor(16.0))
