"""cutlass_ext.lowbit's public API on CPU: dispatch to the reference, STE autograd, layers, conversion, dynamic bias,
errors, torch.compile, and the experiments' --quick mode."""

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from cutlass_ext import lowbit
from cutlass_ext.lowbit import ste as ste_module
from cutlass_ext.lowbit.format import LowbitFormat
from cutlass_ext.lowbit.reference import lowbit_matmul_fmt

M7E4 = LowbitFormat.make(7, 4)  # Table 2: b_acc = 10, b_prod = 12, chunk 16
FP32_LIKE = LowbitFormat.make(23, 8, 128, 128, underflow=False)  # every bit kept, R_OF = FP32's largest value
ROOT = Path(__file__).resolve().parent.parent


def config(fmt=M7E4, **kwargs) -> lowbit.LowbitConfig:
    return lowbit.LowbitConfig(fmt, **kwargs)


def same(x, y) -> bool:
    return torch.equal(x.view(torch.int32), y.view(torch.int32))


def randn(*shape, seed: int, requires_grad: bool = False) -> torch.Tensor:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    return x.requires_grad_(requires_grad)


# ---- matmul and linear


@pytest.mark.parametrize("fmt", [M7E4, LowbitFormat.make(4, 3, 5, 5, chunk=4, underflow=False)], ids=lambda f: f.name)
def test_matmul_is_the_reference_on_cpu(fmt):
    a, b = randn(2, 1, 7, 33, seed=1), randn(3, 33, 5, seed=2)
    c = lowbit.matmul(a, b, config(fmt))
    assert c.shape == (2, 3, 7, 5) and c.dtype == torch.float32
    assert same(c, lowbit_matmul_fmt(a, b, fmt))
    half = lowbit.matmul(a[0, 0].half(), b[0].half(), config(fmt))  # cast up exactly, then the same chain
    assert same(half, lowbit_matmul_fmt(a[0, 0].half().float(), b[0].half().float(), fmt))


def test_linear_follows_f_linear_with_bias_added_after():
    x, weight, bias = randn(2, 3, 20, seed=3), randn(6, 20, seed=4), randn(6, seed=5)
    y = lowbit.linear(x, weight, bias, config())
    expected = lowbit_matmul_fmt(x.reshape(6, 20), weight.t(), M7E4).reshape(2, 3, 6) + bias
    assert y.shape == (2, 3, 6) and same(y, expected)
    assert same(lowbit.linear(x[0, 0], weight, None, config()), lowbit_matmul_fmt(x[0, :1], weight.t(), M7E4)[0])
    close = lowbit.linear(x, weight, bias, config(FP32_LIKE))
    torch.testing.assert_close(close, F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)


