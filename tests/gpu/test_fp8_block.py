"""Block-scaled FP8 GEMM on a Hopper GPU: every scale form and output type against the FP64 product of the
dequantized inputs, partial k-blocks and odd M, the variants, gemm_fp8's dispatch, torch.compile, CUDA graphs and
bad input."""

import dataclasses
from pathlib import Path

import pytest
import torch
import yaml

import cutlass_ext as ext
from cutlass_ext import fp8_block
from cutlass_ext.build import build_libraries
from cutlass_ext.families.rules import DeviceLimits, apply_rules
from cutlass_ext.fp8_block import Fp8BlockConfig
from cutlass_ext.fp8_block import filters as block_filters
from cutlass_ext.fp8_block import space as block_space

from . import early_writer

pytestmark = pytest.mark.gpu

# Output rounding of each output type relative to |D|, with the FP32 scaling's few roundings.
OUT_EPS = {torch.bfloat16: 2.0**-8 + 3 * 2.0**-24, torch.float16: 2.0**-11 + 3 * 2.0**-24, torch.float32: 4 * 2.0**-24}
# The Tensor Core's FP8 sums (tests/gpu/test_fuzz_fp8.py's bound): each k = 32 instruction's sum is aligned to its
# largest exponent and truncated to about 13 fractional bits, 2^-12 of the magnitudes per instruction and per
# accumulator update; a 128-deep k-block, scaled and promoted into FP32, carries 128/32 + 1 of them.
ACCUMULATION_EPS = 5 * 2.0**-12
# Half the spacing of each output type's subnormals: the absolute rounding error below its normal range.
SUBNORMAL_ROUNDING = {torch.bfloat16: 2.0**-134, torch.float16: 2.0**-25, torch.float32: 2.0**-150}

DENSE_VARIANTS = [
    Fp8BlockConfig(out_dtype="bf16", scheduler="streamk"),
    Fp8BlockConfig(out_dtype="bf16", scheduler="streamk", scale_n=1),
    Fp8BlockConfig(out_dtype="fp16", scheduler="streamk"),
    Fp8BlockConfig(out_dtype="fp32", scheduler="streamk"),
    Fp8BlockConfig(),
    Fp8BlockConfig(tile=(64, 128, 128), schedule="pingpong"),
    Fp8BlockConfig(scheduler="splitk", splits=4),
    Fp8BlockConfig(tile=(128, 32, 128), swap_ab=True, scheduler="streamk"),
    Fp8BlockConfig(scale_a_major="m"),
]


# Each with its overlapped-promotion twin: the same FP32 operations in the same order, so the same bits. They
# cover the scale cases of the promotion (per-row A with one B scale per tile, per-row A and per-column B, the
# swapped kernel's one A scale and per-column B) and the schedules and schedulers.
OVERLAPPED_TWINS = [
    Fp8BlockConfig(),
    Fp8BlockConfig(scale_a_major="m"),
    Fp8BlockConfig(tile=(64, 128, 128), schedule="pingpong"),
    Fp8BlockConfig(scheduler="streamk"),
    Fp8BlockConfig(scheduler="streamk", scale_n=1),
    Fp8BlockConfig(tile=(128, 32, 128), swap_ab=True),
    Fp8BlockConfig(tile=(64, 32, 128), swap_ab=True, schedule="pingpong"),
    Fp8BlockConfig(tile=(64, 64, 128), swap_ab=True, schedule="pingpong"),
]


