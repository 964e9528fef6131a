"""FP8 pieces that need no GPU: the config and its name, generated code, quantization, the FP64 reference, and
argument errors raised before anything touches a GPU."""

import dataclasses

import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import codegen, numerics
from cutlass_ext.families import from_name
from cutlass_ext.families.sm90_fp8.config import DEFAULT_FP8, Fp8Config
from cutlass_ext.families.sm90_fp8.render import render_instance
from cutlass_ext.toolchain import kernels_dir


@pytest.mark.parametrize(
    "config",
    [
        DEFAULT_FP8,
        Fp8Config("e5m2", "e4m3", "fp32", "fast", (64, 256, 128), (1, 2), "pingpong", "persistent"),
        Fp8Config(tile=(128, 64, 256), cluster=(2, 1), scheduler="splitk", splits=8),
        Fp8Config(scheduler="streamk", swizzle=4, promotion=2),
        Fp8Config(accum="fast", tile=(64, 16, 256), schedule="pingpong", swap_ab=True),
        Fp8Config(tile=(128, 32, 256), scheduler="splitk", splits=4, promotion=2, swizzle=2, swap_ab=True),
        Fp8Config(
            accum="fast", tile=(64, 16, 256), schedule="pingpong", scheduler="persistent", swap_ab=True, l2_prefetch=8
        ),
        Fp8Config(tile=(128, 128, 128), cluster=(2, 1), scheduler="persistent", swizzle=4, l2_prefetch=16),
        Fp8Config(tile=(128, 144, 128), swizzle=8, raster="n"),
        Fp8Config(accum="fast", tile=(128, 256, 128), raster="m"),
        Fp8Config(scheduler="dynamic", swizzle=4, raster="n"),
        Fp8Config(tile=(128, 208, 128), turns=True, scheduler="dynamic", swizzle=4),
        Fp8Config(tile=(128, 192, 128), cluster=(2, 1), turns=True, scheduler="streamk", raster="m"),
        Fp8Config(scheduler="persistent", cluster=(2, 1), l2_prefetch=8, stage_epilogue=True),
        Fp8Config(out_dtype="fp16", tile=(128, 64, 128), scheduler="persistent", swizzle=4, stage_epilogue=True),
        Fp8Config(accum="fast", tile=(128, 176, 128), cluster=(2, 1), schedule="pingpong", weights_first=True),
        Fp8Config(scheduler="persistent", cluster=(2, 1), l2_prefetch=8, stage_epilogue=True, weights_first=True),
        Fp8Config(scheduler="persistent", swizzle=8, buffer_epilogue=True),
        Fp8Config(
            out_dtype="fp16", tile=(128, 64, 128), scheduler="persistent", weights_first=True, buffer_epilogue=True
        ),
    ],
    ids=lambda c: c.name,
)
def test_names_round_trip(config):
    assert from_name(config.name) == config
    assert config.mode == f"fp8_{config.accum}"


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"a_dtype": "e3m4"}, "a_dtype='e3m4'"),
        ({"out_dtype": "fp8"}, "out_dtype='fp8'"),
        ({"accum": "exact"}, "accum='exact'"),
        ({"scheduler": "splitk"}, "splits=1 goes with scheduler='splitk'"),
        ({"splits": 4}, "splits=4 goes with scheduler='splitk'"),
        ({"tile": (128, 128)}, "tile="),
        ({"cluster": (0, 1)}, "cluster="),
        ({"swizzle": 3}, "swizzle=3"),
        ({"raster": "k"}, "raster='k' must be one of"),
        ({"accum": "fast", "promotion": 2}, "promotion=2 is for accum='promoted'"),
        ({"swap_ab": 1}, "swap_ab=1 must be True or False"),
        ({"scheduler": "persistent", "l2_prefetch": 3}, "l2_prefetch=3 must be one of"),
        ({"l2_prefetch": 8}, "l2_prefetch=8 runs ahead of the programmatic-launch wait"),
        ({"turns": 1}, "turns=1 must be True or False"),
        ({"turns": True, "accum": "fast"}, "turns=True takes promotion every k-block of a cooperative tile"),
        ({"turns": True, "promotion": 2}, "promotion=2, schedule='cooperative'"),
        ({"turns": True, "tile": (64, 128, 128), "schedule": "pingpong"}, "schedule='pingpong'"),
        ({"stage_epilogue": 1}, "stage_epilogue=1 must be True or False"),
        ({"stage_epilogue": True}, "stage_epilogue=True takes a cooperative, persistent kernel"),  # stream-K
        ({"stage_epilogue": True, "scheduler": "persistent", "out_dtype": "fp32"}, "bf16 or fp16 output"),
        ({"stage_epilogue": True, "scheduler": "persistent", "tile": (128, 144, 128)}, "128x128x128 tile"),
        ({"buffer_epilogue": 1}, "buffer_epilogue=1 must be True or False"),
        ({"buffer_epilogue": True}, "buffer_epilogue=True takes what stage_epilogue=True takes"),  # stream-K
        ({"buffer_epilogue": True, "stage_epilogue": True, "scheduler": "persistent"}, "and not with it"),
        ({"weights_first": 1}, "weights_first=1 must be True or False"),
        ({"weights_first": True, "swap_ab": True}, "swapped, the weights are A and load first"),
    ],
)
def test_bad_fields_are_named(fields, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(DEFAULT_FP8, **fields)


def test_non_canonical_names_are_refused():
    with pytest.raises(ValueError, match="not an FP8 variant name"):
        Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x128x128_c1x1_coop")


def test_generated_code_instantiates_the_config():
    config = Fp8Config("e5m2", "e4m3", "fp16", "fast", (64, 128, 128), (2, 1), "pingpong", "splitk", 4, raster="n")
    source = codegen.render_library([config])
    assert '#include "sm90_fp8_gemm.cuh"' in source
    assert (
        "Sm90Fp8Gemm<cutlass::float_e5m2_t, cutlass::float_e4m3_t, cutlass::half_t, 64, 128, 128,\n"
        "                             2, 1, cutlass_ext::SchedulePingpong, true,\n"
        "                             cutlass_ext::DecomposeSplitK, 4, 1, 1, false,\n"
        "                             0, cutlass_ext::Raster::AlongN, false, false, false, false>"
    ) in source
    assert "CUTLASS_ENABLE_GDC_FOR_SM90" not in source  # stream-K scheduler: no programmatic launch
    with pytest.raises(ValueError, match="one family"):
        codegen.render_library([config, ext.KernelConfig("tf32")])


def test_stage_epilogue_is_named_instantiated_and_left_out_for_fp32_output():
    config = Fp8Config(tile=(128, 128, 128), cluster=(2, 1), scheduler="persistent", stage_epilogue=True)
    assert config.name == "fp8_e4m3e4m3_bf16_128x128x128_c2x1_coop_promoted_se"
    assert "cutlass_ext::Raster::Auto, false, true, false, false>" in (codegen.render_library([config]))
    assert config.with_dtypes("e5m2", "e4m3", "fp16").stage_epilogue
    assert not config.with_dtypes("e4m3", "e4m3", "fp32").stage_epilogue  # 32-bit D does not fit a stage


def test_buffer_epilogue_is_named_instantiated_and_left_out_for_fp32_output():
    config = Fp8Config(scheduler="persistent", swizzle=8, buffer_epilogue=True)
    assert config.name == "fp8_e4m3e4m3_bf16_128x128x128_c1x1_coop_promoted_w8_be"
    assert "cutlass_ext::Raster::Auto, false, false, false, true>" in (codegen.render_library([config]))
    assert config.with_dtypes("e5m2", "e4m3", "fp16").buffer_epilogue
    assert not config.with_dtypes("e4m3", "e4m3", "fp32").buffer_epilogue


def test_swapped_variants_name_and_instantiate_the_swap():
    config = Fp8Config(accum="fast", tile=(64, 16, 256), schedule="pingpong", swap_ab=True)
    assert config.name == "fp8_e4m3e4m3_bf16_64x16x256_c1x1_pp_fast_swap"
    assert (
        "cutlass_ext::DecomposePersistent, 1, 1, 1, true,\n"
        "                             0, cutlass_ext::Raster::Auto, false, false, false, false>"
        in (codegen.render_library([config]))
    )


def test_l2_prefetching_variants_name_and_instantiate_the_depth():
    config = Fp8Config(accum="fast", tile=(64, 16, 256), schedule="pingpong", swap_ab=True, l2_prefetch=8)
    assert config.name == "fp8_e4m3e4m3_bf16_64x16x256_c1x1_pp_fast_swap_l2pf8"
    source = codegen.render_library([config])
    assert (
        "cutlass_ext::DecomposePersistent, 1, 1, 1, true,\n"
        "                             8, cutlass_ext::Raster::Auto, false, false, false, false>" in source
    )
    assert "#define CUTLASS_ENABLE_GDC_FOR_SM90 1" in source  # the prefetch runs ahead of the PDL wait


def test_persistent_variants_launch_programmatically_in_their_own_units():
    persistent = dataclasses.replace(DEFAULT_FP8, scheduler="persistent")
    assert codegen.render_library([persistent]).startswith(
        "// Generated by cutlass_ext.codegen from Fp8Config; do not edit. Variants: "
    )
    assert "#define CUTLASS_ENABLE_GDC_FOR_SM90 1\n#include" in codegen.render_library([persistent])
    with pytest.raises(ValueError, match="separate translation units"):
        codegen.render_library([persistent, DEFAULT_FP8])


@pytest.mark.parametrize(
    "tile_n, extended",
    [(128, False), (256, False), (192, False), (32, False), (144, True), (160, True), (80, True), (224, True)],
)
def test_extended_wgmma_shapes_are_compiled_in_only_where_a_tile_needs_one(tile_n, extended):
    """CuTe's extended wgmma shapes take a third of a variant's compile to parse: defined for tile widths outside
    CuTe's default set only (whose atoms they would change), and such variants get translation units of their own."""
    config = dataclasses.replace(DEFAULT_FP8, tile=(128, tile_n, 128))
    source = codegen.render_library([config])
    assert ("#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED\n" in source) == extended
    assert "#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED" not in (kernels_dir() / "sm90_fp8_gemm.cuh").read_text()
    if extended:
        with pytest.raises(ValueError, match="separate translation units"):
            codegen.render_library([config, DEFAULT_FP8])


def test_dynamic_scheduler_variants_name_and_instantiate_it_with_programmatic_launch():
    config = Fp8Config(scheduler="dynamic", swizzle=4)
    assert config.name == "fp8_e4m3e4m3_bf16_128x128x128_c1x1_coop_promoted_dynamic_w4"
    source = codegen.render_library([config])
    assert "cutlass_ext::DecomposeDynamic, 1, 4, 1, false," in source
    assert "#define CUTLASS_ENABLE_GDC_FOR_SM90 1" in source
    with pytest.raises(ValueError, match="l2_prefetch=8 runs ahead"):
        Fp8Config(scheduler="dynamic", l2_prefetch=8)


def test_turn_taking_variants_name_and_instantiate_the_two_fragment_mainloop():
    config = Fp8Config(tile=(128, 192, 128), turns=True, scheduler="dynamic", swizzle=4)
    assert config.name == "fp8_e4m3e4m3_bf16_128x192x128_c1x1_coop_promoted_turns_dynamic_w4"
    assert "cutlass_ext::DecomposeDynamic, 1, 4, 1, false,\n" in codegen.render_library([config])
    assert "cutlass_ext::Raster::Auto, true, false, false, false>)" in codegen.render_library([config])
    assert "cutlass_ext::Raster::Auto, false, false, false, false>)" in codegen.render_library(
        [dataclasses.replace(config, turns=False)]
    )


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("granularity", ["tensor", "row"])
def test_quantize_fp8_maps_the_largest_magnitude_to_the_largest_value(dtype, granularity):
    x = torch.randn(64, 96, dtype=torch.float64).float() * torch.logspace(-4, 4, 64)[:, None]
    x8, scale = ext.quantize_fp8(x, dtype, granularity)
    assert x8.dtype == dtype and scale.dtype == torch.float32
    assert scale.shape == (() if granularity == "tensor" else (64, 1))
    largest = torch.finfo(dtype).max
    amax = x8.float().abs().amax() if granularity == "tensor" else x8.float().abs().amax(dim=1)
    assert torch.all(amax == largest)
    # rounding to nearest: at most half a step, 2^-(mantissa bits + 1) of the value, above the subnormals
    mantissa_bits = 3 if dtype == torch.float8_e4m3fn else 2
    normal = (x / scale).abs() >= 2.0 ** (-6 if mantissa_bits == 3 else -14)
    relative = ((x8.float() * scale - x).abs() / x.abs())[normal]
    assert relative.max() <= 2.0 ** -(mantissa_bits + 1) * (1 + 1e-6)


def test_quantize_fp8_gives_zero_rows_a_positive_scale():
    x8, scale = ext.quantize_fp8(torch.zeros(3, 16), granularity="row")
    assert torch.all(scale > 0) and torch.all(x8.float() == 0)


@pytest.mark.parametrize("granularity, shape, scale_shape", [("tensor", (0, 16), ()), ("row", (4, 0), (4, 1))])
def test_quantize_fp8_of_no_elements_is_the_all_zero_case(granularity, shape, scale_shape):
    x8, scale = ext.quantize_fp8(torch.zeros(shape), granularity=granularity)
    assert x8.shape == shape and scale.shape == scale_shape
    assert torch.all(scale == torch.finfo(torch.float32).tiny)


def test_quantize_fp8_rejects_bad_arguments():
    with pytest.raises(TypeError, match="x must be one of"):
        ext.quantize_fp8(torch.ones(4, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match="dtype must be one of"):
        ext.quantize_fp8(torch.ones(4, 4), torch.int8)
    with pytest.raises(ValueError, match="granularity='column'"):
        ext.quantize_fp8(torch.ones(4, 4), granularity="column")
    with pytest.raises(ValueError, match="needs a 2-D x"):
        ext.quantize_fp8(torch.ones(2, 4, 4), granularity="row")


def test_dequantized_product_is_the_fp64_product_of_scaled_inputs():
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).to(torch.float8_e4m3fn)
    b = torch.tensor([[1.0, 0.5], [2.0, -1.0], [0.0, 1.0]]).to(torch.float8_e4m3fn)
    scale_a, scale_b = torch.tensor([[2.0], [0.5]]), torch.tensor([[1.0, 10.0, 100.0]])
    bias = torch.tensor([1.0, 2.0, 3.0])
    expected = torch.tensor([[2 * 2.0 + 1, 0.0 * 20 + 2, 2 * 2.0 * 100 + 3], [0.5 * 5 + 1, 0.5 * 2 * 10 + 2, 200 + 3]])
    result = numerics.dequantized_product(a, b, scale_a, scale_b, bias)
    assert result.dtype == torch.float64
    torch.testing.assert_close(result, expected.double())


def test_dequantized_product_of_no_rows_and_a_wrong_scale_count():
    a, b = torch.ones(0, 32).to(torch.float8_e4m3fn), torch.ones(8, 32).to(torch.float8_e4m3fn)
    assert numerics.dequantized_product(a, b, torch.ones(0, 1), torch.ones(8)).shape == (0, 8)
    assert numerics.dequantized_product(a, b, 1.0, torch.tensor(2.0)).shape == (0, 8)  # one value: any rows
    with pytest.raises(ValueError, match=r"scale_a must hold one value or one per row \(1\); got shape \(1, 2\)"):
        numerics.dequantized_product(torch.ones(1, 32).to(torch.float8_e4m3fn), b, torch.ones(1, 2), 1.0)


def test_block_given_as_an_array_and_scale_check_without_cuda():
    import numpy as np

    x = torch.randn(4, 256)
    assert ext.quantize_fp8(x, granularity="block", block=np.array([1, 128]))[1].shape == (4, 2)
    a, b = torch.ones(32, 256).to(torch.float8_e4m3fn), torch.ones(64, 256).to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="a must be a CUDA tensor"):  # not torch's CUDA stubs on a CPU build
        ext.gemm_fp8(a, b, torch.ones(32, 2), 1.0, check_scales=True)


