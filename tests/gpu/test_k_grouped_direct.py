"""The weight-gradient form (groups cut along K) of the block-scaled kernel written directly on TMA and wgmma: the
collective kernel's bits per group, the FP64 bound, empty groups, a partial last k-block whose next columns hold NaN
(zeroed in shared memory, as the collective kernel's per-group bounds zero them), offsets the kernel refuses (NaN),
accumulation in place and clusters of two."""

import pytest
import torch

import cutlass_ext as ext
from cutlass_ext.build import build_libraries
from cutlass_ext.fp8_block import Fp8BlockConfig
from cutlass_ext.fp8_block.direct import Fp8BlockDirectConfig

from .test_k_grouped_fp8 import check_groups, offsets_of, operands

pytestmark = pytest.mark.gpu

TILES = [
    ((64, 16, 128), 1),
    ((64, 64, 128), 1),
    ((64, 128, 128), 1),
    ((128, 32, 128), 2),
    ((128, 64, 128), 1),
    ((128, 64, 128), 2),
    ((128, 128, 128), 1),
    ((128, 128, 128), 2),
]
DIRECT = [Fp8BlockDirectConfig(out_dtype="fp32", tile=t, cluster=c, k_grouped=True) for t, c in TILES]
# The collective kernel (CUTLASS's blockwise accumulation: total += acc * scale_a * scale_b) whose bits they owe.
COLLECTIVE = Fp8BlockConfig(out_dtype="fp32", scale_n=1, k_grouped=True, scale_a_major="m")


@pytest.fixture(scope="module", autouse=True)
def built():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU")
    failed = [r.error for r in build_libraries([(c,) for c in [*DIRECT, COLLECTIVE]], "90a") if r.library is None]
    assert not failed, failed[0][:2000]


SIZES = [[128, 256, 384], [0, 128, 0, 512, 256, 0], [128, 0, 256, 100], [1024, 128]]


@pytest.mark.parametrize("config", DIRECT, ids=lambda c: c.name)
@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "-".join(map(str, s)))
@pytest.mark.parametrize("m, n", [(256, 384), (136, 200)])
def test_groups_equal_the_collective_kernel_and_the_fp64_bound(config, sizes, m, n):
    k = -(-sum(sizes) // 16) * 16  # K a multiple of 16; the padding columns belong to no group
    a8, b8, scale_a, scale_b = operands(m, n, k, seed=m + n + k)
    offsets = offsets_of(sizes)
    out = ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets, variant=config.name)
    check_groups(out, a8, b8, scale_a, scale_b, sizes)
    collective = ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets, variant=COLLECTIVE.name)
    assert torch.equal(out, collective)


@pytest.mark.parametrize("config", DIRECT, ids=lambda c: c.name)
def test_columns_past_the_last_group_are_not_read_even_as_nan(config):
    sizes, m, n, k = [256, 100], 136, 200, 512  # columns 356..511 belong to no group
    a8, b8, scale_a, scale_b = operands(m, n, k, seed=11)
    a8.view(torch.uint8)[:, 356:] = 0x7F  # e4m3fn NaN
    b8.view(torch.uint8)[:, 356:] = 0x7F
    out = ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets_of(sizes), variant=config.name)
    check_groups(out, a8[:, :356], b8[:, :356], scale_a[:, :3], scale_b[:, :3], sizes)


@pytest.mark.parametrize("config", DIRECT[:2], ids=lambda c: c.name)
def test_refused_offsets_come_out_nan_and_the_rest_as_the_collective(config):
    m, n, k = 136, 200, 384
    a8, b8, scale_a, scale_b = operands(m, n, k, seed=7)
    offsets = torch.tensor([128, 100, 228, 384], dtype=torch.int32, device="cuda")  # group 1 runs backwards
    out = ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets, variant=config.name)
    collective = ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets, variant=COLLECTIVE.name)
    assert out[1].isnan().all() and collective[1].isnan().all()
    for g in (0, 2, 3):
        assert torch.equal(out[g], collective[g]) or (out[g].isnan().all() and collective[g].isnan().all())


def test_accumulates_into_out_in_place():
    config = DIRECT[-1]
    sizes, m, n = [256, 0, 128], 200, 264
    a8, b8, scale_a, scale_b = operands(m, n, sum(sizes), seed=5, distribution="normal")
    c = torch.randn(len(sizes), m, n, device="cuda") * 8
    out = c.clone()
    ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets_of(sizes), out=out, accumulate=True, variant=config.name)
    check_groups(out, a8, b8, scale_a, scale_b, sizes, c=c)
    expected = c.clone()
    ext.k_grouped_gemm_fp8(
        a8, b8, scale_a, scale_b, offsets_of(sizes), out=expected, accumulate=True, variant=COLLECTIVE.name
    )
    assert torch.equal(out, expected)


@pytest.mark.parametrize("config", DIRECT[:2], ids=lambda c: c.name)
def test_k_zero_gives_c_or_zeros(config):
    m, n = 136, 200
    a8, b8, scale_a, scale_b = operands(m, n, 0, seed=3)
    offsets = torch.zeros(3, dtype=torch.int32, device="cuda")
    out = ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets, variant=config.name)
    assert torch.equal(out, torch.zeros(3, m, n, device="cuda"))
    c = torch.randn(3, m, n, device="cuda")
    into = c.clone()
    ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets, out=into, accumulate=True, variant=config.name)
    assert torch.equal(into, c)