OUT_DTYPES = {name: dtype for dtype, name in fp8_block.api.OUT_DTYPES.items()}
# 256-row tiles promote each warpgroup's 128 rows 64 at a time (kernels/sm90_fp8_block_wave_promotion.hpp): the
# same FP32 operations per output as the 128-row tile's, so the same bits, under every scale case, scheduler and
# cluster shape they are swept with. (Stream-K gives the same bits only while it keeps each tile's K in one CTA,
# as it does at the test's shapes; where it splits K, tiles of other sizes are split elsewhere.)
WAVE_TWINS = [
    (Fp8BlockConfig(), Fp8BlockConfig(tile=(256, 128, 128))),
    (Fp8BlockConfig(), Fp8BlockConfig(tile=(256, 128, 128), cluster=(1, 2))),
    (Fp8BlockConfig(), Fp8BlockConfig(tile=(256, 128, 128), cluster=(2, 1))),
    (Fp8BlockConfig(scale_a_major="m"), Fp8BlockConfig(tile=(256, 128, 128), scale_a_major="m")),
    (Fp8BlockConfig(scheduler="streamk"), Fp8BlockConfig(tile=(256, 128, 128), scheduler="streamk")),
    (
        Fp8BlockConfig(scheduler="streamk", scale_n=1),
        Fp8BlockConfig(tile=(256, 128, 128), scheduler="streamk", scale_n=1),
    ),
    (
        Fp8BlockConfig(out_dtype="fp32", scheduler="streamk"),
        Fp8BlockConfig(tile=(256, 128, 128), out_dtype="fp32", scheduler="streamk"),
    ),
    # 128-row tiles across the 128-row weight blocks (their scales expanded by the API), same mainloop
    (Fp8BlockConfig(), Fp8BlockConfig(tile=(128, 176, 128))),
    (Fp8BlockConfig(cluster=(2, 1)), Fp8BlockConfig(tile=(128, 192, 128), cluster=(2, 1))),
    (Fp8BlockConfig(scale_a_major="m"), Fp8BlockConfig(tile=(128, 176, 128), scale_a_major="m")),
    (Fp8BlockConfig(scheduler="streamk"), Fp8BlockConfig(tile=(128, 192, 128), scheduler="streamk")),
    (
        Fp8BlockConfig(out_dtype="fp32", scheduler="streamk"),
        Fp8BlockConfig(tile=(128, 176, 128), out_dtype="fp32", scheduler="streamk"),
    ),
]


# Swapped 64-row ping-pong tiles: each warpgroup alone on half a 128-row weight block (both halves read the block's
# scale row in place), the same wgmma shape, scale expressions and order as the 128-row swapped tile's warpgroups.
HALF_BLOCK_TWINS = [
    (
        Fp8BlockConfig(tile=(128, 32, 128), swap_ab=True),
        Fp8BlockConfig(tile=(64, 32, 128), swap_ab=True, schedule="pingpong"),
    ),
    (
        Fp8BlockConfig(tile=(128, 64, 128), swap_ab=True),
        Fp8BlockConfig(tile=(64, 64, 128), swap_ab=True, schedule="pingpong"),
    ),
    (
        Fp8BlockConfig(tile=(128, 32, 128), swap_ab=True, scale_n=1, out_dtype="fp32"),
        Fp8BlockConfig(tile=(64, 32, 128), swap_ab=True, schedule="pingpong", scale_n=1, out_dtype="fp32"),
    ),
]


# Unswapped 64-row ping-pong tiles 32 or 64 wide inside a 128-row weight block (one weight scale per tile and
# k-block, read in place from the block's row): the 64x128 tile's wgmma rows, scale expressions and order, so its
# bits, with CUTLASS's and the overlapped promotion and K- or M-major activation scales.
IN_BLOCK_TWINS = [
    (
        Fp8BlockConfig(tile=(64, 128, 128), schedule="pingpong"),
        Fp8BlockConfig(tile=(64, 32, 128), schedule="pingpong"),
    ),
    (
        Fp8BlockConfig(tile=(64, 128, 128), schedule="pingpong", overlapped=True),
        Fp8BlockConfig(tile=(64, 64, 128), schedule="pingpong", overlapped=True),
    ),
    (
        Fp8BlockConfig(tile=(64, 128, 128), schedule="pingpong", scale_a_major="m"),
        Fp8BlockConfig(tile=(64, 64, 128), schedule="pingpong", scale_a_major="m"),
    ),
]


# Split-K: each tile's K cut across CTAs, the partial tiles reduced through the workspace in a fixed split order,
# so the bits must not depend on which CTA finishes first (the swapped decode kernels, and the 128-row tile).
SPLIT_K = [
    Fp8BlockConfig(tile=(128, 32, 128), swap_ab=True, scheduler="splitk", splits=2),
    Fp8BlockConfig(tile=(128, 32, 128), swap_ab=True, scheduler="splitk", splits=4),
    Fp8BlockConfig(scheduler="splitk", splits=4),
]


