"""The precision switch, ext.nn.Linear and convert on the GPU: each routed op through the real kernels (odd shapes,
broadcasting), autograd, torch.compile, CUDA graphs and autocast, against FP64 references."""

import importlib

import pytest
import torch
import torch.nn.functional as F

import cutlass_ext as ext

from .helpers import cublas_precision

precision_module = importlib.import_module("cutlass_ext.precision")

# Norm-wise relative error against FP64 that each mode stays under at these sizes (K <= 100, normal data): the
# corrected modes and IEEE SGEMM are FP32-accurate (~1e-7·sqrt(K)), TF32 rounds operands to 11 bits.
TOLERANCE = {"tf32tf32": 2e-6, "halfhalf": 2e-6, "fp32": 2e-6, "markidis": 2e-5, "tf32": 3e-3}
CORRECTED = ("tf32tf32", "halfhalf")


def relative_error(result, reference) -> float:
    return float((result.double() - reference).norm() / reference.norm())


def normal(*shape, seed, requires_grad=False):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=generator, device="cuda").requires_grad_(requires_grad)


@pytest.fixture
def spy(monkeypatch):
    """The modes of the gemm calls the switch makes (the real gemm runs them)."""
    modes = []

    def recording_gemm(a, b, mode, **epilogue):
        modes.append(mode)
        return ext.gemm(a, b, mode, **epilogue)

    monkeypatch.setattr(precision_module, "gemm", recording_gemm)
    return modes


def _ops():
    """name -> (operand shapes, the op, its FP64 reference)."""
    return {
        "matmul": ([(37, 53), (53, 29)], lambda a, b: a @ b, lambda a, b: a @ b),
        "matmul broadcast": ([(3, 1, 37, 53), (4, 53, 29)], torch.matmul, torch.matmul),
        "matmul vector": ([(53,), (2, 53, 29)], torch.matmul, torch.matmul),
        "mm transposed": ([(53, 37), (29, 53)], lambda a, b: torch.mm(a.T, b.T), lambda a, b: a.T @ b.T),
        "bmm": ([(3, 37, 53), (3, 53, 29)], torch.bmm, torch.bmm),
        "addmm bias": ([(29,), (37, 53), (53, 29)], torch.addmm, lambda c, a, b: c + a @ b),
        "addmm scaled": (
            [(37, 1), (37, 53), (53, 29)],
            lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=-2.0),
            lambda c, a, b: 0.5 * c - 2.0 * (a @ b),
        ),
        "baddbmm": (
            [(3, 37, 29), (3, 37, 53), (3, 53, 29)],
            lambda c, a, b: torch.baddbmm(c, a, b, beta=2.0),
            lambda c, a, b: 2.0 * c + a @ b,
        ),
        "linear": ([(2, 37, 53), (29, 53), (29,)], F.linear, lambda x, w, b: x @ w.T + b),
        "einsum attention": (
            [(2, 3, 37, 16), (2, 3, 29, 16)],
            lambda q, k: torch.einsum("bhqd,bhkd->bhqk", q, k),
            lambda q, k: q @ k.transpose(-1, -2),
        ),
    }


@pytest.mark.parametrize("mode", CORRECTED)
@pytest.mark.parametrize("name", list(_ops()))
def test_each_routed_op_runs_the_mode(spy, mode, name):
    shapes, op, reference = _ops()[name]
    operands = [normal(*shape, seed=i) for i, shape in enumerate(shapes)]
    with ext.precision(mode):
        result = op(*operands)
    assert spy == [mode]
    expected = reference(*(t.double() for t in operands))
    assert result.dtype == torch.float32 and result.shape == expected.shape
    assert relative_error(result, expected) < TOLERANCE[mode]


@pytest.mark.parametrize("mode", ext.MODES)
def test_every_mode_is_the_kernel_gemm_runs(mode):
    a, b = normal(64, 96, seed=1), normal(96, 48, seed=2)
    with cublas_precision("tf32"):  # the switch's fp32 is IEEE whatever torch's own setting
        with ext.precision(mode):
            switched = a @ b
    assert torch.equal(switched, ext.gemm(a, b, mode))
    assert relative_error(switched, a.double() @ b.double()) < TOLERANCE[mode]


