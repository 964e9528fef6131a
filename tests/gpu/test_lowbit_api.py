"""cutlass_ext.lowbit's public API on CUDA: it dispatches to the kernel and agrees with the CPU reference path bit for
bit (forward) and with the STE references (backward); layers, conversion, dynamic bias, torch.compile, CUDA graphs."""

import pytest
import torch

from cutlass_ext import lowbit
from cutlass_ext.lowbit import kernel
from cutlass_ext.lowbit.format import LowbitFormat

pytestmark = pytest.mark.gpu

M7E4 = LowbitFormat.make(7, 4)
M4E3 = LowbitFormat.make(4, 3, 5, 5, chunk=16)  # appendix C.3


def same(x, y) -> bool:
    return x.shape == y.shape and torch.equal(x.contiguous().view(torch.int32), y.contiguous().view(torch.int32))


def randn(*shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_cuda_tensors_run_the_kernel(monkeypatch):
    calls = []
    original = kernel.matmul

    def spy(*args, **kwargs):
        calls.append(args[2])
        return original(*args, **kwargs)

    monkeypatch.setattr(kernel, "matmul", spy)
    a, b = randn(9, 40, seed=1), randn(40, 7, seed=2)
    c = lowbit.matmul(a.cuda(), b.cuda(), lowbit.LowbitConfig(M7E4))
    assert calls == [M7E4]
    assert same(c.cpu(), lowbit.matmul(a, b, lowbit.LowbitConfig(M7E4)))


@pytest.mark.parametrize("fmt", [M7E4, M7E4.with_underflow(False), M4E3], ids=lambda f: f.name)
def test_matmul_cuda_equals_cpu_with_broadcast_and_transposes(fmt):
    config = lowbit.LowbitConfig(fmt)
    a, b = randn(2, 1, 33, 70, seed=3), randn(3, 5, 70, seed=4).transpose(-1, -2)  # b (3, 70, 5), transposed
    assert same(lowbit.matmul(a.cuda(), b.cuda(), config).cpu(), lowbit.matmul(a, b, config))


@pytest.mark.parametrize("ste", lowbit.STES)
def test_linear_gradients_cuda_equal_cpu(ste):
    config = lowbit.LowbitConfig(M4E3, ste=ste)
    x, weight, bias = randn(3, 6, 48, seed=5), randn(10, 48, seed=6) * 0.3, randn(10, seed=7)
    grad = randn(3, 6, 10, seed=8)
    results = []
    for device in ("cpu", "cuda"):
        # fresh leaves per device (CPU .to would alias the inputs)
        leaves = [t.detach().to(device, copy=True).requires_grad_() for t in (x, weight, bias)]
        y = lowbit.linear(*leaves, config)
        y.backward(grad.to(device))
        results.append([y.detach().cpu()] + [t.grad.cpu() for t in leaves])
    (y_cpu, *grads_cpu), (y_cuda, *grads_cuda) = results
    assert same(y_cuda, y_cpu)
    # The bias gradient is a plain FP32 sum, and the identity STE's are plain FP32 GEMMs: each device sums in its
    # own order. The other STEs' operand gradients come from the kernel and from `ste.grad_reference`, bit equal.
    torch.testing.assert_close(grads_cuda[2], grads_cpu[2], rtol=1e-5, atol=1e-5)
    for name, on_cpu, on_cuda in zip(("x", "weight"), grads_cpu[:2], grads_cuda[:2]):
        if ste == "identity":
            torch.testing.assert_close(on_cuda, on_cpu, rtol=1e-5, atol=1e-5, msg=name)
        else:
            assert same(on_cuda, on_cpu), name


def test_conv2d_and_converted_model_cuda_equal_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=2),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 64, 10),
    )
    lowbit.convert(model, lowbit.LowbitConfig(M7E4), skip=())
    x = randn(4, 1, 8, 8, seed=9)
    on_cpu = model(x).detach()
    on_cuda = model.cuda()(x.cuda()).detach().cpu()
    assert same(on_cuda, on_cpu)


