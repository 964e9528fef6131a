"""FP8 pieces that need no GPU: the config and its name, generated code, quantization, the FP64 reference, and
argument errors raised before anything touches a GPU."""

import dataclasses

import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import codegen, numerics
from cutlass_ext.fp8_config import DEFAULT_FP8, Fp8Config
from cutlass_ext.variants import from_name


@pytest.mark.parametrize(
    "config",
    [
        DEFAULT_FP8,
        Fp8Config("e5m2", "e4m3", "fp32", "fast", (64, 256, 128), (1, 2), "pingpong", "persistent"),
        Fp8Config(tile=(128, 64, 256), cluster=(2, 1), scheduler="splitk", splits=8),
        Fp8Config(scheduler="streamk", swizzle=4, promotion=2),
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
        ({"accum": "fast", "promotion": 2}, "promotion=2 is for accum='promoted'"),
    ],
)
def test_bad_fields_are_named(fields, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(DEFAULT_FP8, **fields)


def test_non_canonical_names_are_refused():
    with pytest.raises(ValueError, match="not an FP8 variant name"):
        Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x128x128_c1x1_coop")


def test_generated_code_instantiates_the_config():
    config = Fp8Config("e5m2", "e4m3", "fp16", "fast", (64, 128, 128), (2, 1), "pingpong", "splitk", 4)
    source = codegen.render_library([config])
    assert '#include "sm90_fp8_gemm.cuh"' in source
    assert (
        "Sm90Fp8Gemm<cutlass::float_e5m2_t, cutlass::float_e4m3_t, cutlass::half_t, 64, 128, 128,\n"
        "                             2, 1, cutlass_ext::SchedulePingpong, true,\n"
        "                             cutlass_ext::DecomposeSplitK, 4, 1, 1>"
    ) in source
    with pytest.raises(ValueError, match="one family"):
        codegen.render_library([config, ext.KernelConfig("tf32")])


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