def test_fused_bias_and_alpha_beta_match_a_separate_pass():
    a, b, c, bias = normal(70, 40, seed=1), normal(40, 36, seed=2), normal(70, 36, seed=3), normal(36, seed=4)
    with ext.precision("tf32tf32"):
        fused_bias = torch.addmm(bias, a, b)
        fused_scaled = torch.addmm(c, a, b, beta=-0.75, alpha=3.0)
    product = ext.gemm(a, b, "tf32tf32")
    torch.testing.assert_close(fused_bias, product + bias, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(fused_scaled, 3.0 * product - 0.75 * c, rtol=1e-6, atol=1e-5)


def test_other_dtypes_and_devices_are_untouched(spy):
    with ext.precision("tf32tf32"):
        assert (normal(8, 8, seed=1).double() @ normal(8, 8, seed=2).double()).dtype == torch.float64
        assert (normal(8, 8, seed=1).bfloat16() @ normal(8, 8, seed=2).bfloat16()).dtype == torch.bfloat16
        torch.randn(8, 8) @ torch.randn(8, 8)
    assert spy == []


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(53, 40)
        self.outer = torch.nn.Linear(40, 29, bias=False)
        self.mix = torch.nn.Parameter(torch.randn(29, 12) / 29**0.5)

    def forward(self, x):
        hidden = F.gelu(self.inner(x))
        return torch.einsum("btf,fo->bto", self.outer(hidden), self.mix)


def reference_net(net, x):
    """The same network in FP64 with its own leaves: (output, leaves)."""
    leaves = [
        t.detach().double().requires_grad_() for t in (x, net.inner.weight, net.inner.bias, net.outer.weight, net.mix)
    ]
    x64, w1, b1, w2, mix = leaves
    output = (F.gelu(x64 @ w1.T + b1) @ w2.T) @ mix
    return output, leaves


@pytest.mark.parametrize("mode", CORRECTED)
def test_autograd_through_the_switch(mode):
    torch.manual_seed(0)
    net = Net().cuda()
    x = normal(3, 7, 53, seed=5, requires_grad=True)
    with ext.precision(mode):
        output = net(x)
    weights = normal(*output.shape, seed=6)
    (output * weights).sum().backward()
    expected, leaves = reference_net(net, x)
    (expected * weights.double()).sum().backward()
    assert relative_error(output, expected) < TOLERANCE[mode]
    grads = (x.grad, net.inner.weight.grad, net.inner.bias.grad, net.outer.weight.grad, net.mix.grad)
    for grad, leaf in zip(grads, leaves):
        assert relative_error(grad, leaf.grad) < 5 * TOLERANCE[mode]


def test_compile_under_the_switch_and_a_change_of_mode():
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = Net().cuda()
    x = normal(3, 7, 53, seed=5)
    compiled = torch.compile(net, fullgraph=True)
    expected, _ = reference_net(net, x)
    with torch.no_grad():
        with ext.precision("tf32tf32"):
            accurate = compiled(x)
        with ext.precision("tf32"):
            rounded = compiled(x)
    assert relative_error(accurate, expected) < TOLERANCE["tf32tf32"]
    assert TOLERANCE["tf32tf32"] < relative_error(rounded, expected) < TOLERANCE["tf32"]


def test_compiled_training_step_inside_the_switch():
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = Net().cuda()
    x = normal(3, 7, 53, seed=5, requires_grad=True)

    def loss_of(x):
        with ext.precision("halfhalf"):
            return net(x).square().sum()

    torch.compile(loss_of, fullgraph=True)(x).backward()
    expected, leaves = reference_net(net, x)
    expected.square().sum().backward()
    assert relative_error(x.grad, leaves[0].grad) < 5 * TOLERANCE["halfhalf"]
    assert relative_error(net.inner.weight.grad, leaves[1].grad) < 5 * TOLERANCE["halfhalf"]


@pytest.mark.parametrize("mode", CORRECTED)
def test_cuda_graph_capture_and_replay(mode):
    torch.manual_seed(0)
    net = Net().cuda()
    static_x = normal(3, 7, 53, seed=5)

    def run():
        with ext.precision(mode), torch.no_grad():
            return net(static_x)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()  # builds and loads the kernels off the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = run()
    for seed in (11, 12):
        static_x.copy_(normal(3, 7, 53, seed=seed))
        graph.replay()
        torch.testing.assert_close(static_out, run(), rtol=0, atol=0)
        assert relative_error(static_out, reference_net(net, static_x)[0]) < TOLERANCE[mode]


def test_convert_trains_like_fp64_and_unconvert_restores_torch():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(53, 64), torch.nn.GELU(), torch.nn.Linear(64, 29)).cuda()
    x = normal(37, 53, seed=5)
    keys = list(model.state_dict())
    ext.nn.convert(model, mode="halfhalf")
    assert list(model.state_dict()) == keys
    output = model(x)
    output.square().sum().backward()
    leaves = [p.detach().double().requires_grad_() for p in model.parameters()]
    w1, b1, w2, b2 = leaves
    expected = F.gelu(x.double() @ w1.T + b1) @ w2.T + b2
    expected.square().sum().backward()
    assert relative_error(output, expected) < TOLERANCE["halfhalf"]
    for parameter, leaf in zip(model.parameters(), leaves):
        assert relative_error(parameter.grad, leaf.grad) < 5 * TOLERANCE["halfhalf"]
    ext.nn.unconvert(model)
    with cublas_precision("ieee"):
        assert relative_error(model(x), expected) < TOLERANCE["fp32"]