@pytest.mark.parametrize(
    "a, b, message, error",
    [
        (torch.ones(16, 16), torch.ones(16, 16).to(torch.float8_e4m3fn), "a must be one of", TypeError),
        (torch.ones(16, 16).to(torch.float8_e4m3fn), torch.ones(16, 16).half(), "b must be one of", TypeError),
        (torch.ones(16, 16).to(torch.float8_e4m3fn),) * 2 + ("a must be a CUDA tensor", ValueError),
        ("a", torch.ones(16, 16), "a must be a torch.Tensor", TypeError),
    ],
)
def test_gemm_fp8_names_bad_operands(a, b, message, error):
    with pytest.raises(error, match=message):
        ext.gemm_fp8(a, b, 1.0, 1.0)


def test_gemm_fp8_schema_exists_without_a_build():
    schema = str(torch.ops.cutlass_ext.gemm_fp8.default._schema)
    assert schema.startswith("cutlass_ext::gemm_fp8(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias")


def test_the_default_variant_takes_the_callers_dtypes_and_accumulation():
    from cutlass_ext import fp8

    name = fp8._default_variant("e5m2", "e4m3", "fp32", "fast")
    assert from_name(name) == dataclasses.replace(DEFAULT_FP8, accum="fast").with_dtypes("e5m2", "e4m3", "fp32")
    assert fp8._default_variant("e5m2", "e4m3", "fp32", "fast") is name  # built once, asked per call
    assert [c.accum for c in fp8.dispatch_configs()[:2]] == ["fast", "promoted"]


