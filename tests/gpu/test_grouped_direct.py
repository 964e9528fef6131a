"""The grouped (mixture-of-experts) form of the block-scaled kernel written directly on TMA and wgmma: each group's
rows equal the dense direct kernel's on them, bit for bit, and lie within the FP64 bound; contiguous and masked
layouts with empty, odd and oversized groups, tiles reaching into the next group's rows, clusters of two, and group
sizes that change between CUDA-graph replays."""

import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import fp8_block
from cutlass_ext.build import build_libraries
from cutlass_ext.fp8_block.direct import Fp8BlockDirectConfig

from .test_fp8_block import check_close, draw
from .test_grouped_fp8 import check_contiguous, experts, offsets_of

pytestmark = pytest.mark.gpu

TILES = [((64, 32, 128), 1), ((64, 64, 128), 1), ((128, 64, 128), 1), ((128, 128, 128), 1)]
TILES += [((64, 64, 128), 2), ((128, 128, 128), 2)]
GROUPED = [Fp8BlockDirectConfig(tile=tile, cluster=cluster, grouped=True) for tile, cluster in TILES]


def dense_twin(config):
    """The dense variant of the same tile: what every group's rows must equal."""
    return Fp8BlockDirectConfig(tile=config.tile)


@pytest.fixture(scope="module", autouse=True)
def built():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU")
    configs = list(dict.fromkeys([*GROUPED, *map(dense_twin, GROUPED)]))
    failed = [r.error for r in build_libraries([(c,) for c in configs], "90a", verbose=False) if r.library is None]
    assert not failed, failed[0][:2000]


def check_group(out_rows, a8, b8, scale_a, scale_b, config):
    dense = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, variant=dense_twin(config).name)
    assert torch.equal(out_rows, dense)
    check_close(out_rows, a8, b8, scale_a, scale_b, 128)


SIZES = [[0, 1, 37, 128, 129, 300], [5], [200, 0, 0, 64, 0, 1, 0, 255]]


@pytest.mark.parametrize("config", GROUPED, ids=lambda c: c.name)
@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "-".join(map(str, s)))
@pytest.mark.parametrize("n, k", [(384, 528), (2112, 1024)])
def test_contiguous_layout_equals_the_dense_kernel_per_group(config, sizes, n, k):
    m = sum(sizes)
    a8, scale_a = ext.quantize_fp8(draw("wide", (m, k), m + k), granularity="block", block=(1, 128))
    b8, scale_b = experts(len(sizes), n, k, (128, 128), seed=n)
    out = ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets=offsets_of(sizes), variant=config.name)
    assert out.shape == (m, n)
    check_contiguous(out, a8, b8, scale_a, scale_b, 128, sizes, lambda *group: check_group(*group, config))


@pytest.mark.parametrize("config", GROUPED, ids=lambda c: c.name)
def test_masked_layout_equals_the_dense_kernel_per_group(config):
    counts = [0, 96, 1, 200, 33]  # 200: past the capacity, clamped to it
    groups, capacity, n, k = len(counts), 96, 320, 640
    a8, scale_a = ext.quantize_fp8(draw("outliers", (groups, capacity, k), 3), granularity="block", block=(1, 128))
    b8, scale_b = experts(groups, n, k, (128, 128), seed=4)
    masked = torch.tensor(counts, dtype=torch.int32, device="cuda")
    out = ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, masked_counts=masked, variant=config.name)
    assert out.shape == (groups, capacity, n)
    for g, count in enumerate(counts):
        rows = min(count, capacity)
        if rows:
            check_group(out[g, :rows], a8[g, :rows], b8[g], scale_a[g, :rows], scale_b[g], config)


def test_offsets_change_between_graph_replays():
    config = GROUPED[-1]
    n, k, m = 256, 384, 400
    a8, scale_a = ext.quantize_fp8(draw("normal", (m, k), 7), granularity="block", block=(1, 128))
    b8, scale_b = experts(4, n, k, (128, 128), seed=8)
    offsets = offsets_of([100, 100, 100, 100])
    ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets=offsets, variant=config.name)  # loaded before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets=offsets, variant=config.name)
    for sizes in ([100, 100, 100, 100], [0, 400, 0, 0], [1, 2, 3, 394]):
        offsets.copy_(offsets_of(sizes))
        graph.replay()
        torch.cuda.synchronize()
        eager = ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets=offsets, variant=config.name)
        start = 0
        for size in sizes:  # rows no group owns are unspecified: compare the owned ones
            assert torch.equal(out[start : start + size], eager[start : start + size])
            start += size