# Programmatic dependent launch (kernels/sm90_fp8_block_programmatic_mainloop.hpp) around the same mainloops, so
# the same bits as the plain launch: cooperative and ping-pong kernels, weights as the kernel's B or (swapped) its
# A, tiles inside a weight block, stock and overlapped promotion, with and without the L2 prefetch before the wait.
PROGRAMMATIC = [
    Fp8BlockConfig(programmatic=True, l2_prefetch=8),
    Fp8BlockConfig(tile=(64, 128, 128), schedule="pingpong", overlapped=True, programmatic=True),
    Fp8BlockConfig(tile=(128, 32, 128), swap_ab=True, programmatic=True, l2_prefetch=8),
    Fp8BlockConfig(
        tile=(64, 32, 128), swap_ab=True, schedule="pingpong", overlapped=True, programmatic=True, l2_prefetch=8
    ),
    Fp8BlockConfig(tile=(64, 64, 128), schedule="pingpong", overlapped=True, programmatic=True, l2_prefetch=8),
    Fp8BlockConfig(tile=(64, 64, 128), schedule="pingpong", overlapped=True, programmatic=True),
    Fp8BlockConfig(tile=(64, 32, 128), schedule="pingpong", overlapped=True, programmatic=True),
]


def plain_launch(config):
    return dataclasses.replace(config, programmatic=False, l2_prefetch=0)


def _swept_variants() -> list:
    """The survivors of the shipped sweep space: any of them may be a tuned table's winner."""
    path = Path(__file__).resolve().parents[2] / "configs" / "sm90_fp8_block.yaml"
    configs = block_space.load_space(path, yaml.safe_load(path.read_text()))
    return apply_rules(configs, DeviceLimits.for_arch("90a"), block_filters.RULES).survivors


SWEPT_VARIANTS = _swept_variants()