def test_a_bf16_model_stays_bf16_through_the_kernel_under_compile_and_autocast():
    """Converted layers return the dtype torch's would (the exact last layer then takes their output), the values
    the FP32 kernel's rounded; compiled and under CUDA autocast as well."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).cuda()
    x = randn(8, 32, seed=15).cuda()
    lowbit.convert(model, lowbit.LowbitConfig(M7E4))
    first = model[0]
    expected = lowbit.linear(x, first.weight, first.bias, first.config)
    assert expected.dtype == torch.float32
    with torch.autocast("cuda", torch.bfloat16):
        y = first(x)
    assert y.dtype == torch.bfloat16 and same(y, expected.bfloat16())
    model.bfloat16()
    assert model(x.bfloat16()).dtype == torch.bfloat16
    assert torch.compile(model, fullgraph=True)(x.bfloat16()).dtype == torch.bfloat16
    weight, bias = first.weight.float(), first.bias.float()
    assert same(first(x.bfloat16()), lowbit.linear(x.bfloat16().float(), weight, bias, first.config).bfloat16())


def test_dynamic_bias_cuda_equals_cpu():
    config = lowbit.LowbitConfig(M7E4, dynamic_bias=True)
    a, b = randn(17, 64, seed=10) * 300, randn(64, 9, seed=11)
    assert same(lowbit.matmul(a.cuda(), b.cuda(), config).cpu(), lowbit.matmul(a, b, config))


def test_linear_under_torch_compile_and_cuda_graph():
    layer = lowbit.Linear(64, 32, config=lowbit.LowbitConfig(M7E4, ste="immediate-diff")).cuda()
    x = randn(16, 64, seed=12).cuda().requires_grad_()
    eager = layer(x)
    compiled = torch.compile(layer, fullgraph=True)
    y = compiled(x)
    assert same(y, eager)
    (grad_compiled,) = torch.autograd.grad(y.sum(), x)
    (grad_eager,) = torch.autograd.grad(eager.sum(), x)
    assert same(grad_compiled, grad_eager)

    static = randn(16, 64, seed=13).cuda()
    with torch.no_grad():
        layer(static)  # build and load the library before capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = layer(static)
        fresh = randn(16, 64, seed=14).cuda()
        static.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        assert same(out, layer(fresh))


@pytest.mark.parametrize(
    "fmt",
    [
        LowbitFormat.make(7, 4, 10, 12, underflow=False),  # subnormal products and sums kept, then masked
        LowbitFormat.make(23, 8, 140, 142),  # R_UF = 2^-140 and 2^-142: flush thresholds among FP32 subnormals
        LowbitFormat.make(5, 8, 149, 149, chunk=3),  # R_UF = 2^-149, the smallest subnormal
    ],
    ids=lambda f: f.name,
)
def test_subnormal_products_cuda_equal_cpu(fmt):
    # Products near 2^-128 are mostly FP32 subnormals: the definition keeps them (no flush-to-zero) and masks their
    # words, whose top mantissa bits are then set.
    a, b = randn(12, 50, seed=15) * 2.0**-64, randn(50, 6, seed=16) * 2.0**-64
    config = lowbit.LowbitConfig(fmt)
    assert same(lowbit.matmul(a.cuda(), b.cuda(), config).cpu(), lowbit.matmul(a, b, config))


@pytest.mark.parametrize("operands", [lowbit.M4E3, lowbit.E4M3, lowbit.E5M2], ids=lambda f: f.name)
def test_fp8_operands_cuda_equal_cpu(operands):
    # seed 002 Table 3: weights and activations rounded to 8 bits with a per-tensor bias, then the M7E4 GEMM
    config = lowbit.LowbitConfig(M7E4, ste="immediate-diff", operands=operands)
    a, b, g = randn(37, 70, seed=17) * 5, randn(70, 11, seed=18) * 0.01, randn(37, 11, seed=19)
    results = []
    for device in ("cpu", "cuda"):
        leaves = [t.to(device, copy=True).requires_grad_() for t in (a, b)]
        y = lowbit.matmul(*leaves, config)
        y.backward(g.to(device))
        results.append([y.detach().cpu()] + [t.grad.cpu() for t in leaves])
    for on_cpu, on_cuda in zip(*results):
        assert same(on_cuda, on_cpu)
