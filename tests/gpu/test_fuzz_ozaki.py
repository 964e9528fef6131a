"""Property tests of `ext.gemm(mode="int8x8")` (Ozaki scheme II on INT8 Tensor Cores) against its definition,
`ozaki.reference.ozaki_matmul` on the CPU, bit for bit (the `ozaki.gemm` docstring): random shapes (0, 1, primes,
tile edges), strides, broadcast batches and values of any exponent range, including rows whose magnitudes span
FP32's range and subnormals, and Inf and NaN anywhere (their rows and columns come out NaN, with torch's NaN bits)."""

import torch
from hypothesis import given
from hypothesis import strategies as st

import cutlass_ext as ext
from cutlass_ext.ozaki import reference

from .fuzz_inputs import LAYOUTS, SPECIALS, examples, mostly, same_bits, stored, values, with_specials

DISTRIBUTIONS = {
    "normal": "normal",
    "wide": (-60, 60),
    "huge": (90, 120),
    "tiny": (-126, -100),
    "subnormal": "subnormal",
}
BATCHES = [((), ()), ((2,), ()), ((), (2,)), ((2, 1), (1, 2)), ((2,), (2,))]
# the reference's INT8 products run on the CPU: mostly small sizes, now and then a tile edge or a long K
SIZES = st.one_of(st.sampled_from([0, 1, 2, 7, 13]), st.integers(1, 64))
EDGES = mostly(SIZES, st.sampled_from([127, 128, 129]))


@given(data=st.data(), m=EDGES, n=EDGES, k=mostly(SIZES, st.integers(64, 700)), seed=st.integers(0, 2**31 - 1))
@examples(0.5)
def test_int8x8_equals_the_reference_bit_for_bit(data, m, n, k, seed):
    batch_a, batch_b = data.draw(st.sampled_from(BATCHES), label="batches")
    kind_a = DISTRIBUTIONS[data.draw(st.sampled_from(sorted(DISTRIBUTIONS)), label="a's values")]
    kind_b = DISTRIBUTIONS[data.draw(st.sampled_from(sorted(DISTRIBUTIONS)), label="b's values")]
    generator = torch.Generator().manual_seed(seed)
    a = values(kind_a, (*batch_a, m, k), generator)
    b = values(kind_b, (*batch_b, k, n), generator)
    expected = reference.ozaki_matmul(a, b, 8)
    a_gpu = stored(a, data.draw(st.sampled_from(LAYOUTS), label="layout of a"))
    b_gpu = stored(b, data.draw(st.sampled_from(LAYOUTS), label="layout of b"))
    out = ext.gemm(a_gpu, b_gpu, mode="int8x8").cpu()
    assert out.shape == expected.shape and out.dtype == torch.float32
    differ = int((out.view(torch.int32) != expected.view(torch.int32)).sum())
    assert same_bits(out, expected), f"{differ} of {out.numel()} outputs differ from the reference"


@given(
    data=st.data(),
    m=SIZES,
    n=SIZES,
    k=SIZES,
    specials=st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 10**6), SPECIALS), min_size=1, max_size=4),
    seed=st.integers(0, 2**31 - 1),
)
def test_inf_and_nan_give_the_references_words(data, m, n, k, specials, seed):
    generator = torch.Generator().manual_seed(seed)
    a = with_specials(values("normal", (m, k), generator), [(p, v) for o, p, v in specials if o == "a"])
    b = with_specials(values("normal", (k, n), generator), [(p, v) for o, p, v in specials if o == "b"])
    expected = reference.ozaki_matmul(a, b, 8)
    a_gpu = stored(a, data.draw(st.sampled_from(LAYOUTS), label="layout of a"))
    b_gpu = stored(b, data.draw(st.sampled_from(LAYOUTS), label="layout of b"))
    out = ext.gemm(a_gpu, b_gpu, mode="int8x8").cpu()
    assert torch.equal(out.view(torch.int32), expected.view(torch.int32))  # NaN's word too, not any NaN
    sgemm = a.double() @ b.double()
    assert torch.isfinite(out).equal(torch.isfinite(sgemm))  # non-finite exactly where SGEMM's are
