"""The benchmarks' peers compute what their rows claim (a peer that returned garbage would make every ratio a lie)."""

import pytest
import torch

from cutlass_ext import numerics

from .helpers import cublas_precision, operands, poison_allocator, reference


@pytest.mark.parametrize("distribution", ["urand(-1,1)", "normal", "type1"])
# example 27 vectorizes by 4 FP32 elements: odd shapes in multiples of 4
@pytest.mark.parametrize("m, n, k", [(1024, 512, 2048), (260, 132, 1004)])
def test_cutlass_3xtf32_peer_is_fp32_accurate(distribution, m, n, k):
    from cutlass_ext import peers  # imports triton

    name, run, prepare = peers.cutlass_3xtf32()
    assert "cutlass3xtf32" in name
    a, b = operands(distribution, m, n, k, seed=m + n + k)
    ref = reference(a, b)
    with cublas_precision("ieee"):
        sgemm = numerics.relative_residual(a @ b, ref)
    with cublas_precision("tf32"):
        tf32 = numerics.relative_residual(a @ b, ref)
    inputs = prepare(a, b)
    assert inputs[1].stride() == (1, k), "example 27 reads B column-major"
    poison_allocator(m, n)
    relres = numerics.relative_residual(run(*inputs), ref)
    # 3xTF32 keeps its sums in the Tensor Core's truncating accumulator: FP32-level, a little behind SGEMM
    assert relres < 4 * sgemm, (relres, sgemm)
    assert relres < tf32 / 50, (relres, tf32)
    torch.cuda.synchronize()


@pytest.mark.parametrize("rows, k", [(8192, 8192), (37, 1040)])
def test_the_weights_read_floor_reads_every_byte_once(rows, k):
    from cutlass_ext import peers_fp8  # imports triton

    weights = (torch.randn(rows, k, device="cuda") * 8).to(torch.float8_e4m3fn)
    expected = weights.reshape(-1).view(torch.int32).long().sum().item()  # the sum of its 4-byte words
    for config in peers_fp8.STREAM_READ_CONFIGS:
        assert peers_fp8.stream_read(weights, config).sum().item() == expected, config