@pytest.fixture(scope="module", autouse=True)
def built():
    """Every variant this module runs, built in parallel before the first test (not one by one on first use)."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("block-scaled FP8 kernels run on Hopper (sm90)")
    twins = [dataclasses.replace(c, overlapped=True) for c in OVERLAPPED_TWINS]
    waves = [c for pair in WAVE_TWINS + HALF_BLOCK_TWINS + IN_BLOCK_TWINS for c in pair]
    programmatic = PROGRAMMATIC + [plain_launch(c) for c in PROGRAMMATIC]
    variants = list(
        dict.fromkeys(DENSE_VARIANTS + SWEPT_VARIANTS + OVERLAPPED_TWINS + twins + waves + SPLIT_K + programmatic)
    )
    failed = [r for r in build_libraries([(c,) for c in variants], "90a") if r.library is None]
    assert not failed, failed[0].error


def draw(distribution, shape, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, generator=g, device="cuda")
    if distribution == "wide":  # rows and 128-column blocks whose magnitudes differ by up to 2^24
        rows = torch.randint(-12, 13, (*shape[:-1], 1), generator=g, device="cuda")
        blocks = torch.randint(-12, 13, (*shape[:-1], -(-shape[-1] // 128)), generator=g, device="cuda")
        x = x * torch.exp2((rows + blocks.repeat_interleave(128, dim=-1)[..., : shape[-1]]).float())
    elif distribution == "outliers":  # a few values 1000x the rest: block scales keep the others' precision
        mask = torch.rand(shape, generator=g, device="cuda") < 1e-3
        x = torch.where(mask, x * 1000, x)
    return x


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("block", [(1, 128), (128, 128)])
@pytest.mark.parametrize("source", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(1, 16), (33, 272), (300, 1040), (3, 129, 384)])
def test_one_pass_quantizer_is_the_torch_definition(dtype, block, source, shape):
    assert fp8_block.quantize_kernel.available()  # else the op falls back to the definition it is compared with
    x = draw("wide", shape, seed=sum(shape)).to(source)
    # a row of float32 subnormals (bf16 holds them too): divided as they are, not flushed to zero
    x[..., -1, :] = (draw("normal", x[..., -1, :].shape, seed=1) * 1e-39).to(source)
    x[..., 0, :] = 0  # an all-zero row: zero blocks for (1, 128)
    x.view(-1)[7] = float("nan")  # a NaN poisons its block's scale, as in the definition
    x8, scales = ext.quantize_fp8(x, dtype=dtype, granularity="block", block=block)
    x8_torch, scales_torch = fp8_block.quantize.quantize_block_torch(x, dtype, block)
    assert torch.equal(scales.nan_to_num(-1), scales_torch.nan_to_num(-1))
    nan = x8_torch.float().isnan()
    assert torch.equal(x8.float().isnan(), nan)  # NaN bit patterns may differ; everything else bit for bit
    assert torch.equal(x8.view(torch.uint8)[~nan], x8_torch.view(torch.uint8)[~nan])


def check_close(out, a8, b8, scale_a, scale_b, scale_n, bias=None):
    """|D - D_64| <= eps_out · |D_64| + ACCUMULATION_EPS · (|A| @ |B|ᵀ), A and B dequantized in float64."""
    a64 = fp8_block.dequantize(a8, scale_a, 1)
    b64 = fp8_block.dequantize(b8, scale_b, scale_n)
    reference = a64 @ b64.T + (0 if bias is None else bias.double())
    magnitudes = a64.abs() @ b64.abs().T
    bound = OUT_EPS[out.dtype] * reference.abs() + ACCUMULATION_EPS * magnitudes + SUBNORMAL_ROUNDING[out.dtype]
    error = (out.double() - reference).abs()
    assert out.shape == reference.shape
    assert torch.isfinite(out).all()
    worst = (error / bound).max().item()
    assert worst <= 1.0, f"error up to {worst:.3g} x the bound"


def seeded_bias(n, seed):
    """N(0, 1) biases from their own generator: a failing case reruns with the same inputs."""
    return torch.randn(n, generator=torch.Generator(device="cuda").manual_seed(seed), device="cuda")


def quantized(m, n, k, distribution, weight_block, seed):
    a = draw(distribution, (m, k), seed)
    w = draw("normal", (n, k), seed + 1)
    a8, scale_a = ext.quantize_fp8(a, granularity="block", block=(1, 128))
    b8, scale_b = ext.quantize_fp8(w, granularity="block", block=weight_block)
    return a8, b8, scale_a, scale_b


SHAPES = [(1, 256, 256), (37, 384, 528), (128, 128, 128), (257, 1024, 1040), (64, 2112, 7168), (1000, 1536, 768)]


@pytest.mark.parametrize("m, n, k", SHAPES)
@pytest.mark.parametrize("distribution", ["normal", "wide", "outliers"])
@pytest.mark.parametrize("weight_block", [(128, 128), (1, 128)])
def test_block_scales_match_the_fp64_product(m, n, k, distribution, weight_block):
    a8, b8, scale_a, scale_b = quantized(m, n, k, distribution, weight_block, seed=m + n + k)
    out = ext.gemm_fp8(a8, b8, scale_a, scale_b)
    check_close(out, a8, b8, scale_a, scale_b, weight_block[0])


@pytest.mark.parametrize("m, n, k", [(37, 384, 528), (300, 512, 1024)])
def test_per_row_and_per_tensor_scales_mix_with_blocks(m, n, k):
    a8, b8, scale_a, scale_b = quantized(m, n, k, "wide", (128, 128), seed=7)
    rows = torch.rand(m, 1, device="cuda") + 0.5
    expanded_rows = rows.expand(m, scale_a.shape[1])
    # per-row activations with 128x128 weights
    check_close(ext.gemm_fp8(a8, b8, rows, scale_b), a8, b8, expanded_rows, scale_b, 128)
    # 1x128 activations with per-row weights, and with one weight scale
    columns = torch.rand(n, device="cuda") + 0.5
    expanded_columns = columns[:, None].expand(n, scale_a.shape[1])
    check_close(ext.gemm_fp8(a8, b8, scale_a, columns[None, :]), a8, b8, scale_a, expanded_columns, 1)
    one = torch.full((1,), 0.25, device="cuda")
    check_close(
        fp8_block.gemm_fp8_block(a8, b8, scale_a, one), a8, b8, scale_a, one.expand(-(-n // 128), scale_a.shape[1]), 128
    )


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("m, n, k", [(5, 256, 384), (200, 640, 1040)])
def test_output_types_and_bias(out_dtype, m, n, k):
    a8, b8, scale_a, scale_b = quantized(m, n, k, "normal", (128, 128), seed=11)
    bias = seeded_bias(n, 11).to(out_dtype)
    out = ext.gemm_fp8(a8, b8, scale_a, scale_b, out_dtype=out_dtype, bias=bias)
    assert out.dtype == out_dtype
    check_close(out, a8, b8, scale_a, scale_b, 128, bias)


@pytest.mark.parametrize("config", DENSE_VARIANTS[4:], ids=lambda c: c.name)
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("m, n, k", [(3, 512, 2048), (129, 384, 528), (512, 1024, 4096)])
def test_variants(config, m, n, k, with_bias):
    a8, b8, scale_a, scale_b = quantized(m, n, k, "wide", (128, 128), seed=m * k)
    bias = seeded_bias(n, m * k).bfloat16() * 100 if with_bias else None
    out = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, bias=bias, variant=config.name)
    check_close(out, a8, b8, scale_a, scale_b, 128, bias)


@pytest.mark.parametrize("config", SPLIT_K, ids=lambda c: c.name)
@pytest.mark.parametrize("m, n, k", [(16, 2112, 7168), (300, 2112, 1664), (64, 384, 640), (16, 2112, 384)])
def test_split_k_gives_the_same_bits_every_call_and_on_every_stream(config, m, n, k):
    """K of 56, 13, 5 and 3 k-blocks: even and uneven splits, and fewer k-blocks than splits (CUTLASS then cuts the
    split count); calls back to back and on two streams at once, racing for the GPU, against the first call."""
    a8, b8, scale_a, scale_b = quantized(m, n, k, "wide", (128, 128), seed=m + n + k)

    def run():
        return fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, variant=config.name)

    first = run()
    check_close(first, a8, b8, scale_a, scale_b, 128)
    assert all(torch.equal(run(), first) for _ in range(4))
    streams = [torch.cuda.Stream() for _ in range(2)]
    for stream in streams:
        stream.wait_stream(torch.cuda.current_stream())
    outs = []
    for _ in range(3):
        for stream in streams:
            with torch.cuda.stream(stream):
                outs.append(run())
    for stream in streams:
        torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    assert all(torch.equal(out, first) for out in outs)


@pytest.mark.parametrize("config", SWEPT_VARIANTS, ids=lambda c: c.name)
@pytest.mark.parametrize("m, n, k", [(3, 512, 2048), (129, 384, 528)])
def test_every_swept_variant_matches_the_fp64_product(config, m, n, k):
    a8, b8, scale_a, scale_b = quantized(m, n, k, "wide", (128, 128), seed=m + k)
    bias = seeded_bias(n, m + k).bfloat16() * 100
    out = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, bias=bias, variant=config.name)
    check_close(out, a8, b8, scale_a, scale_b, 128, bias)


@pytest.mark.parametrize("config", OVERLAPPED_TWINS, ids=lambda c: c.name)
@pytest.mark.parametrize("m, n, k", [(3, 384, 128), (129, 384, 256), (300, 640, 400), (77, 256, 1040)])
@pytest.mark.parametrize("distribution", ["wide", "outliers"])
def test_overlapped_promotion_gives_the_same_bits(config, m, n, k, distribution):
    """One, two and several k-blocks (both ends of the two-block loop), a partial last k-block, M off the tile."""
    weight_block = (config.scale_n, 128)
    a8, b8, scale_a, scale_b = quantized(m, n, k, distribution, weight_block, seed=m + k)
    bias = seeded_bias(n, m + k).bfloat16() * 100
    stock = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, bias=bias, variant=config.name)
    twin = dataclasses.replace(config, overlapped=True).name
    overlapped = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, bias=bias, variant=twin)
    assert torch.equal(overlapped, stock)
    check_close(overlapped, a8, b8, scale_a, scale_b, config.scale_n, bias)


@pytest.mark.parametrize("stock, wave", WAVE_TWINS, ids=[wave.name for _, wave in WAVE_TWINS])
@pytest.mark.parametrize(
    "m, n, k", [(3, 384, 128), (129, 384, 256), (300, 640, 400), (513, 256, 1040), (130, 2112, 384)]
)
@pytest.mark.parametrize("distribution", ["wide", "outliers"])
def test_wave_promotion_gives_the_same_bits(stock, wave, m, n, k, distribution):
    """One, two and several k-blocks, a partial last k-block, M inside one 256-row tile's first or second warpgroup
    rows and across tiles; for tiles across weight blocks, tiles holding a block boundary and N a whole number of
    176- and 192-wide tiles (2112) or not."""
    weight_block = (stock.scale_n, 128)
    a8, b8, scale_a, scale_b = quantized(m, n, k, distribution, weight_block, seed=m + k)
    bias = seeded_bias(n, m + k).to(OUT_DTYPES[stock.out_dtype]) * 100
    reference = fp8_block.gemm_fp8_block(
        a8, b8, scale_a, scale_b, bias=bias, out_dtype=OUT_DTYPES[stock.out_dtype], variant=stock.name
    )
    out = fp8_block.gemm_fp8_block(
        a8, b8, scale_a, scale_b, bias=bias, out_dtype=OUT_DTYPES[stock.out_dtype], variant=wave.name
    )
    assert torch.equal(out, reference)
    # FP32 output of outlier inputs exceeds ACCUMULATION_EPS's model by up to 1.43x, CUTLASS's own kernel alike (the
    # same bits), as if each small product of an instruction holding a 1000x outlier kept only its bits above 2^-13
    # of the outlier (docs/design-notes.md, block-scaled FP8).
    if stock.out_dtype != "fp32" or distribution != "outliers":
        check_close(out, a8, b8, scale_a, scale_b, stock.scale_n, bias)


@pytest.mark.parametrize("stock, half", HALF_BLOCK_TWINS, ids=[half.name for _, half in HALF_BLOCK_TWINS])
@pytest.mark.parametrize("m, n, k", [(1, 2112, 384), (3, 192, 128), (40, 320, 1040), (77, 64, 400), (130, 2112, 256)])
@pytest.mark.parametrize("distribution", ["wide", "outliers"])
def test_half_block_swapped_tiles_give_the_same_bits(stock, half, m, n, k, distribution):
    """Weight rows in a block's first or second half, N ending mid-block or on a half (64, 192, 320), one token
    to several token tiles, one or several k-blocks and a partial last one; the half tile given its weight scales
    as a view whose rows lie further apart than their k-blocks (the row stride it reads them by)."""
    weight_block = (stock.scale_n, 128)
    a8, b8, scale_a, scale_b = quantized(m, n, k, distribution, weight_block, seed=m + n + k)
    out_dtype = OUT_DTYPES[stock.out_dtype]
    bias = seeded_bias(n, m + k).to(out_dtype) * 100
    reference = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, bias=bias, out_dtype=out_dtype, variant=stock.name)
    spread = torch.full((scale_b.shape[0], scale_b.shape[1] + 3), float("nan"), device="cuda")
    spread[:, : scale_b.shape[1]] = scale_b
    spread_scales = spread[:, : scale_b.shape[1]]
    out = fp8_block.gemm_fp8_block(a8, b8, scale_a, spread_scales, bias=bias, out_dtype=out_dtype, variant=half.name)
    assert torch.equal(out, reference)
    if stock.out_dtype != "fp32" or distribution != "outliers":  # see test_wave_promotion_gives_the_same_bits
        check_close(out, a8, b8, scale_a, scale_b, stock.scale_n, bias)


@pytest.mark.parametrize("stock, narrow", IN_BLOCK_TWINS, ids=[narrow.name for _, narrow in IN_BLOCK_TWINS])
@pytest.mark.parametrize(
    "m, n, k",
    [(1, 2112, 384), (3, 192, 128), (40, 320, 1040), (77, 64, 400), (130, 2112, 256), (5, 256, 384), (33, 2128, 528)],
)
@pytest.mark.parametrize("distribution", ["wide", "outliers"])
def test_narrow_tiles_inside_a_weight_block_give_the_same_bits(stock, narrow, m, n, k, distribution):
    """Tiles in a block's first, second, third or fourth quarter (32 wide) or half, N ending mid-block on a tile
    (64, 192, 320, 2112), on a block (256) or inside a tile (2128), one or several row tiles, one or several k-blocks
    and a partial last one; the narrow tile given its weight scales as a view whose rows lie further apart than
    their k-blocks."""
    a8, b8, scale_a, scale_b = quantized(m, n, k, distribution, (128, 128), seed=m + 2 * n + k)
    bias = seeded_bias(n, m + k).to(torch.bfloat16) * 100
    if stock.scale_a_major == "m":
        scale_a = fp8_block.api.m_major(scale_a)
    reference = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, bias=bias, variant=stock.name)
    spread = torch.full((scale_b.shape[0], scale_b.shape[1] + 3), float("nan"), device="cuda")
    spread[:, : scale_b.shape[1]] = scale_b
    out = fp8_block.gemm_fp8_block(a8, b8, scale_a, spread[:, : scale_b.shape[1]], bias=bias, variant=narrow.name)
    assert torch.equal(out, reference)
    check_close(out, a8, b8, scale_a, scale_b, 128, bias)


@pytest.mark.parametrize("config", PROGRAMMATIC, ids=lambda c: c.name)
@pytest.mark.parametrize("m, n, k", [(1, 2112, 384), (3, 384, 128), (130, 640, 1040)])
def test_programmatic_launch_gives_the_same_bits(config, m, n, k):
    a8, b8, scale_a, scale_b = quantized(m, n, k, "wide", (config.scale_n, 128), seed=m + n)
    bias = seeded_bias(n, m).bfloat16()
    out = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, bias=bias, variant=config.name)
    plain = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, bias=bias, variant=plain_launch(config).name)
    assert torch.equal(out, plain)
    check_close(out, a8, b8, scale_a, scale_b, config.scale_n, bias)


@pytest.mark.parametrize("config", PROGRAMMATIC, ids=lambda c: c.name)
def test_programmatic_launch_waits_for_a_writer_that_lets_it_start(config):
    """A kernel lets the next one launch at its start, then waits 50 µs before it writes the GEMM's operands, both
    scale tensors and the bias. A `_pdl` GEMM captured right after it starts inside that window and must still read
    the new values: bit for bit the plain launch's product of them. The control, a kernel launched the same way that
    reads without waiting, must see old bytes there, or the window this test relies on is not there."""
    m, n, k = 40, 2112, 1664
    old = [*quantized(m, n, k, "wide", (config.scale_n, 128), seed=31), seeded_bias(n, 31).bfloat16()]
    new = [*quantized(m, n, k, "wide", (config.scale_n, 128), seed=32), seeded_bias(n, 32).bfloat16() * 100]

    def run(a8, b8, scale_a, scale_b, bias, variant=config.name):
        return fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, bias=bias, variant=variant)

    product, window = early_writer.run_after_late_writer(run, old, new)
    assert window, "the reader launched early saw only new bytes"
    assert torch.equal(product, run(*new, variant=plain_launch(config).name))


@pytest.mark.parametrize("config", PROGRAMMATIC, ids=lambda c: c.name)
def test_programmatic_launch_after_the_quantizer_reads_its_output(config):
    """The block quantizer lets the next kernel launch at its start: a GEMM launched programmatically right after
    it, replayed from a graph with new activations each time, must equal the plain launch's product bit for bit."""
    m, n, k = 40, 2112, 1664
    _, b8, _, scale_b = quantized(m, n, k, "normal", (config.scale_n, 128), seed=5)
    xs = [draw("wide", (m, k), seed=50 + i) for i in range(3)]
    x = xs[0].clone()

    def layer():
        a8, scale_a = ext.quantize_fp8(x, granularity="block", block=(1, 128))
        return fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, variant=config.name)

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        layer()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = layer()
    for value in xs[1:]:
        x.copy_(value)
        graph.replay()
        a8, scale_a = ext.quantize_fp8(value, granularity="block", block=(1, 128))
        expected = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, variant=plain_launch(config).name)
        assert torch.equal(out, expected)


