"""Property tests of `ext.gemm(mode="int8x8")` (Ozaki scheme II on INT8 Tensor Cores) against its definition,
`ozaki.reference.ozaki_matmul` on the CPU, bit for bit (the `ozaki.gemm` docstring): random shapes (0, 1, primes,
tile edges), strides, broadcast batches and finite values of any exponent range (the docstring admits finite
inputs and K < 2^17), including rows whose magnitudes span FP32's range and subnormals."""

import math

import torch
from hypothesis import given
from hypothesis import strategies as st

import cutlass_ext as ext
from cutlass_ext import numerics
from cutlass_ext.ozaki import reference

DISTRIBUTIONS = {"normal": None, "wide": (-60, 60), "huge": (90, 120), "tiny": (-126, -100), "subnormal": "subnormal"}
BATCHES = [((), ()), ((2,), ()), ((), (2,)), ((2, 1), (1, 2)), ((2,), (2,))]
# the reference's INT8 products run on the CPU: sizes that keep an example under a second
SIZES = st.one_of(st.sampled_from([0, 1, 2, 7, 13, 127, 128, 129]), st.integers(1, 64))
LAYOUTS = ("contiguous", "transposed", "sliced")


def _draw(kind, shape, generator):
    if kind is None:
        return torch.randn(shape, generator=generator)
    if kind == "subnormal":
        return numerics.exp_rand(shape, -126, -100, generator=generator) * 2.0**-20
    return numerics.exp_rand(shape, *kind, generator=generator)


def _stored(x: torch.Tensor, layout: str) -> torch.Tensor:
    x = x.cuda()
    if layout == "transposed":
        return x.mT.contiguous().mT
    if layout == "sliced":
        return torch.cat([x, torch.full_like(x[..., :3], math.nan)], dim=-1)[..., : x.shape[-1]]
    return x


@given(
    data=st.data(),
    m=SIZES,
    n=SIZES,
    k=st.one_of(SIZES, st.integers(64, 700)),
    seed=st.integers(0, 2**31 - 1),
)
def test_int8x8_equals_the_reference_bit_for_bit(data, m, n, k, seed):
    batch_a, batch_b = data.draw(st.sampled_from(BATCHES), label="batches")
    kind_a = DISTRIBUTIONS[data.draw(st.sampled_from(sorted(DISTRIBUTIONS)), label="a's values")]
    kind_b = DISTRIBUTIONS[data.draw(st.sampled_from(sorted(DISTRIBUTIONS)), label="b's values")]
    generator = torch.Generator().manual_seed(seed)
    a = _draw(kind_a, (*batch_a, m, k), generator)
    b = _draw(kind_b, (*batch_b, k, n), generator)
    expected = reference.ozaki_matmul(a, b, 8)
    a_gpu = _stored(a, data.draw(st.sampled_from(LAYOUTS), label="layout of a"))
    b_gpu = _stored(b, data.draw(st.sampled_from(LAYOUTS), label="layout of b"))
    out = ext.gemm(a_gpu, b_gpu, mode="int8x8").cpu()
    assert out.shape == expected.shape and out.dtype == torch.float32
    same = (out.view(torch.int32) == expected.view(torch.int32)) | (out.isnan() & expected.isnan())
    assert same.all(), f"{int((~same).sum())} of {out.numel()} outputs differ from the reference"
