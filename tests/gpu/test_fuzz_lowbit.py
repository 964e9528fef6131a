"""Property tests of `ext.lowbit.matmul` on CUDA against the bit-exact reference (`lowbit_matmul_fmt` on the CPU,
seed 002 eq. 2 and Fig. 1): random formats (mantissa and exponent widths, biases, a product format of its own,
chunk, underflow), shapes (0, 1, primes, one dimension past 65535), strides, broadcast batches, input dtypes (cast
to FP32, as the docstring says) and values (subnormals, huge and tiny exponents, NaN and ±Inf, which follow the
reference's definition: NaN stays NaN, ±Inf saturates to ±R_OF). Gradients of every STE other than the identity
equal `reference_grads` bit for bit where no batch is broadcast (a broadcast batch sums its gradients in
autograd's order: equal to FP32 rounding); the identity STE's are cuBLAS GEMMs, equal to FP32 rounding."""

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

import cutlass_ext as ext
from cutlass_ext import lowbit

from .fuzz_inputs import LAYOUTS, SPECIALS, examples, mostly, same_bits, stored, values, with_specials

# value ranges (fuzz_inputs.values)
DISTRIBUTIONS = {
    "normal": "normal",
    "narrow": (-4, 3),
    "wide": (-40, 40),
    "huge": (60, 127),
    "tiny": (-126, -90),
    "subnormal": "subnormal",
}
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
# (batch of a, batch of b) pairs that broadcast
BATCHES = [((), ()), ((2,), ()), ((), (3,)), ((2, 1), (3,)), ((2, 3), (1, 3)), ((2,), (2,))]
# the reference runs on the CPU: mostly small sizes, now and then a large one
SIZES = st.one_of(st.sampled_from([0, 1, 2, 3, 7, 13, 31, 32, 33, 64, 65]), st.integers(1, 64))
ROWS = mostly(SIZES, st.integers(66, 130))
DEPTHS = mostly(SIZES, st.integers(120, 700))


def _bias(draw, exp: int) -> int:
    """A bias near the seed's default 2^(E−1) (note under Table 1), inside the range `LowbitFormat` admits."""
    low, high = lowbit.bias_range(exp)
    return min(max(2 ** (exp - 1) + draw(st.integers(-6, 10)), low), high)


@st.composite
def formats(draw):
    man, exp = draw(st.integers(1, 23)), draw(st.integers(2, 8))
    prod_man = draw(st.one_of(st.just(man), st.integers(1, 23)))
    prod_exp = draw(st.one_of(st.just(exp), st.integers(2, 8)))
    chunk = draw(st.sampled_from([1, 2, 5, 16, 32, 64, 1000]))
    underflow = draw(st.booleans())
    return lowbit.LowbitFormat.make(
        man, exp, _bias(draw, exp), _bias(draw, prod_exp), chunk, underflow, prod_man, prod_exp
    )


@given(data=st.data(), fmt=formats(), m=ROWS, n=ROWS, k=DEPTHS, seed=st.integers(0, 2**31 - 1))
@examples(0.5)
def test_forward_equals_the_reference_bit_for_bit(data, fmt, m, n, k, seed):
    batch_a, batch_b = data.draw(st.sampled_from(BATCHES), label="batches")
    kind_a = DISTRIBUTIONS[data.draw(st.sampled_from(sorted(DISTRIBUTIONS)), label="a's values")]
    kind_b = DISTRIBUTIONS[data.draw(st.sampled_from(sorted(DISTRIBUTIONS)), label="b's values")]
    generator = torch.Generator().manual_seed(seed)
    a = values(kind_a, (*batch_a, m, k), generator)
    b = values(kind_b, (*batch_b, k, n), generator)
    specials = st.lists(st.tuples(st.integers(0, 10**6), SPECIALS))
    a = with_specials(a, data.draw(specials, label="specials in a"))
    b = with_specials(b, data.draw(specials, label="specials in b"))
    dtype_a, dtype_b = data.draw(st.sampled_from(DTYPES), label="dtype of a"), data.draw(st.sampled_from(DTYPES))
    a, b = a.to(dtype_a), b.to(dtype_b)
    expected = lowbit.lowbit_matmul_fmt(a.float(), b.float(), fmt)
    a_gpu = stored(a, data.draw(st.sampled_from(LAYOUTS), label="layout of a"))
    b_gpu = stored(b, data.draw(st.sampled_from(LAYOUTS), label="layout of b"))
    out = ext.lowbit.matmul(a_gpu, b_gpu, lowbit.LowbitConfig(fmt))
    assert out.dtype == torch.float32 and out.device == a_gpu.device
    assert same_bits(out, expected), f"{fmt.name}: {int((out.cpu() != expected).sum())} outputs differ"