@pytest.mark.parametrize("m", [1, 2, 3, 5, 6, 7, 127, 130, 131])
@pytest.mark.parametrize("k", [128, 528])
def test_m_major_scales_take_every_m(m, k):
    """The M-major kernel at M off a multiple of 4: the same bits as the K-major kernel of that tile and scheduler,
    whatever the scale layout's padding rows hold (TMA reads them beside A's zero rows past M)."""
    n = 384
    a8, b8, scale_a, scale_b = quantized(m, n, k, "wide", (128, 128), seed=m + k)
    padded_rows = -(-m // 4) * 4
    storage = torch.full((scale_a.shape[1], padded_rows), float("nan"), device="cuda")
    deepgemm_layout = storage.T[:m]  # DeepGEMM's TMA-aligned layout, NaN in its padding
    deepgemm_layout.copy_(scale_a)
    k_major = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, variant=DENSE_VARIANTS[4].name)
    for scales in (scale_a, deepgemm_layout):
        out = fp8_block.gemm_fp8_block(a8, b8, scales, scale_b, variant=DENSE_VARIANTS[-1].name)
        assert torch.equal(out, k_major)
    check_close(k_major, a8, b8, scale_a, scale_b, 128)


def test_gemm_fp8_dispatches_block_scales_to_the_block_kernel():
    a8, b8, scale_a, scale_b = quantized(96, 512, 1024, "normal", (128, 128), seed=3)
    assert torch.equal(ext.gemm_fp8(a8, b8, scale_a, scale_b), fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b))