def test_linear_fused_bias_matches_a_separate_pass():
    layer = ext.nn.Linear(53, 29, mode="tf32tf32").cuda()
    x = normal(4, 37, 53, seed=5)
    separate = ext.gemm(x.reshape(-1, 53), layer.weight.T, "tf32tf32").reshape(4, 37, 29) + layer.bias
    torch.testing.assert_close(layer(x), separate, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_autocast_computes_and_returns_fp32(spy, dtype):
    torch.manual_seed(0)
    layer = torch.nn.Linear(53, 29).cuda()
    converted = ext.nn.Linear(53, 29).cuda()
    converted.load_state_dict(layer.state_dict())
    x = normal(37, 53, seed=5).to(dtype)
    expected = x.double() @ layer.weight.double().T + layer.bias.double()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert layer(x).dtype == torch.bfloat16  # autocast's own choice, without the switch
        with ext.precision("tf32tf32"):
            switched = layer(x)
            scores = torch.softmax(switched, dim=-1)  # not routed: autocast's dtype rules apply
        module = converted(x)
    assert spy == ["tf32tf32"]
    assert switched.dtype == torch.float32 and module.dtype == torch.float32
    assert scores.dtype == torch.float32  # softmax runs in FP32 under autocast
    assert relative_error(switched, expected) < TOLERANCE["tf32tf32"]
    assert relative_error(module, expected) < TOLERANCE["tf32tf32"]


def test_direct_gemm_calls_keep_their_own_mode_inside_the_switch():
    a, b = normal(64, 96, seed=1), normal(96, 48, seed=2)
    with ext.precision("tf32"):
        ieee = ext.gemm(a, b, "fp32")
        layer_mode = ext.nn.Linear(96, 48, mode="tf32tf32").cuda()
        layer_output = layer_mode(a)
    assert relative_error(ieee, a.double() @ b.double()) < TOLERANCE["fp32"]
    expected = a.double() @ layer_mode.weight.double().T + layer_mode.bias.double()
    assert relative_error(layer_output, expected) < TOLERANCE["tf32tf32"]


def test_set_precision_routes_until_switched_off(spy):
    a, b = normal(16, 16, seed=1), normal(16, 16, seed=2)
    ext.set_precision("halfhalf")
    try:
        a @ b
    finally:
        ext.set_precision(None)
    a @ b
    assert spy == ["halfhalf"]
