"""The block-scaled FP8 kernel written directly on TMA and wgmma (family sm90_fp8_block_direct) through
gemm_fp8_block: the same bits as the CUTLASS-collective kernel whose promotion it mirrors, within the FP64 bound,
at odd shapes, with K- and M-major activation scales, in CUDA graphs and under torch.compile."""

import pytest
import torch

from cutlass_ext import fp8_block
from cutlass_ext.build import build_libraries
from cutlass_ext.fp8_block.direct import Fp8BlockDirectConfig

from .test_fp8_block import check_close, quantized, seeded_bias

pytestmark = pytest.mark.gpu

TILES = [(64, 16, 128), (64, 32, 128), (64, 64, 128), (64, 128, 128)]
TILES += [(128, 32, 128), (128, 64, 128), (128, 128, 128)]
# Clusters of two sharing A: the last unit of an odd tile count along N has one tile past n (N = 384 and 2128 at 128
# wide, 2112 at 64 wide).
CLUSTERED = [(64, 16, 128), (64, 64, 128), (128, 128, 128)]
VARIANTS = [Fp8BlockDirectConfig(tile=tile) for tile in TILES]
VARIANTS += [Fp8BlockDirectConfig(tile=tile, cluster=2) for tile in CLUSTERED]
# The collective kernel whose promotion the direct one mirrors (every tile of it gives these bits).
STOCK = "fp8block_e4m3e4m3_bf16_64x128x128_c1x1_pp_sb128"
SHAPES = [(1, 256, 256), (37, 384, 528), (64, 2112, 7168), (130, 2128, 1040), (257, 1024, 128), (1000, 1536, 768)]


@pytest.fixture(scope="module", autouse=True)
def built():
    """Every variant the tests run, built in one go (in parallel)."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU")
    configs = VARIANTS + [Fp8BlockDirectConfig(tile=(64, 64, 128), scale_a_major="m")]
    failed = [r.error for r in build_libraries([(c,) for c in configs], "90a", verbose=False) if r.library is None]
    assert not failed, failed[0][:2000]


@pytest.mark.parametrize("config", VARIANTS, ids=lambda c: c.name)
@pytest.mark.parametrize("m, n, k", SHAPES)
@pytest.mark.parametrize("distribution", ["normal", "wide", "outliers"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_same_bits_as_the_collective_kernel(config, m, n, k, distribution, with_bias):
    a8, b8, scale_a, scale_b = quantized(m, n, k, distribution, (128, 128), seed=m + n + k)
    bias = seeded_bias(n, m).bfloat16() * 10 if with_bias else None
    out = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, bias=bias, variant=config.name)
    check_close(out, a8, b8, scale_a, scale_b, 128, bias)
    stock = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, bias=bias, variant=STOCK)
    assert torch.equal(out, stock)


@pytest.mark.parametrize("m, n, k", [(5, 320, 640), (200, 2112, 1536)])
def test_m_major_activation_scales_give_the_same_bits(m, n, k):
    a8, b8, scale_a, scale_b = quantized(m, n, k, "wide", (128, 128), seed=k)
    k_major = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, variant="fp8direct_e4m3e4m3_bf16_64x64x128")
    m_major = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, variant="fp8direct_e4m3e4m3_bf16_64x64x128_am")
    assert torch.equal(m_major, k_major)


@pytest.mark.parametrize("variant", ["fp8direct_e4m3e4m3_bf16_64x64x128", "fp8direct_e4m3e4m3_bf16_64x64x128_mc2"])
def test_more_tiles_than_sms(variant):
    """Each persistent CTA runs ~31 tiles (M = N = 4096 at 64x64: 4096 tiles), the ring's phases wrapping across
    them (in a cluster, both CTAs' rings, released by each other's warps)."""
    a8, b8, scale_a, scale_b = quantized(4096, 4096, 1024, "normal", (128, 128), seed=5)
    out = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, variant=variant)
    stock = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, variant=STOCK)
    assert torch.equal(out, stock)


def test_graph_capture_and_compile():
    a8, b8, scale_a, scale_b = quantized(48, 512, 384, "normal", (128, 128), seed=9)
    variant = "fp8direct_e4m3e4m3_bf16_128x64x128"
    eager = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, variant=variant)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, variant=variant)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)
    compiled = torch.compile(lambda *xs: fp8_block.gemm_fp8_block(*xs, variant=variant), fullgraph=True)
    assert torch.equal(compiled(a8, b8, scale_a, scale_b), eager)
