"""Fp8Linear on the CPU: weights quantized once per output channel, per tensor or per 128x128 block, buffers and keys,
argument errors (tests/gpu/test_fp8_linear.py runs the layer)."""

import numpy as np
import pytest
import torch

import cutlass_ext as ext

E4M3_RELATIVE_STEP = 2.0**-3  # e4m3 has 3 mantissa bits: a rounding moves a value by at most half of this


def linear(in_features=64, out_features=32, bias=True, dtype=torch.bfloat16, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(in_features, out_features, bias=bias, dtype=dtype)


def per_element(scale, rows, columns):
    """A (ceil(rows / 128), ceil(columns / 128)) block scale repeated over its block's elements."""
    return scale.repeat_interleave(128, dim=0)[:rows].repeat_interleave(128, dim=1)[:, :columns]


@pytest.mark.parametrize("scaling", ["row", "tensor", "block"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_from_linear_quantizes_the_weight_once(scaling, dtype):
    out_features, in_features = (160, 272) if scaling == "block" else (32, 64)  # partial blocks on both sides
    source = linear(in_features, out_features, dtype=dtype)
    with torch.no_grad():
        source.weight[3] *= 100.0  # one loud channel: per-channel scales keep the others' precision
    layer = ext.nn.Fp8Linear.from_linear(source, scaling=scaling)
    assert layer.weight.dtype == torch.float8_e4m3fn and layer.weight.shape == (out_features, in_features)
    assert layer.weight_scale.dtype == torch.float32
    assert layer.weight_scale.shape == {"row": (32, 1), "tensor": (), "block": (2, 3)}[scaling]
    assert layer.out_dtype == dtype and layer.bias.dtype == dtype
    torch.testing.assert_close(layer.bias, source.bias.detach())
    weight = source.weight.detach().double()
    scale = layer.weight_scale.double()
    if scaling == "block":
        scale = per_element(scale, out_features, in_features)
    dequantized = layer.weight.double() * scale
    if scaling == "block":  # each block's largest magnitude maps to e4m3's largest
        largest = per_element(
            torch.nn.functional.pad(weight.abs(), (0, 384 - in_features, 0, 256 - out_features))
            .reshape(2, 128, 3, 128)
            .amax(dim=(1, 3)),
            out_features,
            in_features,
        )
    else:
        largest = weight.abs().amax(dim=1, keepdim=True) if scaling == "row" else weight.abs().amax()
    # normal e4m3 values: half a step relative; the smallest, subnormal, ones: absolute, relative to the scale
    bound = torch.maximum(weight.abs() * E4M3_RELATIVE_STEP / 2, largest / 448 * 2.0**-9)
    assert ((dequantized - weight).abs() <= bound * (1 + 1e-6)).all()
    assert list(layer.state_dict()) == ["weight", "weight_scale", "bias"]
    assert not list(layer.parameters())


def test_without_bias_and_with_another_output_dtype():
    layer = ext.nn.Fp8Linear.from_linear(linear(bias=False, dtype=torch.float32), out_dtype=torch.bfloat16)
    assert layer.bias is None and layer.out_dtype == torch.bfloat16
    assert list(layer.state_dict()) == ["weight", "weight_scale"]
    assert "scaling='row', accum='promoted', out_dtype=torch.bfloat16" in repr(layer)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"scaling": "channel"}, ValueError, "scaling='channel' is not one of"),
        ({"scaling": "block", "accum": "fast"}, ValueError, "accum='fast': block scales are applied as each"),
        ({"accum": "exact"}, ValueError, "accum='exact' is not one of"),
        ({"out_dtype": torch.float64}, TypeError, "out_dtype must be one of"),
        ({"in_features": 40}, ValueError, "in_features=40 must be a multiple of 16"),
        ({"out_features": 12}, ValueError, "out_features=12 must be a multiple of 8"),
        ({"out_features": 12, "out_dtype": torch.float32}, None, None),
        ({"in_features": "16"}, ValueError, "in_features='16' must be a positive integer"),
        ({"in_features": 16.0}, ValueError, "in_features=16.0 must be a positive integer"),
        ({"out_features": -16}, ValueError, "out_features=-16 must be a positive integer"),
        ({"in_features": 0}, ValueError, "in_features=0 must be a positive integer"),
    ],
)
def test_constructor_arguments_are_named(kwargs, error, message):
    arguments = {"in_features": 64, "out_features": 32, **kwargs}
    if error is None:
        ext.nn.Fp8Linear(**arguments)
        return
    with pytest.raises(error, match=message):
        ext.nn.Fp8Linear(**arguments)


