"""FP32-accurate modes against cuBLAS SGEMM (seed 000 section 4.1) and against their numerics emulation.

Set CUTLASS_EXT_ACCURACY_CSV to a path to keep every measured row as a table.
"""

import os
import statistics

import pandas as pd
import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import numerics

from .helpers import cublas_precision, operands, poison_allocator, reference

# (m = n, k): the seed's sizes, with m = n = 256 where k is deep
SIZES = [(1024, 256), (1024, 1024), (1024, 4096), (256, 16384), (256, 65536)]
# seed 4.1.1: tf32tf32 holds FP32's whole range; halfhalf holds Types 2-3 only through exact scaling
CASES = [("tf32tf32", d) for d in ["urand(-1,1)", "type1", "type2", "type3", "type4"]] + [
    ("halfhalf", d) for d in ["urand(-1,1)", "type1", "type2", "type3"]
]
SEEDS = 3
_rows = []


@pytest.fixture(scope="module", autouse=True)
def accuracy_table():
    yield
    path = os.environ.get("CUTLASS_EXT_ACCURACY_CSV")
    if path and _rows:
        pd.DataFrame(_rows).to_csv(path, index=False)


def mean_relres(mode, distribution, m, k):
    ours, cublas = [], []
    for seed in range(SEEDS):
        a, b = operands(distribution, m, m, k, seed=1000 * seed + k)
        ref = reference(a, b)
        poison_allocator(m, m)
        c = ext.gemm(a, b, mode=mode)
        assert torch.isfinite(c).all(), f"{mode} returned non-finite values where FP32 SGEMM is finite"
        ours.append(numerics.relative_residual(c, ref))
        with cublas_precision("ieee"):
            cublas.append(numerics.relative_residual(a @ b, ref))
    result = statistics.mean(ours), statistics.mean(cublas)
    _rows.append(
        {
            "mode": mode,
            "distribution": distribution,
            "m": m,
            "n": m,
            "k": k,
            "seeds": SEEDS,
            "relres": result[0],
            "cublas_fp32_relres": result[1],
            "ratio": result[0] / result[1],
        }
    )
    return result


@pytest.mark.parametrize("m, k", SIZES)
@pytest.mark.parametrize("mode, distribution", CASES)
def test_corrected_modes_match_cublas_sgemm(mode, distribution, m, k):
    ours, cublas = mean_relres(mode, distribution, m, k)
    assert ours <= 1.1 * cublas, f"{mode} relres {ours:.3g} vs cuBLAS FP32 {cublas:.3g}"


def test_markidis_loses_accuracy_as_k_grows():
    """seed Figure 1: RZ inside the Tensor Core makes Markidis' error grow with k, unlike FP32 SGEMM."""
    short, _cublas_short = mean_relres("markidis", "urand(-1,1)", 1024, 256)
    deep, cublas_deep = mean_relres("markidis", "urand(-1,1)", 1024, 4096)
    assert deep > 4 * short
    assert deep > 8 * cublas_deep


# the kernels' instruction k: TF32 m16n8k8, FP16 m16n8k16 (kernels/split_mma.h)
MMA_K = {"tf32tf32": 8, "halfhalf": 16, "markidis": 16}


@pytest.mark.parametrize("scheme, fold", [("tf32tf32", "block"), ("halfhalf", "step")])
def test_corrected_kernels_agree_with_their_emulation(scheme, fold):
    a, b = operands("urand(-1,1)", 48, 40, 264, seed=11)
    # tf32tf32 chains one MMA step's three products in a fresh accumulator: a block of one step
    mma_k = MMA_K[scheme]
    emulated = numerics.emulated_gemm(a, b, scheme, accumulate="rz", fold=fold, mma_k=mma_k, block_k=mma_k).double()
    kernel = ext.gemm(a, b, mode=scheme)
    # halfhalf's power-of-two scaling is exact, so the emulation needs none for these magnitudes
    assert numerics.relative_residual(kernel, emulated) < 5e-7


def test_markidis_kernel_loses_what_the_rz_model_predicts():
    """The seed's mma_rz model predicts the size of Markidis' loss on the hardware, not its bits: the Tensor
    Core aligns products to the largest exponent before truncating, the model truncates a 25-bit running sum."""
    # enough output tiles that no split-K shortens the RZ chains the model is compared with
    a, b = operands("urand(-1,1)", 2048, 2048, 2048, seed=12)
    ref = reference(a, b)
    modelled = numerics.relative_residual(
        numerics.emulated_gemm(a, b, "markidis", accumulate="rz", mma_k=MMA_K["markidis"]), ref
    )
    measured = numerics.relative_residual(ext.gemm(a, b, mode="markidis"), ref)
    assert modelled / 3 < measured < 3 * modelled
    assert measured > 10 * numerics.relative_residual(
        numerics.emulated_gemm(a, b, "markidis", accumulate="rn", mma_k=MMA_K["markidis"]), ref
    )


@pytest.mark.parametrize("mode", ["tf32tf32", "halfhalf", "markidis", "tf32"])
def test_inf_and_nan_propagate(mode):
    """Outputs that SGEMM makes NaN or Inf are NaN or Inf, Infs keep their sign, finite ones stay finite.

    Known deviation of the split modes: where SGEMM gives ±Inf, a split mode can give NaN, when the finite
    factor of an Inf is exact in the low precision (its lo part is 0, and Inf·0 is NaN).
    """
    a, b = operands("normal", 64, 48, 96, seed=13)
    a[0, 5] = float("inf")
    a[1, 7] = float("nan")
    b[3, 2] = float("-inf")
    ours = ext.gemm(a, b, mode=mode)
    with cublas_precision("ieee"):
        sgemm = a @ b
    assert torch.equal(torch.isfinite(ours), torch.isfinite(sgemm))
    assert ours[sgemm.isnan()].isnan().all()
    both_inf = ours.isinf() & sgemm.isinf()
    assert torch.equal(ours[both_inf], sgemm[both_inf])
    if mode == "tf32":
        assert torch.equal(ours.isinf(), sgemm.isinf())


def test_halfhalf_scaling_rescues_what_fp16_cannot_hold():
    """Type 4 operands underflow FP16 entirely; scaled, halfhalf keeps FP32-level accuracy on them (not the
    1.1x bound: their rows span 2^65, past the ~2^29 that halfhalf holds at full precision)."""
    a, b = operands("type4", 256, 256, 1024, seed=14)
    assert (a.half() == 0).all()
    ref = reference(a, b)
    with cublas_precision("ieee"):
        sgemm = numerics.relative_residual(a @ b, ref)
    assert numerics.relative_residual(ext.gemm(a, b, mode="halfhalf"), ref) <= 2 * sgemm