def test_scales_with_strides_are_read_as_given():
    m, n, k = 64, 256, 512
    a8, b8, scale_a, scale_b = quantized(m, n, k, "wide", (128, 128), seed=5)
    column_major = scale_a.T.contiguous().T  # MN-major, as DeepGEMM lays out activation scales
    padded_rows = torch.zeros(m, 8, device="cuda")[:, :4].copy_(scale_a)  # row stride 8, not 4
    reference = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b)
    assert torch.equal(fp8_block.gemm_fp8_block(a8, b8, column_major, scale_b), reference)
    assert torch.equal(fp8_block.gemm_fp8_block(a8, b8, padded_rows, scale_b), reference)
    # The M-major kernel takes DeepGEMM's layout as it is and copies others into it: one product either way.
    m_major = DENSE_VARIANTS[-1].name
    for scales in (scale_a, column_major, padded_rows):
        assert torch.equal(fp8_block.gemm_fp8_block(a8, b8, scales, scale_b, variant=m_major), reference)


def test_op_schema_and_fake_kernel():
    a8, b8, scale_a, scale_b = quantized(48, 256, 384, "normal", (128, 128), seed=9)
    variant = fp8_block.api.dense_variant("e4m3", "e4m3", "bf16", 128)
    # test_faketensor: the fake kernel's output matches the kernel's (opcheck's schema test multiplies the FP8
    # inputs, which torch has no kernel for)
    torch.library.opcheck(
        torch.ops.cutlass_ext.gemm_fp8_block,
        (a8, b8, scale_a, scale_b, None, torch.bfloat16, variant),
        test_utils=("test_faketensor",),
    )


