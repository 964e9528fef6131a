"""Property tests of the numerics model the GPU fuzz tests hold the kernels to: the emulated Tensor Core
arithmetic of every mode stays inside `error_bound` (tests/gpu/test_fuzz_gemm.py) over random shapes and value
ranges, and the bound is tight enough that an uncorrected product breaks it at small K (8-24: from K ~ 128 the
worst-case bound outgrows an uncorrected product's typical error; the GPU relres tests catch it there)."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from cutlass_ext import numerics

from .gpu.fuzz_inputs import values
from .gpu.test_fuzz_gemm import DISTRIBUTIONS, MODE_DISTRIBUTIONS, emulated, error_bound

_SCHEMES = {"tf32": "tf32", "markidis": "markidis"}


def _operands(distribution, m, n, k, seed):
    generator = torch.Generator().manual_seed(seed)
    kind_a, kind_b = DISTRIBUTIONS[distribution]
    return values(kind_a, (m, k), generator), values(kind_b, (k, n), generator)


def _model(mode, a, b):
    if mode in ("tf32tf32", "halfhalf"):
        return emulated(mode, a, b)
    if mode == "fp32":
        return a @ b
    return numerics.emulated_gemm(a, b, _SCHEMES[mode], accumulate="rz", mma_k=8 if mode == "tf32" else 16)


@given(
    data=st.data(),
    mode=st.sampled_from(sorted(MODE_DISTRIBUTIONS)),
    m=st.integers(1, 4),
    n=st.integers(1, 4),
    k=st.integers(1, 24),
    seed=st.integers(0, 2**31 - 1),
)
def test_each_modes_model_is_within_its_bound(data, mode, m, n, k, seed):
    distribution = data.draw(st.sampled_from(MODE_DISTRIBUTIONS[mode]))
    a, b = _operands(distribution, m, n, k, seed)
    error = (_model(mode, a, b).double() - a.double() @ b.double()).abs()
    assert (error <= error_bound(mode, a, b)).all()


@given(m=st.integers(2, 4), n=st.integers(2, 4), k=st.integers(8, 24), seed=st.integers(0, 2**31 - 1))
def test_an_uncorrected_product_breaks_the_corrected_bound(m, n, k, seed):
    a, b = _operands("urand", m, n, k, seed)
    plain = numerics.emulated_gemm(a, b, "tf32", accumulate="rz")
    error = (plain.double() - a.double() @ b.double()).abs()
    assert (error > error_bound("tf32tf32", a, b)).any()
    assert (error > error_bound("halfhalf", a, b)).any()
