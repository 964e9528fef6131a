"""Property tests of the low-bit-accumulator reference against its definition written as a scalar loop (the
`lowbit.reference` docstring: Q by bit mask, saturation and flush; FMAq; chunks then the second level), over
random formats and every FP32 value hypothesis draws: subnormals, ±0, ±Inf, NaN, the largest and smallest."""

import struct

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from cutlass_ext import lowbit

from .gpu.fuzz_inputs import same_bits
from .gpu.test_fuzz_lowbit import formats


def _word(x: np.float32) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _value(word: int) -> np.float32:
    return np.float32(struct.unpack("<f", struct.pack("<I", word))[0])


def _q(y: np.float32, mask: int, r_of: float, r_uf: float | None) -> np.float32:
    """Q of one FP32 value: keep the top mantissa bits, saturate at ±R_OF, flush below R_UF to +0."""
    if np.isnan(y):
        return y
    y = _value(_word(y) & mask)
    y = max(min(y, np.float32(r_of)), np.float32(-r_of))
    if r_uf is not None and abs(y) < r_uf:
        return np.float32(0.0)
    return np.float32(y)


def scalar_chain(a: torch.Tensor, b: torch.Tensor, fmt) -> torch.Tensor:
    """C[i, j] by the docstring's chain, one FP32 operation at a time."""
    uf = fmt.underflow

    def q_prod(y):
        return _q(y, fmt.prod_mask, fmt.prod_overflow, fmt.prod_underflow if uf else None)

    def q_acc(y):
        return _q(y, fmt.acc_mask, fmt.acc_overflow, fmt.acc_underflow if uf else None)

    (m, k), n = a.shape, b.shape[1]
    out = np.zeros((m, n), dtype=np.float32)
    with np.errstate(all="ignore"):
        for i in range(m):
            for j in range(n):
                total = np.float32(0.0)
                for start in range(0, k, fmt.chunk):
                    partial = np.float32(0.0)
                    for index in range(start, min(start + fmt.chunk, k)):
                        product = np.float32(a[i, index].item()) * np.float32(b[index, j].item())
                        partial = q_acc(partial + q_prod(product))
                    total = q_acc(total + partial)
                out[i, j] = total
    return torch.from_numpy(out)


FLOATS = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)


@st.composite
def operands(draw):
    m, n, k = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(0, 12))
    # mostly moderate values, so that chains run without saturating at once; any FP32 value among them
    values = st.one_of(st.floats(-8, 8, width=32), FLOATS)
    a = torch.tensor(draw(st.lists(values, min_size=m * k, max_size=m * k)), dtype=torch.float32).reshape(m, k)
    b = torch.tensor(draw(st.lists(values, min_size=k * n, max_size=k * n)), dtype=torch.float32).reshape(k, n)
    return a, b


@given(fmt=formats(), pair=operands())
def test_chain_equals_the_scalar_definition(fmt, pair):
    a, b = pair
    assert same_bits(lowbit.lowbit_matmul_fmt(a, b, fmt), scalar_chain(a, b, fmt))


@given(fmt=formats(), values=st.lists(FLOATS, min_size=1, max_size=64))
def test_quantize_equals_the_scalar_q(fmt, values):
    x = torch.tensor(values, dtype=torch.float32)
    expected = [_q(np.float32(v), fmt.acc_mask, fmt.acc_overflow, fmt.acc_underflow) for v in values]
    assert same_bits(lowbit.quantize(x, fmt.man, fmt.exp, fmt.acc_bias), torch.tensor(expected, dtype=torch.float32))