def test_torch_compile():
    a8, b8, scale_a, scale_b = quantized(80, 384, 640, "normal", (128, 128), seed=13)

    def layer(a8, scale_a):
        return ext.gemm_fp8(a8, b8, scale_a, scale_b).float().relu()

    compiled = torch.compile(layer, fullgraph=True)  # no graph break in the API: dispatch is traced through
    assert torch.equal(compiled(a8, scale_a), layer(a8, scale_a))
    # The M-major kernel given DeepGEMM's scale layout, whose pointer the API cannot test while tracing (it copies)
    m_major, variant = scale_a.T.contiguous().T, DENSE_VARIANTS[-1].name

    def m_major_layer(a8, scale_a):
        return fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, variant=variant)

    assert torch.equal(torch.compile(m_major_layer, fullgraph=True)(a8, m_major), m_major_layer(a8, scale_a))
    variant = fp8_block.api.dense_variant("e4m3", "e4m3", "bf16", 128)
    arguments = (a8, b8, scale_a, scale_b, None, torch.bfloat16, variant)
    op = torch.ops.cutlass_ext.gemm_fp8_block
    assert torch.equal(torch.compile(op, fullgraph=True)(*arguments), op(*arguments))


def test_cuda_graph_replays_with_new_inputs():
    m, n, k = 64, 512, 1536
    a8, b8, scale_a, scale_b = quantized(m, n, k, "normal", (128, 128), seed=17)
    ext.gemm_fp8(a8, b8, scale_a, scale_b)  # built and loaded before capture
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            out = ext.gemm_fp8(a8, b8, scale_a, scale_b)
    torch.cuda.current_stream().wait_stream(stream)
    fresh, _, fresh_scale, _ = quantized(m, n, k, "wide", (128, 128), seed=19)
    a8.copy_(fresh)
    scale_a.copy_(fresh_scale)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, ext.gemm_fp8(a8, b8, scale_a, scale_b))
    check_close(out, a8, b8, scale_a, scale_b, 128)


