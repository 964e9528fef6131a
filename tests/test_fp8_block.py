"""Block-scaled FP8 on the CPU: the block quantizer against its definition, the FP64 references, the scale forms
the API accepts, argument errors, the variant name grammar and the grouped kernel's row bookkeeping."""

import json
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import build, cache, codegen, fp8_block, fp8_rows, toolchain
from cutlass_ext.families.rules import DeviceLimits, apply_rules
from cutlass_ext.fp8_block import Fp8BlockConfig, filters
from cutlass_ext.fp8_block.api import activation_scales, is_block_scaled, m_major, weight_scales
from cutlass_ext.toolchain import kernels_dir

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]


def _draw(distribution, shape, seed):
    generator = torch.Generator().manual_seed(seed)
    if distribution == "normal":
        return torch.randn(shape, generator=generator)
    if distribution == "uniform":
        return torch.rand(shape, generator=generator) * 2 - 1
    # magnitudes spread over 2^-20 .. 2^20, so that blocks' largest values differ by orders of magnitude
    exponents = torch.randint(-20, 21, shape, generator=generator).float()
    return torch.randn(shape, generator=generator).sign() * torch.exp2(exponents)


def _blockwise_amax(x, rows_per_block):
    """Each block's largest magnitude, block by block (the definition, written as loops)."""
    *batch, rows, columns = x.shape
    flat = x.reshape(-1, rows, columns)
    out = torch.empty(flat.shape[0], -(-rows // rows_per_block), -(-columns // 128))
    for b in range(flat.shape[0]):
        for i in range(out.shape[1]):
            for j in range(out.shape[2]):
                block = flat[b, i * rows_per_block : (i + 1) * rows_per_block, j * 128 : (j + 1) * 128]
                out[b, i, j] = block.abs().max()
    return out.reshape(*batch, *out.shape[1:])


@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("block", [(1, 128), (128, 128)])
@pytest.mark.parametrize("shape", [(3, 128), (130, 272), (257, 1040), (2, 5, 144)])
@pytest.mark.parametrize("distribution", ["normal", "uniform", "wide"])
def test_quantize_block_matches_its_definition(dtype, block, shape, distribution):
    x = _draw(distribution, shape, seed=sum(shape) + block[0])
    x_fp8, scales = ext.quantize_fp8(x, dtype=dtype, granularity="block", block=block)
    assert x_fp8.shape == x.shape and x_fp8.dtype == dtype and x_fp8.is_contiguous()
    amax = _blockwise_amax(x, block[0])
    assert scales.dtype == torch.float32 and scales.shape == amax.shape and scales.is_contiguous()
    largest = torch.finfo(dtype).max
    expected = (amax / largest).clamp_min(torch.finfo(torch.float32).tiny)
    assert torch.equal(scales, expected)
    # Each element is x / scale rounded once to the format (saturating at its largest finite value).
    expanded = scales.repeat_interleave(block[0], dim=-2)[..., : shape[-2], :].repeat_interleave(128, dim=-1)
    expanded = expanded[..., : shape[-1]]
    assert torch.equal(x_fp8, (x / expanded).clamp(-largest, largest).to(dtype))
    # The block's largest element lands on the format's largest value: no range is wasted.
    restored = fp8_block.dequantize(x_fp8, scales, block[0])
    assert restored.abs().amax() == pytest.approx(x.abs().amax().item(), rel=2**-3)


@pytest.mark.parametrize("source", [torch.float32, torch.bfloat16, torch.float16])
def test_quantize_block_takes_16_bit_inputs_and_zero_blocks(source):
    x = torch.randn(4, 384).to(source)
    x[1] = 0
    x[:, 128:256] = 0
    x_fp8, scales = ext.quantize_fp8(x, granularity="block", block=(1, 128))
    assert torch.equal(scales[1], torch.full((3,), torch.finfo(torch.float32).tiny))
    assert (scales[:, 1] == torch.finfo(torch.float32).tiny).all()
    assert not x_fp8.float()[1].any() and torch.isfinite(fp8_block.dequantize(x_fp8, scales, 1)).all()


@pytest.mark.parametrize("shape", [(0, 512), (3, 0, 256), (0, 4, 128)])
@pytest.mark.parametrize("block", [(1, 128), (128, 128)])
def test_quantize_block_takes_empty_inputs(shape, block):
    x_fp8, scales = ext.quantize_fp8(torch.randn(shape), granularity="block", block=block)
    *batch, rows, columns = shape
    assert x_fp8.shape == shape and scales.shape == (*batch, -(-rows // block[0]), -(-columns // 128))


def test_quantize_block_errors():
    with pytest.raises(ValueError, match="block="):
        ext.quantize_fp8(torch.randn(4, 128), granularity="block", block=(1, 64))
    with pytest.raises(ValueError, match=r"block=\(1.0, 128.0\)"):
        ext.quantize_fp8(torch.randn(4, 128), granularity="block", block=(1.0, 128.0))
    numpy_block = (np.int64(128), np.int64(128))  # numpy sizes are sizes
    assert ext.quantize_fp8(torch.randn(4, 128), granularity="block", block=numpy_block)[1].shape == (1, 1)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        ext.quantize_fp8(torch.randn(128), granularity="block")
    with pytest.raises(ValueError, match="granularity="):
        ext.quantize_fp8(torch.randn(4, 128), granularity="blocks")


def _loop_reference(a, b, scale_a, scale_b, scale_n):
    """Σ_kb scale_a[m, kb] · scale_b[n // scale_n, kb] · Σ_{k in kb} a[m, k] b[n, k], element by element."""
    m, k = a.shape
    n = b.shape[0]
    out = torch.zeros(m, n, dtype=torch.float64)
    for kb in range(-(-k // 128)):
        span = slice(kb * 128, (kb + 1) * 128)
        partial = a[:, span].double() @ b[:, span].double().T
        out += partial * scale_a[:, kb, None].double() * scale_b[torch.arange(n) // scale_n, kb][None, :].double()
    return out


@pytest.mark.parametrize("scale_n", [128, 1])
@pytest.mark.parametrize("m, n, k", [(5, 256, 128), (33, 136, 400), (1, 384, 1040)])
def test_block_scaled_reference_is_the_sum_of_scaled_k_blocks(scale_n, m, n, k):
    a8, scale_a = ext.quantize_fp8(_draw("wide", (m, k), 1), granularity="block", block=(1, 128))
    b8, scale_b = ext.quantize_fp8(_draw("normal", (n, k), 2), granularity="block", block=(scale_n, 128))
    reference = fp8_block.block_scaled_reference(a8, b8, scale_a, scale_b, scale_n)
    # Two float64 summation orders: they differ by rounding, bounded by the sum of magnitudes.
    magnitudes = fp8_block.dequantize(a8, scale_a, 1).abs() @ fp8_block.dequantize(b8, scale_b, scale_n).abs().T
    assert ((reference - _loop_reference(a8, b8, scale_a, scale_b, scale_n)).abs() <= 1e-13 * magnitudes).all()
    bias = torch.randn(n)
    with_bias = fp8_block.block_scaled_reference(a8, b8, scale_a, scale_b, scale_n, bias)
    torch.testing.assert_close(with_bias, reference + bias.double(), rtol=0, atol=0)


def test_grouped_reference_runs_group_by_group():
    groups, n, k = 3, 256, 256
    b8, scale_b = ext.quantize_fp8(torch.randn(groups, n, k), granularity="block", block=(128, 128))
    a8, scale_a = ext.quantize_fp8(torch.randn(10, k), granularity="block", block=(1, 128))
    offsets = torch.tensor([4, 4, 9], dtype=torch.int32)  # group 1 empty, row 9 owned by none
    out = fp8_block.grouped_reference(a8, b8, scale_a, scale_b, 128, offsets=offsets)
    expected = fp8_block.block_scaled_reference(a8[4:9], b8[2], scale_a[4:9], scale_b[2], 128)
    assert torch.equal(out[4:9], expected) and not out[9].any()
    masked = fp8_block.grouped_reference(
        a8[:9].reshape(3, 3, k), b8, scale_a[:9].reshape(3, 3, 2), scale_b, 128, masked_counts=torch.tensor([0, 5, 2])
    )
    assert not masked[0].any() and not masked[2, 2].any()
    expected = fp8_block.block_scaled_reference(a8[3:6], b8[1], scale_a[3:6], scale_b[1], 128)
    assert torch.equal(masked[1], expected)


@pytest.mark.parametrize("block", [(1, 128), (128, 128)])
def test_block_quantizer_is_an_op_torch_compile_takes_whole(block):
    """quantize_fp8(granularity="block") runs as `cutlass_ext::quantize_fp8_block` (its fake gives the shapes), so a
    compiled caller keeps it in its graph; here on the CPU, where the op runs the PyTorch definition."""
    x = torch.randn(2, 5, 300, generator=torch.Generator().manual_seed(4))
    torch.library.opcheck(torch.ops.cutlass_ext.quantize_fp8_block.default, (x, torch.float8_e4m3fn, block[0]))
    eager = ext.quantize_fp8(x, granularity="block", block=block)
    compiled = torch.compile(lambda t: ext.quantize_fp8(t, granularity="block", block=block), fullgraph=True)(x)
    assert torch.equal(compiled[0].view(torch.uint8), eager[0].view(torch.uint8))
    assert torch.equal(compiled[1], eager[1])
    # the values by the definition's properties (on the CPU the op's body is that definition): each block's largest
    # magnitude maps to ±448 and every element comes back within half an e4m3 step
    x_fp8, scales = eager
    back = fp8_block.dequantize(x_fp8, scales, block[0])
    rows, columns = block[0] * scales.shape[-2], 128 * scales.shape[-1]
    padded = torch.nn.functional.pad(x_fp8.float().abs(), (0, columns - x.shape[-1], 0, rows - x.shape[-2]))
    block_max = padded.reshape(2, scales.shape[-2], block[0], scales.shape[-1], 128).amax(dim=(2, 4))
    assert torch.equal(block_max, torch.full_like(block_max, 448.0))
    error = (back - x.double()).abs()
    assert (error <= 2.0**-4 * x.double().abs() + 2.0**-10 * scales.double().max()).all()


def test_k_grouped_reference_runs_group_by_group_and_marks_refused_offsets():
    g = torch.Generator().manual_seed(3)
    a8, scale_a = fp8_block.quantize_block(torch.randn(5, 640, generator=g), torch.float8_e4m3fn, (1, 128))
    b8, scale_b = fp8_block.quantize_block(torch.randn(7, 640, generator=g), torch.float8_e4m3fn, (1, 128))
    dense_a, dense_b = fp8_block.dequantize(a8, scale_a, 1), fp8_block.dequantize(b8, scale_b, 1)
    c = torch.randn(5, 5, 7, generator=g)
    # groups: [0, 256), empty, [256, 600), [600, 640) starting off a block, [256, ...) running backwards, and an
    # empty one at 600 (off a block, but empty: 0, or C)
    offsets = torch.tensor([256, 256, 600, 640, 300, 600, 600], dtype=torch.int32)
    c = torch.cat([c, torch.randn(2, 5, 7, generator=g)])
    out = fp8_block.k_grouped_reference(a8, b8, scale_a, scale_b, offsets, c)
    torch.testing.assert_close(out[0], dense_a[:, :256] @ dense_b[:, :256].T + c[0].double())
    torch.testing.assert_close(out[1], c[1].double())
    torch.testing.assert_close(out[2], dense_a[:, 256:600] @ dense_b[:, 256:600].T + c[2].double())
    assert out[3].isnan().all() and out[4].isnan().all()
    torch.testing.assert_close(out[6], c[6].double())


def test_scale_forms_expand_to_blocks():
    m, n, k = 6, 300, 400  # 4 k-blocks, 3 weight row blocks
    cpu = torch.device("cpu")
    for value in (float("nan"), float("inf")):  # a host value is checked (gemm_fp8, grouped and k-grouped alike)
        with pytest.raises(ValueError, match="scale_a=.* must be finite"):
            activation_scales("scale_a", value, m, k, cpu)
        with pytest.raises(ValueError, match="scale_b=.* must be finite"):
            weight_scales("scale_b", value, n, k, cpu)
    assert activation_scales("scale_a", 2.0, m, k, cpu).tolist() == [[2.0] * 4] * m
    rows = torch.arange(m, dtype=torch.float32)
    assert torch.equal(activation_scales("scale_a", rows[:, None], m, k, cpu), rows[:, None].expand(m, 4))
    blocks = torch.rand(4, m).T  # a column-major (M, kb) block tensor is made K-major
    made = activation_scales("scale_a", blocks, m, k, cpu)
    assert torch.equal(made, blocks) and made.stride(1) == 1
    scale, scale_n = weight_scales("scale_b", torch.rand(3, 4), n, k, cpu)
    assert scale_n == 128 and scale.shape == (3, 4)
    scale, scale_n = weight_scales("scale_b", torch.rand(n, 4), n, k, cpu)
    assert scale_n == 1 and scale.shape == (n, 4)
    scale, scale_n = weight_scales("scale_b", torch.arange(n, dtype=torch.float32)[None, :], n, k, cpu)
    assert scale_n == 1 and torch.equal(scale[:, 3], torch.arange(n, dtype=torch.float32))
    # (1, N) with N = ceil(K / 128) <= 128: the block quantizer's 128x128 scales of a narrow weight
    scale, scale_n = weight_scales("scale_b", torch.rand(1, 16), 16, 2048, cpu)
    assert scale_n == 128 and scale.shape == (1, 16)
    scale, scale_n = weight_scales("scale_b", torch.tensor(3.0), n, k, cpu)
    assert scale_n == 128 and scale.shape == (3, 4) and (scale == 3).all()
    with pytest.raises(ValueError, match=r"scale_a has shape \(6, 3\).*\(6, 4\)"):
        activation_scales("scale_a", torch.rand(m, 3), m, k, cpu)
    with pytest.raises(ValueError, match=r"scale_b has shape \(2, 4\).*\(3, 4\)"):
        weight_scales("scale_b", torch.rand(2, 4), n, k, cpu)
    with pytest.raises(TypeError, match="scale_a must be float32"):
        activation_scales("scale_a", rows.double(), m, k, cpu)


def test_block_scaling_is_recognised_by_shape():
    m, n, k = 64, 512, 1024  # 8 k-blocks, 4 weight row blocks
    assert is_block_scaled(m, n, k, torch.ones(m, 8), torch.ones(4, 8))
    assert is_block_scaled(m, n, k, torch.ones(m, 8), torch.ones(n, 1))  # block activations, per-row weights
    assert is_block_scaled(m, n, k, torch.ones(m, 1), torch.ones(4, 8))  # per-row activations, block weights
    assert is_block_scaled(m, n, k, torch.ones(m, 8), torch.ones(n, 8))
    assert not is_block_scaled(m, n, k, torch.ones(m, 1), torch.ones(1, n))
    assert not is_block_scaled(m, n, k, 1.0, torch.ones(()))
    # One k-block: per-row and 1x128 scales are one product, kept on the row-scaled kernel.
    assert not is_block_scaled(m, n, 128, torch.ones(m, 1), torch.ones(n, 1))
    assert is_block_scaled(m, n, 128, torch.ones(m, 1), torch.ones(4, 1))


def test_gemm_arguments_are_checked_before_any_kernel():
    a8 = torch.zeros(8, 256, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="a must be a CUDA tensor"):
        fp8_block.gemm_fp8_block(a8, a8, torch.ones(8, 2), torch.ones(1, 2))
    with pytest.raises(TypeError, match="a must be one of"):
        fp8_block.gemm_fp8_block(a8.float(), a8, torch.ones(8, 2), torch.ones(1, 2))
    with pytest.raises(ValueError, match="exactly one of offsets"):
        fp8_block.grouped_gemm_fp8(a8, a8[None], 1.0, 1.0)
    with pytest.raises(ValueError, match="exactly one of offsets"):
        fp8_block.grouped_gemm_fp8(a8, a8[None], 1.0, 1.0, offsets=torch.ones(1), masked_counts=torch.ones(1))


def test_variant_names_round_trip():
    configs = [
        Fp8BlockConfig(),
        Fp8BlockConfig(scheduler="streamk"),
        Fp8BlockConfig(scheduler="splitk", splits=4, scale_n=1, out_dtype="fp32"),
        Fp8BlockConfig(tile=(64, 128, 128), schedule="pingpong", a_dtype="e5m2"),
        Fp8BlockConfig(grouped=True, tile=(128, 256, 128), cluster=(2, 1)),
        Fp8BlockConfig(out_dtype="fp32", scale_n=1, k_grouped=True, scale_a_major="m"),
        Fp8BlockConfig(tile=(128, 32, 128), swap_ab=True, overlapped=True),
        Fp8BlockConfig(tile=(256, 128, 128), cluster=(1, 2), scale_a_major="m", scheduler="streamk"),
        Fp8BlockConfig(tile=(128, 176, 128), cluster=(2, 1), scale_a_major="m"),
        Fp8BlockConfig(
            tile=(64, 32, 128), schedule="pingpong", swap_ab=True, overlapped=True, programmatic=True, l2_prefetch=8
        ),
        Fp8BlockConfig(programmatic=True),
    ]
    for config in configs:
        assert Fp8BlockConfig.from_name(config.name) == config
        assert ext.families.from_name(config.name) == config
    assert configs[2].name == "fp8block_e4m3e4m3_fp32_128x128x128_c1x1_coop_sb1_splitk4"
    assert configs[4].name == "fp8block_e4m3e4m3_bf16_128x256x128_c2x1_coop_sb128_grouped"
    assert configs[5].name == "fp8block_e4m3e4m3_fp32_128x128x128_c1x1_coop_sb1_kgrouped_am"
    assert configs[6].name == "fp8block_e4m3e4m3_bf16_128x32x128_c1x1_coop_sb128_swap_overlap"
    assert configs[7].name == "fp8block_e4m3e4m3_bf16_256x128x128_c1x2_coop_sb128_streamk_am"
    assert configs[8].name == "fp8block_e4m3e4m3_bf16_128x176x128_c2x1_coop_sb128_am"
    assert configs[9].name == "fp8block_e4m3e4m3_bf16_64x32x128_c1x1_pp_sb128_swap_overlap_pdl_l2pf8"
    assert configs[10].name == "fp8block_e4m3e4m3_bf16_128x128x128_c1x1_coop_sb128_pdl"


def test_programmatic_variants_compile_cutlass_s_grid_dependency_control():
    """CUTLASS's kernels wait on and release the grid before them only with CUTLASS_ENABLE_GDC_FOR_SM90, defined
    before its headers: such variants get a translation unit of their own."""
    config = Fp8BlockConfig(tile=(128, 32, 128), swap_ab=True, programmatic=True, l2_prefetch=8)
    source = codegen.render_library([config])
    assert source.index("#define CUTLASS_ENABLE_GDC_FOR_SM90 1\n") < source.index("#include")
    assert "1, false, true, false, true, 8>" in source  # K-major, SwapAB, not overlapped, Programmatic, 8
    assert "CUTLASS_ENABLE_GDC_FOR_SM90" not in codegen.render_library([Fp8BlockConfig()])
    with pytest.raises(ValueError, match="separate translation units"):
        codegen.render_library([config, Fp8BlockConfig()])


@pytest.mark.parametrize("tile_n, extended", [(128, False), (192, False), (176, True), (144, True)])
def test_only_tiles_needing_an_extended_wgmma_compile_the_extended_shapes(tile_n, extended):
    """A 176-wide tile needs CuTe's extended wgmma shapes (else CollectiveBuilder cuts it into eleven n = 16 atoms);
    other block-scaled variants are spared their parse, so such a variant gets a translation unit of its own."""
    config = Fp8BlockConfig(tile=(128, tile_n, 128))
    source = codegen.render_library([config])
    assert ("#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED\n" in source) == extended
    if extended:
        with pytest.raises(ValueError, match="separate translation units"):
            codegen.render_library([config, Fp8BlockConfig()])


@pytest.mark.parametrize(
    "tile_n, scale_n, swap_ab, rows",
    [
        (128, 128, False, 128),
        (256, 128, False, 128),
        (176, 128, False, 4),
        (192, 128, False, 8),
        (144, 128, False, 4),
        (176, 1, False, 1),
        (32, 128, True, 128),
    ],
)
def test_tiles_across_weight_blocks_read_expanded_scales(tile_n, scale_n, swap_ab, rows):
    """The kernel's rows per weight scale (the API expands 128-row blocks' scales to them): whole blocks as given;
    across blocks, the largest g dividing both widths such that one of g and the tile's n / g divides the other
    (what CUTLASS's producer can tile), the same rule the kernel header computes."""
    config = Fp8BlockConfig(tile=(128, tile_n, 128), scale_n=scale_n, swap_ab=swap_ab)
    assert config.scale_rows_n == rows
    assert scale_n % rows == 0 and (swap_ab or tile_n % rows == 0)
    per_tile = tile_n // rows
    assert swap_ab or per_tile % rows == 0 or rows % per_tile == 0


def test_half_block_swapped_tiles_read_block_scales_as_given():
    """A swapped 64-row tile lies inside a 128-row weight block and reads that block's scale row in place."""
    config = Fp8BlockConfig(tile=(64, 32, 128), schedule="pingpong", swap_ab=True)
    assert config.scale_rows_n == 128 and config.in_block


@pytest.mark.parametrize("tile_n", [32, 64])
def test_narrow_unswapped_tiles_read_block_scales_as_given(tile_n):
    """An unswapped 64-row tile 32 or 64 wide lies inside a 128-row weight block (DeepGEMM's tilings at M <= 128):
    the API passes the block scales unexpanded, which 1x128 weight scales need no block for."""
    config = Fp8BlockConfig(tile=(64, tile_n, 128), schedule="pingpong", overlapped=True)
    assert config.in_block and config.scale_rows_n == 128
    assert Fp8BlockConfig.from_name(config.name) == config
    assert not Fp8BlockConfig(tile=(64, 128, 128), schedule="pingpong").in_block
    assert not Fp8BlockConfig(tile=(64, tile_n, 128), schedule="pingpong", scale_n=1).in_block


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"tile": (128, 128, 64)}, "its k must be 128"),
        ({"tile": (64, 128, 128)}, "takes m = 128"),
        ({"tile": (128, 64, 128)}, "inside a weight-scale block .* 64-row ping-pong tiles"),
        ({"tile": (64, 64, 128), "schedule": "pingpong", "grouped": True}, "inside a weight-scale block"),
        ({"tile": (128, 48, 128)}, "multiple of scale_n=128, 32 or 64 inside a weight block or, wider than one"),
        ({"tile": (64, 16, 128), "schedule": "pingpong"}, "multiple of scale_n=128, 32 or 64 inside a weight block"),
        ({"tile": (128, 136, 128)}, "multiple of scale_n=128, 32 or 64 inside a weight block or, wider than one"),
        ({"tile": (192, 32, 128), "swap_ab": True}, "weights. side. must be a multiple of scale_n=128 or divide it"),
        ({"tile": (128, 176, 128), "overlapped": True}, "cuts across weight-scale blocks"),
        ({"tile": (128, 176, 128), "grouped": True}, "cuts across weight-scale blocks"),
        ({"tile": (64, 176, 128), "schedule": "pingpong"}, "cuts across weight-scale blocks"),
        ({"tile": (256, 192, 128)}, "cuts across weight-scale blocks"),
        ({"scale_n": 64}, "scale_n=64"),
        ({"scheduler": "splitk"}, "splits=1 goes with"),
        ({"grouped": True, "scheduler": "streamk"}, "group scheduler"),
        ({"out_dtype": "fp8"}, "out_dtype="),
        ({"k_grouped": True, "scale_n": 1}, "k_grouped kernels"),
        ({"k_grouped": True, "scale_a_major": "m"}, "k_grouped kernels"),
        ({"k_grouped": True, "scale_n": 1, "scale_a_major": "m", "grouped": True}, "k_grouped kernels"),
        ({"k_grouped": True, "scale_n": 1, "scale_a_major": "m", "scheduler": "streamk"}, "k_grouped kernels"),
        ({"grouped": True, "overlapped": True}, "overlapped promotion is built for the dense kernels"),
        ({"overlapped": 1}, "must be True or False"),
        ({"tile": (256, 128, 128), "schedule": "pingpong"}, "takes m = 128 or 256 .cooperative."),
        ({"tile": (256, 128, 128), "overlapped": True}, "256-row tiles"),
        ({"tile": (256, 256, 128)}, "256-row tiles"),
        ({"tile": (256, 32, 128), "swap_ab": True}, "256-row tiles"),
        ({"tile": (256, 128, 128), "grouped": True}, "256-row tiles"),
        ({"programmatic": True, "scheduler": "streamk"}, "whole tiles per persistent CTA"),
        ({"programmatic": True, "grouped": True}, "whole tiles per persistent CTA"),
        ({"programmatic": 1}, "must be True or False"),
        ({"l2_prefetch": 8}, "needs programmatic=True"),
        ({"programmatic": True, "l2_prefetch": 3}, "l2_prefetch=3 must be one of"),
    ],
)
def test_invalid_configs_say_why(fields, message):
    with pytest.raises(ValueError, match=message):
        Fp8BlockConfig(**fields)


def test_sweep_rules_drop_what_need_not_be_built():
    """Swapped square tiles (the unswapped kernel's tiles), overlapped promotion with per-row weight scales (which
    spills) and programmatic cooperative kernels (slower after the quantizer); the same forms otherwise are kept."""
    configs = [
        Fp8BlockConfig(tile=(128, 128, 128), swap_ab=True),
        Fp8BlockConfig(overlapped=True, scale_n=1),
        Fp8BlockConfig(tile=(128, 32, 128), swap_ab=True, programmatic=True),
        Fp8BlockConfig(overlapped=True),
        Fp8BlockConfig(scale_n=1),
        Fp8BlockConfig(tile=(128, 32, 128), swap_ab=True),
        Fp8BlockConfig(tile=(64, 32, 128), schedule="pingpong", swap_ab=True, programmatic=True),
    ]
    result = apply_rules(configs, DeviceLimits.for_arch("90a"), filters.RULES)
    assert result.survivors == configs[3:]


def test_non_canonical_name_is_refused():
    with pytest.raises(ValueError, match="is not a .*variant name such as"):
        Fp8BlockConfig.from_name("fp8block_e4m3e4m3_bf16_128x128x128_c1x1_coop")


_GROUP_ROWS_PROGRAM = r"""
#include <cstdio>
#include "sm90_fp8_grouped_rows.h"
using cutlass_ext::fp8_block::group_columns;
using cutlass_ext::fp8_block::group_rows;
int main() {
  cutlass_ext_fp8_grouped_args contiguous{};
  contiguous.m_total = 100;
  int offsets[1] = {0};
  contiguous.offsets = offsets;
  // (offset before, own end) -> (start, rows): ordinary, empty, past m_total, backwards, negative start
  long long cases[][4] = {{0, 37, 0, 37}, {37, 37, 37, 0}, {90, 140, 90, 10}, {120, 150, 100, 0},
                          {60, 50, 60, 0}, {-5, 3, 0, 3}};
  for (auto& c : cases) {
    auto r = group_rows(contiguous, 1, c[0], c[1], 0);
    if (r.start != c[2] || r.rows != c[3]) { std::printf("contiguous %lld %lld\n", c[0], c[1]); return 1; }
  }
  cutlass_ext_fp8_grouped_args masked{};
  masked.capacity = 64;
  long long counts[][3] = {{0, 0, 0}, {2, 17, 17}, {3, 64, 64}, {4, 65, 64}, {5, -1, 0}};
  for (auto& c : counts) {
    auto r = group_rows(masked, c[0], 0, 0, c[1]);
    if (r.start != c[0] * 64 || r.rows != c[2]) { std::printf("masked %lld %lld\n", c[0], c[1]); return 1; }
  }
  // K-grouped: (offset before, own end) -> (start, columns, valid), k_total = 512
  long long columns[][5] = {{0, 128, 0, 128, 1}, {128, 128, 128, 0, 1}, {384, 500, 384, 116, 1}, {100, 228, 0, 0, 0},
                            {256, 128, 0, 0, 0}, {384, 640, 0, 0, 0}, {-128, 0, 0, 0, 0}, {512, 512, 512, 0, 1},
                            {228, 228, 228, 0, 1}, {500, 500, 500, 0, 1}};
  for (auto& c : columns) {
    auto r = group_columns(512, c[0], c[1]);
    if (r.start != c[2] || r.columns != c[3] || r.valid != bool(c[4])) {
      std::printf("columns %lld %lld\n", c[0], c[1]);
      return 1;
    }
  }
  std::printf("ok\n");
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_group_rows_on_the_host(tmp_path):
    source = tmp_path / "group_rows.cpp"
    source.write_text(_GROUP_ROWS_PROGRAM)
    binary = tmp_path / "group_rows"
    subprocess.run(["g++", "-std=c++17", f"-I{kernels_dir()}", str(source), "-o", str(binary)], check=True)
    assert subprocess.run([str(binary)], capture_output=True, text=True).stdout == "ok\n"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_library_compiles_and_exports_launchers(tmp_path, monkeypatch):
    """Two dense variants and a grouped one in one translation unit (about 6 minutes on two cores). The first
    dense one promotes overlapped with the next k-block's wgmmas, the second has 256-row tiles promoted 64 rows at
    a time: ptxas must neither serialize their wgmmas (warning C7514) nor spill their accumulator fragments."""
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    dense = Fp8BlockConfig(scheduler="streamk", overlapped=True)
    waves = Fp8BlockConfig(tile=(256, 128, 128), cluster=(1, 2))
    grouped = Fp8BlockConfig(grouped=True, scale_n=1, out_dtype="fp32")
    (result,) = build.build_libraries([(dense, waves, grouped)], "90a", verbose=False)
    assert result.error is None, result.error
    usage = json.loads((result.library.parent / cache.MANIFEST).read_text())["resource_usage"]
    assert "C7514" not in usage
    assert "OverlappedBlockScaledMainloop" in usage and "WaveBlockScaledMainloop" in usage
    assert " 0 bytes spill stores" in usage
    assert not re.search(r"[1-9]\d* bytes spill stores", usage)
    exported = subprocess.run(
        ["nm", "-D", "--defined-only", str(result.library)], capture_output=True, text=True, check=True
    ).stdout
    for name, suffix in ((dense.name, "_fp8_block"), (waves.name, "_fp8_block"), (grouped.name, "_fp8_grouped")):
        for launcher in ("can_implement", "workspace_size", "run"):
            assert f" T {name}{suffix}_{launcher}\n" in exported


def _padded_layout(scale, rows, blocks):
    """The M-major kernels' reading of `scale`: each k-block's column of rows rounded up to 4, from its storage."""
    padded_rows = -(-rows // 4) * 4
    return scale.as_strided((padded_rows, blocks), (1, scale.stride(1)), scale.storage_offset())


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 129, 130, 131, 512])
@pytest.mark.parametrize("blocks", [1, 2, 17])
def test_m_major_scales_are_padded_to_whole_16_byte_units(rows, blocks):
    scale = torch.rand(rows, blocks, generator=torch.Generator().manual_seed(rows * blocks)) + 0.5
    made = m_major(scale)
    padded_rows = -(-rows // 4) * 4
    assert torch.equal(made, scale)
    assert made.stride(0) == 1 and made.stride(1) % 4 == 0 and made.stride(1) >= padded_rows
    assert made.data_ptr() % 16 == 0
    assert (made.storage_offset() + (blocks - 1) * made.stride(1) + padded_rows) * 4 <= made.untyped_storage().nbytes()
    # the rows past M that TMA reads along with a column are zeros, not stale memory
    assert not _padded_layout(made, rows, blocks)[rows:].any()
    assert m_major(made) is made  # DeepGEMM's layout is taken as it is


def test_m_major_copies_layouts_the_kernel_cannot_read():
    rows, blocks = 5, 3
    scale = torch.rand(rows, blocks) + 0.5
    storage = torch.full((blocks * 8,), float("nan"))
    inside = storage.as_strided((rows, blocks), (1, 8))  # a column stride of 8 rows: padded, and inside storage
    inside.copy_(scale)
    assert m_major(inside) is inside
    short = torch.empty(2 * 8 + rows).as_strided((rows, blocks), (1, 8))  # the last column's padding is not there
    short.copy_(scale)
    odd_stride = torch.empty(blocks * 6).as_strided((rows, blocks), (1, 6))  # columns 24 bytes apart
    odd_stride.copy_(scale)
    offset = torch.empty(1 + blocks * 8)[1:].as_strided((rows, blocks), (1, 8))  # starts 4 bytes past 16
    offset.copy_(scale)
    for given in (short, odd_stride, offset, scale):
        made = m_major(given)
        assert made is not given and torch.equal(made, scale) and made.stride(1) == 8


_CAN_IMPLEMENT_PROGRAM = r"""
#include <cstdio>
#include "sm90_fp8_block_gemm.cuh"
using namespace cutlass_ext::fp8_block;
using MMajor = Sm90Fp8BlockGemm<cutlass::float_e4m3_t, cutlass::float_e4m3_t, cutlass::bfloat16_t, 128, 128, 128, 1,
                                1, ScheduleCooperative, 128, DecomposePersistent, 1, true>;
alignas(16) static char operands[1 << 14];
alignas(16) static float scales[1 << 12];
int main() {
  for (int m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 127, 129, 130, 131, 512}) {
    for (int k : {128, 528, 2048}) {
      cutlass_ext_fp8_block_args args{};
      args.m = m, args.n = 384, args.k = k;
      args.a = args.b = args.d = operands;
      args.lda = args.ldb = k, args.ldd = 384;
      args.scale_a = args.scale_b = scales;
      args.scale_a_row_stride = 1, args.scale_a_block_stride = (m + 3) / 4 * 4;
      args.scale_b_row_stride = (k + 127) / 128;
      int status = MMajor::can_implement(&args);
      if (status != 0) { std::printf("m=%d k=%d: status %d\n", m, k, status); return 1; }
      if (m % 4) {  // a column stride of M floats leaves no room for the padding TMA reads
        args.scale_a_block_stride = m;
        if (MMajor::can_implement(&args) == 0) { std::printf("m=%d k=%d: unpadded accepted\n", m, k); return 1; }
      }
    }
  }
  std::printf("ok\n");
  return 0;
}
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_programmatic_variants_wait_for_the_grid_before(tmp_path):
    """A `_pdl` kernel launches early, so its waits must be compiled in: CUTLASS emits them only with GDC enabled (its
    define before the first CUTLASS header, sm_90a), silently nothing otherwise. The PTX of a ping-pong `_pdl`
    variant: the waits of the operand and scale producers and of the consumers, and the early-launch signals (about
    35 s on two cores)."""
    config = Fp8BlockConfig(tile=(64, 128, 128), schedule="pingpong", overlapped=True, programmatic=True)
    source = tmp_path / "kernel.cu"
    source.write_text(codegen.render_library([config]))
    includes = [f"-I{path}" for path in toolchain.include_dirs()]
    command = [toolchain.nvcc(), "-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr", "-arch=sm_90a", "-ptx"]
    subprocess.run([*command, *includes, str(source), "-o", str(tmp_path / "kernel.ptx")], check=True)
    ptx = (tmp_path / "kernel.ptx").read_text()
    assert ptx.count("griddepcontrol.wait;") >= 3
    assert "griddepcontrol.launch_dependents;" in ptx


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize(
    "config",
    [Fp8BlockConfig(grouped=True), Fp8BlockConfig(k_grouped=True, scale_n=1, scale_a_major="m", out_dtype="fp32")],
    ids=["grouped", "k_grouped"],
)
def test_grouped_kernels_wait_for_their_group_arrays(tmp_path, config):
    """Both grouped GEMMs launch programmatically after the kernel that writes their problem shapes and pointers,
    which lets them start at once: the GEMM's entry must wait (griddepcontrol.wait) and the writer's must signal
    (about 70 s each on two cores)."""
    source = tmp_path / "kernel.cu"
    source.write_text(codegen.render_library([config]))
    includes = [f"-I{path}" for path in toolchain.include_dirs()]
    command = [toolchain.nvcc(), "-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr", "-arch=sm_90a", "-ptx"]
    subprocess.run([*command, *includes, str(source), "-o", str(tmp_path / "kernel.ptx")], check=True)
    entries = (tmp_path / "kernel.ptx").read_text().split(".entry ")[1:]
    writers = [e for e in entries if "group_arrays" in e.split("(")[0]]
    gemms = [e for e in entries if "device_kernel" in e.split("(")[0]]
    assert writers and gemms
    assert all("griddepcontrol.launch_dependents;" in e for e in writers)
    assert all("griddepcontrol.wait;" in e for e in gemms)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_m_major_variant_implements_every_m_on_the_host(tmp_path):
    """CUTLASS's can_implement (host code) for the M-major kernel at M not a multiple of 4 (about 40 s)."""
    source = tmp_path / "can_implement.cu"
    source.write_text(_CAN_IMPLEMENT_PROGRAM)
    binary = tmp_path / "can_implement"
    includes = [f"-I{path}" for path in toolchain.include_dirs()]
    command = [toolchain.nvcc(), "-std=c++17", "-DNDEBUG", "-arch=sm_90a", "-w", *includes, str(source), "-o"]
    subprocess.run([*command, str(binary)], check=True)
    assert subprocess.run([str(binary)], capture_output=True, text=True).stdout == "ok\n"


def _ptx_instructions(kernel, pointers: dict, constants: dict) -> set[str]:
    """The instructions of `kernel` compiled by Triton for sm_90a (no GPU needed): opcode with modifiers."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {name: "i32" for name in kernel.arg_names} | pointers | dict.fromkeys(constants, "constexpr")
    compiled = triton.compile(ASTSource(kernel, signature, constants), target=GPUTarget("cuda", 90, 32))
    return set(re.findall(r"^\s*(?:@%p\d+\s+)?([a-z][\w.]*)", compiled.asm["ptx"], re.M))


@pytest.mark.slow
@pytest.mark.parametrize("quantizer", ["block_1x128", "block_128x128", "rows"])
def test_one_pass_quantizers_divide_with_ieee_rounding(quantizer, tmp_path, monkeypatch):
    """The Triton quantizers' PTX: division correctly rounded (div.rn.f32, subnormals kept), clamping that keeps
    NaN, conversion rounded to nearest even, and for the block quantizers the early launch of the next kernel
    (about 5 s a kernel)."""
    tl = pytest.importorskip("triton.language")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    tiny = torch.finfo(torch.float32).tiny
    if quantizer == "rows":
        kernel, constants = fp8_rows._kernel(), {"LARGEST": 448.0, "TINY": tiny, "STEP": 2048}
        pointers, conversion = {"x_ptr": "*bf16", "q_ptr": "*fp8e4nv", "s_ptr": "*fp32"}, "cvt.rn.satfinite.e4m3x2.f32"
    else:
        rows = 1 if quantizer == "block_1x128" else 128
        kernel = fp8_block.quantize_kernel._kernel()
        constants = {"LARGEST": 57344.0, "TINY": tiny, "ROWS": 32 if rows == 1 else 128, "BLOCK_ROWS": rows}
        constants |= {"OUT": tl.float8e5, "LAUNCH_DEPENDENTS": True}
        pointers, conversion = {"x_ptr": "*fp32", "q_ptr": "*fp8e5", "s_ptr": "*fp32"}, "cvt.rn.satfinite.e5m2x2.f32"
    instructions = _ptx_instructions(kernel, pointers, constants)
    divisions = {i for i in instructions if i.startswith(("div", "rcp"))}
    assert divisions == {"div.rn.f32"}
    assert {"max.NaN.f32", "min.NaN.f32", conversion} <= instructions
    # the block quantizers let a programmatically launched GEMM start early (its prologue, its weights' prefetch)
    assert ("griddepcontrol.launch_dependents" in instructions) == (quantizer != "rows")