def test_variant_names_are_what_dispatch_runs_without_building_them(monkeypatch):
    """The benchmark builds these for all its shapes at once; asking for them must not build or load anything."""
    from cutlass_ext import fp8, registry, tuned

    monkeypatch.setattr(fp8.device_info, "info", lambda index: fp8.device_info.named("NVIDIA H100 80GB HBM3"))
    monkeypatch.setattr(registry, "ensure_names_registered", lambda *_: pytest.fail("variant_names built a kernel"))
    tuned.set_tuned_table(None)  # the shipped tables
    cuda = torch.device("cuda", 0)
    names = fp8.variant_names(cuda, "e4m3", "e4m3", "bf16", "fast", 1, 8192, 8192)
    winner = tuned.lookup("NVIDIA H100 80GB HBM3", "fp8_fast", 1, 8192, 8192, m_bucket_above=True)
    assert names == [winner.name, fp8._default_variant("e4m3", "e4m3", "bf16", "fast")]
    assert (
        fp8.variant_names(cuda, "e5m2", "e4m3", "fp32", "fast", 1, 8192, 8192)[0]
        == winner.with_dtypes("e5m2", "e4m3", "fp32").name
    )


def test_gemm_fp8_plans_a_signature_once_per_tuned_table(monkeypatch, request):
    """Eager calls with one signature skip the dtype and shape checks and the table lookup after the first; a new
    tuned table plans again."""
    from cutlass_ext import fp8, tuned

    looked_up = []
    monkeypatch.setattr(fp8, "_capability", lambda index: (9, 0))
    monkeypatch.setattr(fp8, "_variants", lambda *arguments: looked_up.append(arguments) or ["chosen"])
    fp8._cached_plan.cache_clear()
    request.addfinalizer(fp8._cached_plan.cache_clear)  # no plan of the stand-in table outlives the test
    cuda = torch.device("cuda", 0)
    fp8_dtype, shape_a, shape_b = torch.float8_e4m3fn, torch.Size((16, 64)), torch.Size((32, 64))

    def plan():
        return fp8._cached_plan(
            fp8_dtype, fp8_dtype, shape_a, shape_b, cuda, cuda, torch.bfloat16, "fast", tuned.generation()
        )

    assert plan() == plan() == ["chosen"]
    assert looked_up == [(cuda, "e4m3", "e4m3", "bf16", "fast", 16, 32, 64)]
    tuned.set_tuned_table(None)
    plan()
    assert len(looked_up) == 2
    with pytest.raises(ValueError, match="K=40 must be a multiple of 16"):
        fp8._cached_plan(
            fp8_dtype,
            fp8_dtype,
            torch.Size((16, 40)),
            torch.Size((32, 40)),
            cuda,
            cuda,
            torch.bfloat16,
            "fast",
            tuned.generation(),
        )


def test_weights_first_is_a_name_suffix_and_a_template_argument():
    config = Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x128x128_c2x1_coop_promoted_l2pf8_se_wf")
    assert config.weights_first and config.stage_epilogue and config.l2_prefetch == 8
    assert not Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x176x128_c2x1_pp_fast").weights_first
    assert config.fingerprint() != dataclasses.replace(config, weights_first=False).fingerprint()
    instance = render_instance(config)
    assert instance.rstrip().endswith("true, true, false>)")  # StageEpilogueD, WeightsFirst, BufferEpilogueD
    unordered = render_instance(dataclasses.replace(config, weights_first=False))
    assert unordered.rstrip().endswith("true, false, false>)")