def test_bad_input_is_refused_with_the_argument_named():
    a8, b8, scale_a, scale_b = quantized(32, 256, 512, "normal", (128, 128), seed=23)
    with pytest.raises(ValueError, match="must agree on K"):
        fp8_block.gemm_fp8_block(a8, b8[:, :256].contiguous(), scale_a, scale_b)
    with pytest.raises(ValueError, match="K=520 must be a multiple of 16"):
        wide_k = torch.zeros(32, 520, device="cuda").to(torch.float8_e4m3fn)
        fp8_block.gemm_fp8_block(wide_k, wide_k, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"scale_a has shape \(32, 3\)"):
        fp8_block.gemm_fp8_block(a8, b8, scale_a[:, :3], scale_b)
    with pytest.raises(ValueError, match="bias must be a \\(256,\\) tensor of torch.bfloat16"):
        fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, bias=torch.zeros(256, device="cuda"))
    with pytest.raises(ValueError, match="variant=.*does not fit"):
        fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, variant=DENSE_VARIANTS[1].name)
    infinite = scale_a.clone()
    infinite[3, 1] = float("inf")
    with pytest.raises(ValueError, match="scale_a holds non-finite values"):
        ext.gemm_fp8(a8, b8, infinite, scale_b, check_scales=True)
    misaligned = torch.zeros(32, 512 + 16, device="cuda").to(a8.dtype)[:, 8 : 512 + 8]
    with pytest.raises(ValueError, match="cannot run this problem"):
        fp8_block.gemm_fp8_block(misaligned, b8, scale_a, scale_b)
