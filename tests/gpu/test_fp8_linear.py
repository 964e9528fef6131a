"""Fp8Linear on a Hopper GPU: the layer is exactly quantize_fp8 + gemm_fp8, close to the bf16 layer, and works under
torch.compile and CUDA-graph capture."""

import copy

import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import fp8_rows

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="needs an sm90 GPU"
)

# e4m3 keeps 3 mantissa bits: each operand is off by up to 2^-4 relative, the norm-wise error of a product of
# normal data lands near 3e-2.
FP8_TOLERANCE = 6e-2


def bf16_linear(in_features, out_features, bias=True, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(in_features, out_features, bias=bias, device="cuda", dtype=torch.bfloat16)


def tokens(*shape, seed):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=generator, device="cuda").to(torch.bfloat16)


def relative_error(result, reference) -> float:
    return float((result.double() - reference).norm() / reference.norm())


def rows_to_quantize(kind, dtype, columns):
    generator = torch.Generator(device="cuda").manual_seed(columns)
    x = torch.randn(37, columns, generator=generator, device="cuda")
    if kind == "outliers":
        x[:, ::97] *= 1e4
    elif kind == "tiny":
        x *= 1e-30  # scales near float32's smallest normal
    elif kind == "subnormal":
        x *= 1e-39  # float32 subnormals: divided as they are (div.rn.f32), not flushed to zero
    elif kind == "special":
        x[3] = 0.0  # an all-zero row: the smallest normal scale
        x[5, 7] = float("nan")
        x[8, 1] = float("inf")
    return x.to(dtype)


@pytest.mark.parametrize("kind", ["normal", "outliers", "tiny", "subnormal", "special"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("columns", [16, 272, 2048, 4112, 28672])
def test_one_pass_row_quantizer_is_quantize_fp8_bit_for_bit(kind, dtype, columns):
    if (kind == "tiny" and dtype != torch.float32) or (kind == "subnormal" and dtype == torch.float16):
        pytest.skip(f"{dtype} holds no such values")
    assert fp8_rows._triton_available()  # else the op falls back to the quantize_fp8 it is compared with
    x = rows_to_quantize(kind, dtype, columns)
    strided = torch.cat([x, x], dim=1)[:, :columns]  # rows a stride apart that is not their length
    for rows in (x, strided):
        x_fp8, scale = torch.ops.cutlass_ext.quantize_fp8_rows(rows, torch.float8_e4m3fn)
        expected_fp8, expected_scale = ext.quantize_fp8(rows, granularity="row")
        # the same values and NaN positions (a NaN's sign bit is the converter's choice)
        torch.testing.assert_close(x_fp8.float(), expected_fp8.float(), rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(scale, expected_scale, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("scaling", ["row", "tensor", "block"])
@pytest.mark.parametrize("shape", [(21, 272), (2, 64, 272)])  # decode-sized (swapped kernels) and prefill-sized
@pytest.mark.parametrize("bias", [True, False])
def test_layer_is_quantize_then_gemm_fp8(scaling, shape, bias):
    """K = 272: a partial last 128-wide block for the block scales."""
    source = bf16_linear(272, 512, bias=bias)
    layer = ext.nn.Fp8Linear.from_linear(source, scaling=scaling)
    x = tokens(*shape, seed=1)
    y = layer(x)
    assert y.dtype == torch.bfloat16 and y.shape == (*shape[:-1], 512)
    rows = x.reshape(-1, 272)
    x8, x_scale = ext.quantize_fp8(rows, granularity=scaling, block=(1, 128))
    w8, w_scale = ext.quantize_fp8(source.weight.detach(), granularity=scaling, block=(128, 128))
    manual = ext.gemm_fp8(x8, w8, x_scale, w_scale, torch.bfloat16, bias=layer.bias)
    assert torch.equal(y.reshape(-1, 512), manual)
    expected = x.double() @ source.weight.double().T + (source.bias.double() if bias else 0)
    assert relative_error(y, expected) < FP8_TOLERANCE


def test_fast_accumulation_and_per_channel_scales_follow_outliers():
    source = bf16_linear(256, 512)
    with torch.no_grad():
        # a loud output channel: one scale per tensor leaves the others e4m3's subnormals, one per channel does not
        source.weight[7] *= 1e5
    x = tokens(2, 64, 256, seed=2)
    expected = x.double() @ source.weight.double().T + source.bias.double()
    quiet = [c for c in range(512) if c != 7]
    errors = {}
    for scaling in ("row", "tensor"):
        y = ext.nn.Fp8Linear.from_linear(source, scaling=scaling, accum="fast")(x)
        errors[scaling] = relative_error(y[..., quiet], expected[..., quiet])
    assert errors["row"] < FP8_TOLERANCE < errors["tensor"]


@pytest.mark.parametrize("scaling", ["row", "block"])
def test_compile_and_cuda_graphs(scaling):
    torch._dynamo.reset()
    layer = ext.nn.Fp8Linear.from_linear(bf16_linear(256, 512), scaling=scaling)
    x = tokens(2, 64, 256, seed=3)
    eager = layer(x)
    assert torch.equal(torch.compile(layer, fullgraph=True)(x), eager)
    static_x = x.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        layer(static_x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = layer(static_x)
    static_x.copy_(tokens(2, 64, 256, seed=4))
    graph.replay()
    assert torch.equal(static_y, layer(static_x))


def test_a_llama_mlp_block_in_fp8():
    gate, up, down = bf16_linear(256, 512, False, 1), bf16_linear(256, 512, False, 2), bf16_linear(512, 256, False, 3)
    fp8 = [ext.nn.Fp8Linear.from_linear(layer) for layer in (gate, up, down)]
    x = tokens(64, 256, seed=5)

    def block(gate, up, down, x):
        return down(torch.nn.functional.silu(gate(x)) * up(x))

    with torch.no_grad():
        reference = block(*(copy.deepcopy(layer).double() for layer in (gate, up, down)), x.double())
        bf16 = block(gate, up, down, x)
    result = block(*fp8, x)
    assert result.dtype == torch.bfloat16
    # three chained quantized products: twice one product's bound
    assert relative_error(bf16, reference) < relative_error(result, reference) < 2 * FP8_TOLERANCE
