"""Property tests of argument checking without a GPU: whatever is wrong, the error is raised before any kernel and
names the bad argument (the mode, then each operand's dtype, then its device), in the order the docstrings give."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import cutlass_ext as ext

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.float8_e4m3fn]


@given(
    mode=st.sampled_from([*ext.MODES, "tf32x3", "FP32", ""]),
    a_dtype=st.sampled_from(DTYPES),
    b_dtype=st.sampled_from(DTYPES),
    a_dims=st.integers(1, 4),
    b_dims=st.integers(1, 4),
)
def test_gemm_names_the_first_bad_argument(mode, a_dtype, b_dtype, a_dims, b_dims):
    a = torch.zeros((2,) * a_dims).to(a_dtype)
    b = torch.zeros((2,) * b_dims).to(b_dtype)
    if mode not in ext.MODES:
        expected, match = ValueError, f"mode={mode!r} is not one of"
    elif a_dtype != torch.float32 or b_dtype != torch.float32:
        expected, match = TypeError, ("a" if a_dtype != torch.float32 else "b") + " must be float32"
    else:
        expected, match = ValueError, "a must be a CUDA tensor"
    with pytest.raises(expected, match=match):
        ext.gemm(a, b, mode=mode)


@given(
    a_dtype=st.sampled_from(DTYPES + [torch.float8_e5m2]),
    b_dtype=st.sampled_from(DTYPES + [torch.float8_e5m2]),
    out_dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int8]),
    accum=st.sampled_from(["promoted", "fast", "slow"]),
)
def test_gemm_fp8_names_the_first_bad_argument(a_dtype, b_dtype, out_dtype, accum):
    fp8 = (torch.float8_e4m3fn, torch.float8_e5m2)
    a, b = torch.zeros(4, 16).to(a_dtype), torch.zeros(8, 16).to(b_dtype)
    if accum == "slow":
        expected, match = ValueError, "accum='slow' is not one of"
    elif a_dtype not in fp8 or b_dtype not in fp8:
        expected, match = TypeError, "^a" if a_dtype not in fp8 else "^b"
    elif out_dtype not in (torch.bfloat16, torch.float16, torch.float32):
        expected, match = TypeError, "out_dtype"
    else:
        expected, match = ValueError, "a must be a CUDA tensor"
    with pytest.raises(expected, match=match):
        ext.gemm_fp8(a, b, 1.0, 1.0, out_dtype=out_dtype, accum=accum)


@given(
    a_dims=st.integers(0, 4),
    b_dims=st.integers(0, 4),
    k_a=st.integers(1, 3),
    k_b=st.integers(1, 3),
    dtype=st.sampled_from(DTYPES[:4] + [torch.int32]),
)
def test_lowbit_matmul_names_the_bad_operand(a_dims, b_dims, k_a, k_b, dtype):
    config = ext.lowbit.LowbitConfig(ext.lowbit.LowbitFormat.make(7, 4))
    a = torch.zeros(((2,) * (a_dims - 2) + (2, k_a))[-a_dims:] if a_dims else ()).to(dtype)  # (…, M, K)
    b = torch.zeros(((2,) * (b_dims - 2) + (k_b, 2))[-b_dims:] if b_dims else ()).to(dtype)  # (…, K, N)
    if not dtype.is_floating_point:
        expected, match = TypeError, "a must be a floating-point tensor"
    elif a_dims < 2 or b_dims < 2:
        expected, match = ValueError, "at least 2 dimensions"
    elif k_a != k_b:
        expected, match = ValueError, "must agree on K"
    else:
        assert ext.lowbit.matmul(a, b, config).shape[-2:] == (2, 2)
        return
    with pytest.raises(expected, match=match):
        ext.lowbit.matmul(a, b, config)


@given(k=st.sampled_from([ext.ozaki.MAX_K + 1, 2**17 + 5]), mode=st.sampled_from(["int8x6", "int8x8"]))
def test_ozaki_refuses_k_past_its_limit_before_any_work(k, mode):
    """K < 2^17 (the docstring): INT32 sums of INT8 residue products would overflow past it."""
    a, b = torch.ones(2, k), torch.ones(k, 3)
    with pytest.raises(ValueError, match=f"K={k} exceeds {ext.ozaki.MAX_K}"):
        ext.gemm(a, b, mode=mode)
