"""ext.gemm_fp8 through the shipped tuned table: the winners the sweep picked (gated there with per-tensor
scales) hold the bound with row-wise scales too, at decode and prefill shapes of Llama-3-70B."""

import dataclasses

import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import fp8, numerics, ops, registry
from cutlass_ext.families.sm90_fp8.config import OUT_DTYPES

from .test_gemm_fp8 import FACTOR, fp8_operands, peer_relres

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="needs a Hopper GPU"
)


ACCUMULATIONS = ["fast", "promoted"]
SHAPES = [
    (1, 8192, 8192),
    (16, 8192, 28672),
    (64, 10240, 8192),
    (128, 57344, 8192),
    (256, 57344, 8192),  # 176-wide fast tiles, the stage epilogue promoted
    (256, 8192, 28672),  # the stage epilogue's row (per tensor and row-wise; FP32 output keeps CUTLASS's)
    (256, 10240, 8192),
    (1024, 8192, 8192),
    (4096, 57344, 8192),
]
SCALES_AND_OUTPUTS = [("row", "bf16"), ("tensor", "fp32")]


@pytest.fixture(scope="module", autouse=True)
def winners_built():
    """Build every winner the tests run in one go (in parallel), not one per test."""
    device = torch.device("cuda", torch.cuda.current_device())
    names = {
        fp8.variant_names(device, "e4m3", "e4m3", out, accum, m, n, k)[0]
        for accum in ACCUMULATIONS
        for m, n, k in SHAPES
        for _, out in SCALES_AND_OUTPUTS
    }
    registry.ensure_names_registered(sorted(name for name in names if name), device)


@pytest.mark.parametrize("accum", ACCUMULATIONS)
@pytest.mark.parametrize("m, n, k", SHAPES)
@pytest.mark.parametrize("granularity, out", SCALES_AND_OUTPUTS)
def test_tuned_winners_hold_the_bound(m, n, k, accum, granularity, out):
    """The winners were timed with bf16 output, whose rounding hides Tensor-Core accumulation error: FP32 output
    shows it (cuBLAS FP8 has per-tensor scales with FP32 output)."""
    a, b, scale_a, scale_b = fp8_operands(m, n, k, granularity=granularity, seed=11)
    chosen = fp8._variants(a.device, "e4m3", "e4m3", out, accum, m, n, k)[0]
    default = dataclasses.replace(fp8.DEFAULT_FP8, accum=accum).with_dtypes("e4m3", "e4m3", out).name
    assert chosen != default, "the shipped table has no entry near this shape"
    out_dtype = OUT_DTYPES[out]
    reference = numerics.dequantized_product(a, b, scale_a, scale_b)
    c = ext.gemm_fp8(a, b, scale_a, scale_b, out_dtype=out_dtype, accum=accum)
    # the winner itself ran (the op falls back to the next variant where one refuses the problem): alone, it
    # gives the same bits
    scales = [fp8._scale(s, name, a.device, False) for s, name in ((scale_a, "scale_a"), (scale_b, "scale_b"))]
    alone = ops.gemm_fp8(a, b, *scales, None, out_dtype, [chosen])
    assert torch.equal(c, alone), f"{chosen} did not run: the dispatched call's bits differ from its own"
    ours = numerics.relative_residual(c, reference)
    peer = peer_relres(a, b, scale_a, scale_b, None, out_dtype, accum, reference)
    assert ours <= FACTOR * peer, f"{chosen}: relres {ours:.3g} vs torch._scaled_mm {peer:.3g}"
