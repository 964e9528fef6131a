"""gemm traced by torch.compile with dynamic shapes, on the CPU: the ops get FP64 CPU implementations for the test,
so what is checked is that the Python path is trace-safe (symbolic sizes reach the fake kernels, no graph break,
one graph for every size). Frames are counted through AOT autograd (`aot_eager`): its pass that turns symbolic
floats into tensors is what restarts a compilation when traced code branches on a float (a second backend call)."""

import importlib

import pytest
import torch
import torch._dynamo.testing

gemm_module = importlib.import_module("cutlass_ext.gemm")
CUDA = torch.device("cuda")


def reference(a, b, c, alpha, beta, *variants):
    d = alpha * torch.matmul(a.double(), b.double())
    if c is not None:
        d = d + beta * c.double().expand(d.shape)
    return d.float()


@pytest.fixture
def ops_on_cpu(monkeypatch):
    def check(mode, a_dtype, b_dtype, a_device, b_device, a_shape, b_shape):
        check.real(mode, a_dtype, b_dtype, CUDA, CUDA, a_shape, b_shape)

    check.real = gemm_module._check
    monkeypatch.setattr(gemm_module, "_check", check)
    with torch.library._scoped_library("cutlass_ext", "IMPL") as library:
        for op in ("product", "gemm", "halfhalf_gemm", "sgemm"):
            library.impl(op, reference, "CPU")
        torch._dynamo.reset()
        yield
        torch._dynamo.reset()


@pytest.mark.parametrize("mode", ["tf32", "tf32tf32", "halfhalf", "markidis", "fp32"])
def test_dynamic_shapes_trace_once_for_every_size(ops_on_cpu, mode):
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")

    def run(a, b, bias):
        return gemm_module.gemm(a, b, mode=mode) + gemm_module.gemm(a, b, mode=mode, bias=bias, alpha=2.0)

    compiled = torch.compile(run, backend=counter, dynamic=True, fullgraph=True)
    for m, n, k in [(33, 17, 65), (70, 41, 129), (5, 9, 300)]:
        a, b, bias = torch.randn(m, k), torch.randn(k, n), torch.randn(n)
        expected = 3 * (a.double() @ b.double()) + bias.double()
        torch.testing.assert_close(compiled(a, b, bias).double(), expected, rtol=1e-6, atol=1e-5)
    assert counter.frame_count == 1


def test_batched_broadcast_operands_trace_with_dynamic_shapes(ops_on_cpu):
    compiled = torch.compile(lambda a, b: gemm_module.gemm(a, b, mode="halfhalf"), dynamic=True, fullgraph=True)
    for batch, m in [(3, 20), (5, 31)]:
        a, b = torch.randn(batch, 1, m, 40), torch.randn(4, 40, 24)
        torch.testing.assert_close(compiled(a, b), torch.matmul(a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["tf32tf32", "halfhalf"])
def test_backward_traces_with_dynamic_shapes(ops_on_cpu, mode):
    def loss(a, b, bias):
        return (gemm_module.gemm(a, b, mode=mode, bias=bias) ** 2).sum()

    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(loss, backend=counter, dynamic=True, fullgraph=True)
    for m, n, k in [(33, 17, 65), (70, 41, 129), (9, 5, 3)]:
        leaves = [torch.randn(shape, dtype=torch.float32).requires_grad_() for shape in ((m, k), (k, n), (n,))]
        compiled(*leaves).backward()
        copies = [t.detach().double().requires_grad_() for t in leaves]
        ((copies[0] @ copies[1] + copies[2]) ** 2).sum().backward()
        for ours, theirs in zip(leaves, copies):
            torch.testing.assert_close(ours.grad.double(), theirs.grad, rtol=1e-5, atol=1e-3)
    assert counter.frame_count == 1