def test_forward_names_bad_inputs():
    layer = ext.nn.Fp8Linear.from_linear(linear())
    with pytest.raises(TypeError, match="input must be a torch.Tensor"):
        layer([0.0] * 64)
    with pytest.raises(TypeError, match="input must be one of"):
        layer(torch.ones(2, 64, dtype=torch.float64))
    with pytest.raises(ValueError, match="last dimension must be in_features=64"):
        layer(torch.ones(2, 32, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="input must be a CUDA tensor"):
        layer(torch.ones(2, 64, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="linear must be a torch.nn.Linear"):
        ext.nn.Fp8Linear.from_linear(torch.nn.Conv1d(4, 4, 1))
    poisoned = linear()
    with torch.no_grad():
        poisoned.weight[3, 5] = float("nan")
    with pytest.raises(ValueError, match="linear.weight holds Inf or NaN"):
        ext.nn.Fp8Linear.from_linear(poisoned)


@pytest.mark.parametrize("scaling", ["row", "tensor", "block"])
def test_a_model_built_on_the_meta_device_converts(scaling):
    layer = ext.nn.Fp8Linear.from_linear(torch.nn.Linear(128, 64, device="meta"), scaling=scaling)
    assert layer.weight.device.type == "meta"
    assert ext.nn.Fp8Linear(np.int64(128), np.int64(64)).in_features == 128  # numpy sizes, as torch takes them


def test_a_cast_model_is_reported():
    layer = ext.nn.Fp8Linear.from_linear(linear()).to(torch.bfloat16)  # Module.to(dtype) casts the FP8 buffer too
    with pytest.raises(TypeError, match="weight must be torch.float8_e4m3fn"):
        layer(torch.ones(2, 64, dtype=torch.bfloat16))


def test_row_quantizer_op_schema_and_fake_on_the_cpu():
    """The op's schema and fake, and its values by the definition's properties (on the CPU its body is quantize_fp8
    itself): a row's scale is its largest magnitude over e4m3's 448, which maps to ±448, and every element comes
    back within half an e4m3 step (2^-4 relative, or 2^-10 · scale among the subnormals)."""
    x = torch.randn(5, 48, dtype=torch.bfloat16)
    torch.library.opcheck(torch.ops.cutlass_ext.quantize_fp8_rows.default, (x, torch.float8_e4m3fn))
    x_fp8, scale = torch.ops.cutlass_ext.quantize_fp8_rows(x, torch.float8_e4m3fn)
    largest = x.float().abs().amax(dim=-1, keepdim=True)
    assert torch.equal(scale, largest / torch.full((), 448.0))
    assert torch.equal(x_fp8.float().abs().amax(dim=-1, keepdim=True), torch.full_like(largest, 448.0))
    error = (x_fp8.double() * scale.double() - x.double()).abs()
    assert (error <= 2.0**-4 * x.double().abs() + 2.0**-10 * scale.double()).all()


def test_a_weight_stored_transposed_is_quantized_k_major():
    linear = torch.nn.Linear(32, 16)
    linear.weight = torch.nn.Parameter(torch.randn(32, 16).T)  # (16, 32) with K's stride 16
    layer = ext.nn.Fp8Linear.from_linear(linear, "row")
    assert layer.weight.is_contiguous()
    expected = ext.quantize_fp8(linear.weight.detach().contiguous(), granularity="row")[0]
    assert torch.equal(layer.weight.view(torch.uint8), expected.view(torch.uint8))