@pytest.mark.parametrize(
    "shape",
    [
        (70001, 2, 3),
        (1, 65537, 5),
        (2, 3, 70001),
        (65537, 1, 1, 2),
    ],
)
def test_one_dimension_past_65535(shape):
    *batch, m, n, k = shape
    generator = torch.Generator().manual_seed(sum(shape))
    a = torch.randn((*batch, m, k), generator=generator)
    b = torch.randn((*batch, k, n), generator=generator)
    fmt = lowbit.LowbitFormat.make(7, 4)
    out = ext.lowbit.matmul(a.cuda(), b.cuda(), lowbit.LowbitConfig(fmt))
    assert same_bits(out, lowbit.lowbit_matmul_fmt(a, b, fmt))


def test_rows_past_the_grids_reach():
    """More row blocks than grid y holds (65535 · 128 + 1 rows: past it for every block height up to 128): the
    launcher takes the row blocks past it in further launches, and the product equals the reference."""
    m = 65535 * 128 + 1
    generator = torch.Generator().manual_seed(m)
    a, b = torch.randn((m, 2), generator=generator), torch.randn((2, 1), generator=generator)
    fmt = lowbit.LowbitFormat.make(7, 4)
    out = ext.lowbit.matmul(a.cuda(), b.cuda(), lowbit.LowbitConfig(fmt))
    assert same_bits(out, lowbit.lowbit_matmul_fmt(a, b, fmt))


@given(
    data=st.data(),
    fmt=formats(),
    ste=st.sampled_from(lowbit.STES),
    m=st.integers(1, 12),
    n=st.integers(1, 12),
    k=st.integers(1, 70),
    seed=st.integers(0, 2**31 - 1),
)
@example(
    data=None,
    fmt=lowbit.LowbitFormat.make(4, 3, acc_bias=3, prod_bias=4, chunk=32),
    ste="recursive-of",
    m=5,
    n=7,
    k=40,
    seed=3,
).via("windows that start mid-chunk")
def test_gradients_equal_the_ste_reference(data, fmt, ste, m, n, k, seed):
    batch_a, batch_b = data.draw(st.sampled_from(BATCHES), label="batches") if data is not None else ((), ())
    generator = torch.Generator().manual_seed(seed)
    a = values((-10, 10), (*batch_a, m, k), generator)
    b = values((-10, 10), (*batch_b, k, n), generator)
    config = lowbit.LowbitConfig(fmt, ste=ste)
    a_gpu, b_gpu = a.cuda().requires_grad_(), b.cuda().requires_grad_()
    out = ext.lowbit.matmul(a_gpu, b_gpu, config)
    grad_out = torch.randn(out.shape, generator=generator)
    out.backward(grad_out.cuda())
    grad_a, grad_b = lowbit.reference_grads(a, b, grad_out, fmt, ste, config.eps1, config.eps2)
    exact = ste != "identity" and batch_a == batch_b
    for got, expected in ((a_gpu.grad, grad_a), (b_gpu.grad, grad_b)):
        if exact:
            assert same_bits(got, expected)
        else:
            scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
            torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5 * scale)
