"""ext.gemm_fp8 through the shipped tuned table: the winners the sweep picked (gated there with per-tensor
scales) hold the bound with row-wise scales too, at decode and prefill shapes of Llama-3-70B."""

import dataclasses

import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import fp8, numerics

from .test_gemm_fp8 import FACTOR, fp8_operands, peer_relres

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="needs a Hopper GPU"
)


@pytest.mark.parametrize("accum", ["fast", "promoted"])
@pytest.mark.parametrize("m, n, k", [(1, 8192, 8192), (16, 8192, 28672), (64, 10240, 8192), (1024, 8192, 8192)])
def test_tuned_winners_hold_the_bound(m, n, k, accum):
    a, b, scale_a, scale_b = fp8_operands(m, n, k, granularity="row", seed=11)
    chosen = fp8._variants(a.device, "e4m3", "e4m3", "bf16", accum, m, n, k)[0]
    default = dataclasses.replace(fp8.DEFAULT_FP8, accum=accum).name
    assert chosen != default, "the shipped table has no entry near this shape"
    reference = numerics.dequantized_product(a, b, scale_a, scale_b)
    c = ext.gemm_fp8(a, b, scale_a, scale_b, accum=accum)
    ours = numerics.relative_residual(c, reference)
    peer = peer_relres(a, b, scale_a, scale_b, None, torch.bfloat16, accum, reference)
    assert ours <= FACTOR * peer, f"{chosen}: relres {ours:.3g} vs torch._scaled_mm {peer:.3g}"