def test_identity_ste_gradients_are_plain_gradients_with_broadcast():
    a, b = randn(2, 1, 4, 9, seed=6, requires_grad=True), randn(3, 9, 5, seed=7, requires_grad=True)
    grad = randn(2, 3, 4, 5, seed=8)
    lowbit.matmul(a, b, config()).backward(grad)
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    torch.matmul(a2, b2).backward(grad)
    torch.testing.assert_close(a.grad, a2.grad, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(b.grad, b2.grad, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("ste", ["recursive-of", "immediate-of", "immediate-diff"])
def test_ste_gradients_come_from_the_ste_reference(ste):
    fmt = LowbitFormat.make(4, 3, 5, 5, chunk=4)  # appendix C.3's M4E3, bias 5: overflow and swamping are common
    a, b = randn(2, 6, 19, seed=9, requires_grad=True), randn(19, 3, seed=10, requires_grad=True)
    grad = randn(2, 6, 3, seed=11)
    cfg = config(fmt, ste=ste, eps1=1e-9, eps2=0.25)
    lowbit.matmul(a, b, cfg).backward(grad)
    grad_a, grad_b = ste_module.grad_reference(
        a.detach(), b.detach().expand(2, 19, 3), grad, fmt, ste, cfg.eps1, cfg.eps2
    )
    assert same(a.grad, grad_a)
    torch.testing.assert_close(b.grad, grad_b.sum(0), rtol=0, atol=0)
    assert not torch.equal(a.grad, grad @ b.detach().t())  # the STE blocks some products' gradients


def test_torch_compile_runs_the_reference_op():
    layer = lowbit.Linear(12, 4, config=config())
    x = randn(5, 12, seed=12, requires_grad=True)
    compiled = torch.compile(layer, fullgraph=True)
    y, y_eager = compiled(x), layer(x)
    assert same(y, y_eager)
    (grad_compiled,) = torch.autograd.grad(y.sum(), x)
    (grad_eager,) = torch.autograd.grad(y_eager.sum(), x)
    assert torch.equal(grad_compiled, grad_eager)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: lowbit.matmul(torch.ones(2, 3), torch.ones(3, 2), M7E4), TypeError, "config must be a LowbitConfig"),
        (
            lambda: lowbit.matmul(torch.ones(2, 3, dtype=torch.int64), torch.ones(3, 2), config()),
            TypeError,
            "a must be a floating-point tensor",
        ),
        (lambda: lowbit.matmul(torch.ones(2, 3), [[1.0]], config()), TypeError, "b must be a torch.Tensor"),
        (lambda: lowbit.matmul(torch.ones(2, 3), torch.ones(4, 2), config()), ValueError, "agree on K"),
        (lambda: lowbit.matmul(torch.ones(3), torch.ones(3, 2), config()), ValueError, "at least 2 dimensions"),
        (lambda: lowbit.matmul(torch.ones(2, 2, 3), torch.ones(3, 3, 2), config()), ValueError, "do not broadcast"),
        (
            lambda: lowbit.linear(torch.ones(2, 3), torch.ones(4, 3, 1), None, config()),
            ValueError,
            "weight must be 2-D",
        ),
        (lambda: lowbit.linear(torch.ones(2, 5), torch.ones(4, 3), None, config()), ValueError, "in_features 3"),
        (
            lambda: lowbit.linear(torch.ones(2, 3), torch.ones(4, 3), torch.ones(3), config()),
            ValueError,
            r"bias must have shape \(4,\)",
        ),
        (lambda: config(ste="straight"), ValueError, "ste='straight'"),
        (lambda: config(eps1=-1.0), ValueError, "eps1=-1.0"),
        (lambda: config(eps2=float("inf")), ValueError, "eps2=inf"),
        (lambda: config(dynamic_bias=1), ValueError, "dynamic_bias=1"),
        (lambda: lowbit.LowbitConfig("M7E4"), TypeError, "format must be a LowbitFormat"),
        (lambda: lowbit.Linear(3, 4, config="M7E4"), TypeError, "config must be a LowbitConfig"),
        (lambda: lowbit.Conv2d(1, 2, 3, padding_mode="mirror", config=config()), ValueError, "padding_mode"),
        (lambda: lowbit.Conv2d(1, 2, 3, padding="full", config=config()), ValueError, "padding"),
        (
            lambda: lowbit.Conv2d(2, 2, 3, config=config())(torch.ones(1, 3, 5, 5)),
            ValueError,
            r"x must be \(N, 2, H, W\) or \(2, H, W\)",
        ),
        (lambda: lowbit.Conv2d(2, 2, 3, config=config())(torch.ones(2, 5, 5)[0]), ValueError, r"got \(5, 5\)"),
        (lambda: config(eps2=torch.tensor(1e-3)), TypeError, "eps2 must be a real number"),
        (lambda: lowbit.set_underflow(torch.nn.Linear(2, 2), 1), ValueError, "on=1"),
        (lambda: lowbit.Conv2d(2, 2, 3, config=config())([1.0]), TypeError, "x must be a floating-point tensor"),
        (
            lambda: lowbit.Conv2d(2, 2, 3, config=config())(torch.ones(1, 2, 4, 4, dtype=torch.int64)),
            TypeError,
            "x must be a floating-point tensor; got torch.int64",
        ),
        (
            lambda: lowbit.Conv2d(2, 2, 3, config=config())(torch.ones(1, 2, 2, 5)),
            ValueError,
            r"x's 2x5 plane, padded by \(0, 0\), is smaller than the 3x3 kernel",
        ),
        (
            lambda: LowbitFormat.make(7, 4, chunk=2**100),
            ValueError,
            r"chunk=\d+ must be an integer in 1..9223372036854775807",
        ),
        (
            lambda: LowbitFormat.make(7, 8, prod_exp=2),
            ValueError,
            "acc_bias=.* is the default, prod_bias .*: pass acc_bias",
        ),
    ],
)
def test_bad_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ---- layers and conversion


