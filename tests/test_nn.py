"""ext.nn on the CPU: convert / unconvert keep parameters, keys and references; Linear names its bad arguments and
makes one fused gemm call (tests/gpu/test_precision.py runs the kernels)."""

import importlib

import pytest
import torch

import cutlass_ext as ext

nn_module = importlib.import_module("cutlass_ext.nn")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.attention = torch.nn.MultiheadAttention(8, 2)  # its out_proj is a Linear subclass it never calls
        self.mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8, bias=False))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(8, 5)
        self.tied = self.head  # the same layer under a second name


def linear_names(model, cls):
    return sorted(name for name, m in model.named_modules(remove_duplicate=False) if type(m) is cls)


def test_convert_keeps_parameters_keys_and_references():
    model = Model()
    parameters = dict(model.named_parameters())
    state = model.state_dict()
    head = model.head
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert ext.nn.convert(model, mode="halfhalf") is model
    assert linear_names(model, ext.nn.Linear) == [
        "blocks.0.mlp.0",
        "blocks.0.mlp.2",
        "blocks.1.mlp.0",
        "blocks.1.mlp.2",
        "head",
        "tied",
    ]
    assert all(m.mode == "halfhalf" for m in model.modules() if isinstance(m, ext.nn.Linear))
    assert type(model.blocks[0].attention.out_proj) is not ext.nn.Linear
    assert model.head is head and model.tied is head
    assert all(p is parameters[name] for name, p in model.named_parameters())
    assert list(model.state_dict()) == list(state)
    assert all(model.state_dict()[key] is not None and model.state_dict()[key].equal(state[key]) for key in state)
    assert optimizer.param_groups[0]["params"][0] is next(model.parameters())


def test_unconvert_is_the_inverse():
    model = Model()
    keys = list(model.state_dict())
    before = {name: p for name, p in model.named_parameters()}
    ext.nn.unconvert(ext.nn.convert(model))
    assert not linear_names(model, ext.nn.Linear)
    assert linear_names(model, torch.nn.Linear) == [
        "blocks.0.mlp.0",
        "blocks.0.mlp.2",
        "blocks.1.mlp.0",
        "blocks.1.mlp.2",
        "head",
        "tied",
    ]
    assert list(model.state_dict()) == keys
    assert all(p is before[name] for name, p in model.named_parameters())
    assert not any(hasattr(m, "mode") for m in model.modules())
    x = torch.randn(3, 8)
    torch.testing.assert_close(model.head(x), x @ model.head.weight.T + model.head.bias)  # torch's forward again


def test_convert_skips_layers_and_whole_modules():
    model = Model()
    ext.nn.convert(model, skip=["blocks.0", "blocks.1.mlp.2"])
    assert linear_names(model, ext.nn.Linear) == ["blocks.1.mlp.0", "head", "tied"]
    assert linear_names(ext.nn.convert(Model(), skip="head"), torch.nn.Linear) == ["head", "tied"]  # one layer


def test_convert_a_lone_linear_and_keep_its_hooks():
    layer = torch.nn.Linear(4, 4)
    hook = layer.register_forward_pre_hook(lambda module, args: None)
    assert ext.nn.convert(layer, mode="tf32") is layer
    assert type(layer) is ext.nn.Linear and layer.mode == "tf32"
    assert list(layer._forward_pre_hooks) == [hook.id]


def test_convert_again_changes_the_mode():
    model = ext.nn.convert(Model(), mode="tf32tf32", skip="head")
    ext.nn.convert(model, mode="markidis", skip="blocks.1")
    modes = {name: m.mode for name, m in model.named_modules() if isinstance(m, ext.nn.Linear)}
    assert modes == {
        "blocks.0.mlp.0": "markidis",
        "blocks.0.mlp.2": "markidis",
        "blocks.1.mlp.0": "tf32tf32",
        "blocks.1.mlp.2": "tf32tf32",
        "head": "markidis",
    }


def test_convert_checks_its_arguments():
    with pytest.raises(ValueError, match="mode='bf16' is not one of"):
        ext.nn.convert(Model(), mode="bf16")
    with pytest.raises(TypeError, match="model must be a torch.nn.Module; got list"):
        ext.nn.convert([Model()])
    with pytest.raises(TypeError, match="model must be a torch.nn.Module; got str"):
        ext.nn.unconvert("x")
    with pytest.raises(TypeError, match="skip must be a module's name or an iterable of names; got 0"):
        ext.nn.convert(Model(), skip=0)
    with pytest.raises(ValueError, match=r"skip names modules that model does not have: \['decoder'\]"):
        ext.nn.convert(Model(), skip=["head", "decoder"])


def test_linear_rejects_bad_arguments_by_the_layers_names():
    layer = ext.nn.Linear(6, 4)
    with pytest.raises(TypeError, match="input must be a torch.Tensor"):
        layer([1.0] * 6)
    with pytest.raises(TypeError, match="input must be float32"):
        layer(torch.ones(2, 6, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="input must be a CUDA tensor"):
        layer(torch.ones(2, 6))
    with pytest.raises(ValueError, match="mode='bf16'"):
        ext.nn.Linear(4, 4, mode="bf16")
    half = ext.nn.Linear(6, 4).to(torch.bfloat16)
    with pytest.raises(TypeError, match="weight must be float32"):
        half(torch.ones(2, 6))


def test_linear_is_one_gemm_call_with_the_bias_fused(monkeypatch):
    calls = []

    def fake_gemm(a, b, mode, *, bias=None):
        calls.append((a, b, mode, bias))
        return torch.matmul(a, b) + (0 if bias is None else bias)

    monkeypatch.setattr(nn_module, "gemm", fake_gemm)
    monkeypatch.setattr(ext.nn.Linear, "_check", lambda self, input, autocast: None)
    layer = ext.nn.Linear(6, 4, mode="markidis")
    x = torch.randn(2, 3, 6)
    y = layer(x)
    torch.testing.assert_close(y, torch.nn.functional.linear(x, layer.weight, layer.bias))
    ((a, b, mode, bias),) = calls
    assert a is x and mode == "markidis" and bias is layer.bias
    assert b.data_ptr() == layer.weight.data_ptr() and b.shape == (6, 4)  # the transposed view, no copy


def test_parametrized_layers_are_refused_or_take_the_mode_never_skipped_silently():
    from torch.nn.utils import parametrize

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    parametrize.register_parametrization(model[1], "weight", torch.nn.Identity())
    with pytest.raises(ValueError, match="layer '1' has parametrizations"):
        ext.nn.convert(model)
    assert type(model[0]) is torch.nn.Linear  # refused before any change
    ext.nn.convert(model, "halfhalf", skip="1")
    parametrize.register_parametrization(model[0], "weight", torch.nn.Identity())
    ext.nn.convert(model, "fp32", skip="1")
    assert model[0].mode == "fp32" and isinstance(model[0], ext.nn.Linear)
    with pytest.raises(ValueError, match="layer '0' has parametrizations.*before unconvert"):
        ext.nn.unconvert(model)
    assert isinstance(model[0], ext.nn.Linear)