@pytest.mark.parametrize("groups, stride, padding, dilation", [(1, 1, 1, 1), (2, 2, 0, 1), (1, 1, 2, 2)])
def test_conv2d_is_unfold_and_the_lowbit_gemm(groups, stride, padding, dilation):
    conv = lowbit.Conv2d(4, 6, 3, stride, padding, dilation, groups, config=config())
    x = randn(2, 4, 9, 7, seed=13)
    y = conv(x)
    reference = F.conv2d(x, conv.weight, conv.bias, stride, padding, dilation, groups)
    assert y.shape == reference.shape
    columns = F.unfold(x, 3, dilation, padding, stride).reshape(2, groups, 4 // groups * 9, -1)
    product = lowbit_matmul_fmt(conv.weight.detach().reshape(groups, 6 // groups, -1), columns, M7E4)
    expected = (product + conv.bias.detach().reshape(groups, -1, 1)).reshape(reference.shape)
    assert same(y.detach(), expected)
    exact = lowbit.Conv2d(4, 6, 3, stride, padding, dilation, groups, config=config(FP32_LIKE))
    exact.load_state_dict(conv.state_dict())
    torch.testing.assert_close(exact(x), reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kernel, padding, dilation, padding_mode",
    [
        (3, "same", 1, "zeros"),
        (4, "same", 1, "zeros"),  # uneven: one more row and column after than before, as torch pads
        ((2, 5), "same", (2, 1), "zeros"),
        (3, "valid", 1, "zeros"),
        (3, 1, 1, "reflect"),
        (3, (2, 1), 1, "replicate"),
        (4, "same", 1, "circular"),
    ],
)
def test_conv2d_takes_every_padding_of_torchs_layer(kernel, padding, dilation, padding_mode):
    torch_conv = torch.nn.Conv2d(3, 5, kernel, padding=padding, dilation=dilation, padding_mode=padding_mode)
    x = randn(2, 3, 9, 8, seed=17)
    reference = torch_conv(x)
    conv = lowbit.convert(torch.nn.Sequential(torch_conv), config(), skip=[])[0]
    assert isinstance(conv, lowbit.Conv2d)
    y = conv(x)
    assert y.shape == reference.shape
    # the chain sees the input torch's layer pads: the low-bit GEMM of its columns
    mode = "constant" if padding_mode == "zeros" else padding_mode
    columns = F.unfold(F.pad(x, torch_conv._reversed_padding_repeated_twice, mode=mode), kernel, dilation)
    product = lowbit_matmul_fmt(
        conv.weight.detach().reshape(1, 5, -1), columns.reshape(2, 1, -1, columns.shape[-1]), M7E4
    )
    assert same(y.detach(), (product + conv.bias.detach().reshape(1, -1, 1)).reshape(reference.shape))
    conv.config = config(FP32_LIKE)
    torch.testing.assert_close(conv(x), reference, rtol=1e-5, atol=1e-5)


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 3, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Sequential(torch.nn.Linear(3 * 16, 8), torch.nn.ReLU()),
        torch.nn.Linear(8, 3),
    )


def test_convert_changes_layers_in_place_keeping_hooks_and_shared_layers():
    shared = torch.nn.Linear(4, 4)
    calls = []
    shared.register_forward_hook(lambda module, inputs, output: calls.append(type(module).__name__))
    model = torch.nn.Sequential(shared, shared, torch.nn.Linear(4, 2))
    lowbit.convert(model, config())
    assert model[0] is model[1] is shared and type(shared) is lowbit.Linear
    model(torch.ones(1, 4))
    assert calls == ["Linear", "Linear"] and type(model[2]) is torch.nn.Linear
    other = torch.nn.Linear(4, 4)
    kept = torch.nn.Sequential(other, torch.nn.Sequential(other), torch.nn.Linear(4, 2))
    lowbit.convert(kept, config(), skip=["1.0"])  # one of its names skipped: the layer stays exact
    assert type(other) is torch.nn.Linear and type(kept[2]) is lowbit.Linear


def test_convert_checks_everything_before_changing_a_layer():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    with pytest.raises(ValueError, match="skip names modules"):
        lowbit.convert(model, config(), skip=["0", "nope"])
    assert type(model[0]) is torch.nn.Linear
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        lowbit.convert([model], config())
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        lowbit.set_underflow(None, True)
    with pytest.raises(TypeError, match="skip must be a module's name or an iterable of names; got 0"):
        lowbit.convert(model, config(), skip=0)
    layer = lowbit.convert(torch.nn.Linear(4, 3), config(), skip=[])  # a layer alone converts too
    assert type(layer) is lowbit.Linear and layer.config == config()


def test_convert_keeps_parameters_and_keys_and_the_last_layer_exact():
    model = small_model()
    parameters = [id(p) for p in model.parameters()]
    state = {key: value.clone() for key, value in model.state_dict().items()}
    x = randn(2, 1, 4, 4, seed=14)
    before = model(x)
    assert lowbit.convert(model, config(FP32_LIKE)) is model
    assert [id(p) for p in model.parameters()] == parameters
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(model.state_dict()[key], value) for key, value in state.items())
    assert isinstance(model[0], lowbit.Conv2d) and isinstance(model[3][0], lowbit.Linear)
    assert type(model[4]) is torch.nn.Linear  # the last layer stays exact
    torch.testing.assert_close(model(x), before, rtol=1e-5, atol=1e-5)


def test_convert_skip_names():
    every = lowbit.convert(small_model(), config(), skip=())
    assert isinstance(every[4], lowbit.Linear)
    chosen = lowbit.convert(small_model(), config(), skip=["0", "3.0"])
    assert type(chosen[0]) is torch.nn.Conv2d and type(chosen[3][0]) is torch.nn.Linear
    assert isinstance(chosen[4], lowbit.Linear)
    with pytest.raises(ValueError, match="does not have"):
        lowbit.convert(small_model(), config(), skip=["9"])


def test_set_underflow_switches_every_lowbit_layer():
    model = lowbit.convert(small_model(), config(M7E4.with_underflow(False)), skip=())
    assert lowbit.set_underflow(model, True) == 3
    formats = [m.config.format for m in model.modules() if isinstance(m, (lowbit.Linear, lowbit.Conv2d))]
    assert all(f == M7E4 for f in formats)
    x = randn(2, 1, 4, 4, seed=15) * 1e-3  # tiny activations: underflow changes the output
    with_uf = model(x)
    lowbit.set_underflow(model, False)
    assert not torch.equal(model(x), with_uf)


def test_lowbit_layers_train_on_cpu():
    torch.manual_seed(1)
    layer = lowbit.Linear(8, 2, config=config(ste="immediate-diff"))
    x, y = torch.randn(32, 8), torch.randint(0, 2, (32,))
    optimizer = torch.optim.Adam(layer.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        loss = F.cross_entropy(layer(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


# ---- dynamic bias


@pytest.mark.parametrize("scale", [1e-6, 1.0, 3e4])
def test_dynamic_bias_puts_r_of_one_binade_above_the_output(scale):
    a, b = randn(6, 40, seed=16) * scale, randn(40, 5, seed=17)
    fmt = lowbit.dynamic_format(a, b, M7E4)
    largest = float((a @ b).abs().max())
    assert largest < 2 ** (2**4 - fmt.acc_bias - 1) <= 2 * largest  # R_OF's binade is the one above max|C|
    assert fmt.prod_bias - fmt.acc_bias == M7E4.prod_bias - M7E4.acc_bias
    c = lowbit.matmul(a, b, config(dynamic_bias=True))
    assert same(c, lowbit_matmul_fmt(a, b, fmt))
    assert lowbit.dynamic_format(torch.zeros(2, 3), b[:3], M7E4) == M7E4


# ---- the experiments' --quick mode (CPU reference)


@pytest.mark.parametrize(
    "script, files",
    [
        (
            "lowbit_accumulation_error.py",
            {
                "lowbit_accumulation_error.csv": {"man", "exp", "chunk", "underflow", "k", "relres", "relres_fp32"},
                "lowbit_accumulation_events.csv": {"man", "exp", "chunk", "k", "overflow", "underflow", "swamping"},
            },
        ),
        ("lowbit_mlp_digits.py", {"lowbit_mlp_digits.csv": {"run", "epoch", "train_loss", "test_accuracy"}}),
        ("lowbit_cnn_dual_stage.py", {"lowbit_cnn_dual_stage.csv": {"stage", "accuracy_no_uf", "accuracy_uf"}}),
    ],
)
def test_experiment_quick_mode(tmp_path, script, files):
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    result = subprocess.run(
        [sys.executable, str(ROOT / "python" / script), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    tables = {}
    for name, columns in files.items():
        with open(tmp_path / name) as handle:
            rows = list(csv.DictReader(handle))
        assert rows and columns <= set(rows[0])
        tables[name] = rows
    assert (tmp_path / script.replace(".py", ".png")).stat().st_size > 0
    # what each experiment must show even at --quick size (too small to train past chance)
    if script == "lowbit_accumulation_error.py":
        errors = tables["lowbit_accumulation_error.csv"]
        assert all(float(r["relres"]) > float(r["relres_fp32"]) >= 0 for r in errors)  # low-bit sums lose more
        events = tables["lowbit_accumulation_events.csv"]
        assert all(int(r[e]) >= 0 for r in events for e in ("overflow", "underflow", "swamping"))
    elif script == "lowbit_mlp_digits.py":
        rows = tables["lowbit_mlp_digits.csv"]
        runs = {r["run"] for r in rows}
        assert "fp32" in runs and all(any(ste in run for run in runs) for ste in lowbit.STES)
        assert all(0 <= float(r["test_accuracy"]) <= 1 and math.isfinite(float(r["train_loss"])) for r in rows)
    else:
        rows = tables["lowbit_cnn_dual_stage.csv"]
        assert {"FP32", "LBA zero-shot", "LBA stage 2 (no UF -> UF)"} <= {r["stage"] for r in rows}
        assert all(0 <= float(r[a]) <= 1 for r in rows for a in ("accuracy_no_uf", "accuracy_uf"))


def test_linear_of_no_input_features_is_the_bias():
    config = lowbit.LowbitConfig(lowbit.LowbitFormat.make(7, 4))
    x, weight, bias = torch.randn(3, 2, 0), torch.randn(4, 0), torch.randn(4)
    assert torch.equal(lowbit.linear(x, weight, bias, config), F.linear(x, weight, bias))
    assert torch.equal(lowbit.linear(x, weight, None, config), torch.zeros(3, 2, 4))


def test_skip_of_a_container_keeps_its_layers_exact_as_ext_nn_does():
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 8), torch.nn.Sequential(torch.nn.Linear(8, 8)), torch.nn.Linear(8, 3)
    )
    lowbit.convert(model, config(), skip=["1"])
    assert [type(layer) for layer in (model[0], model[1][0], model[2])] == [
        lowbit.Linear,
        torch.nn.Linear,
        lowbit.Linear,
    ]
    everything_kept = lowbit.convert(small_model(), config(), skip="")  # the root's name
    assert not any(isinstance(m, (lowbit.Linear, lowbit.Conv2d)) for m in everything_kept.modules())


def test_layers_return_the_dtype_torchs_layers_do():
    """A bf16 or float64 model keeps its dtype through converted layers (the exact last layer would refuse float32
    input), and autocast's dtype is the output's as for torch's layers; the values are the float32 ones rounded."""
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.Flatten(), torch.nn.Linear(12, 2)).to(dtype)
        x = randn(1, 2, 4, 4, seed=3).to(dtype)
        twin = lowbit.convert(
            torch.nn.Sequential(torch.nn.Linear(2, 2).to(dtype), torch.nn.Linear(2, 2).to(dtype)), config()
        )
        assert twin(torch.ones(3, 2, dtype=dtype)).dtype == dtype
        layer = lowbit.convert(model, config())[0]
        expected = lowbit.Conv2d(2, 3, 3, config=config())
        expected.load_state_dict({name: value.float() for name, value in layer.state_dict().items()})
        assert model(x).dtype == dtype
        assert torch.equal(layer(x), expected(x.float()).to(dtype))
    linear = lowbit.Linear(4, 2, config=config())
    with torch.autocast("cpu", torch.bfloat16):
        assert linear(randn(3, 4, seed=4)).dtype == torch.bfloat16 == torch.nn.Linear(4, 2)(randn(3, 4, seed=4)).dtype
    with torch.autocast("cpu", torch.bfloat16):  # autocast leaves float64 alone, as torch's layers see it
        wide = lowbit.Conv2d(2, 3, 3, config=config(), dtype=torch.float64)
        assert wide(randn(1, 2, 4, 4, seed=8).double()).dtype == torch.float64
        assert lowbit.Conv2d(2, 3, 3, config=config())(randn(2, 4, 4, seed=9)).dtype == torch.bfloat16
    assert lowbit.linear(randn(3, 4, seed=5), randn(2, 4, seed=6), None, config()).dtype == torch.float32


def test_conv2d_takes_unbatched_input_as_torch_does():
    layer = lowbit.Conv2d(2, 3, 3, padding=1, config=config())
    x = randn(2, 5, 4, seed=7)
    assert torch.equal(layer(x), layer(x.unsqueeze(0))[0])
    assert layer(x).shape == torch.nn.Conv2d(2, 3, 3, padding=1)(x).shape


def test_numpy_scalars_are_taken_as_the_stes_constants():
    np = pytest.importorskip("numpy")
    taken = config(eps1=np.float32(1e-6), eps2=np.float64(2e-3))
    assert (type(taken.eps1), type(taken.eps2)) == (float, float)
    assert taken.eps1 == float(np.float32(1e-6))


def test_the_layers_dtype_rule_compiles_into_one_graph():
    layer = lowbit.Linear(8, 4, config=config())
    compiled = torch.compile(layer, fullgraph=True, backend="eager")
    x = randn(3, 8, seed=10)
    assert same(compiled(x), layer(x))
    with torch.autocast("cpu", torch.bfloat16):  # guarded: the autocast state recompiles
        assert compiled(x).dtype == torch.bfloat16
