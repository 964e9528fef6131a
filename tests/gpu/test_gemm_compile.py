"""ext.gemm under torch.compile with dynamic shapes: one graph for every size, the same bits as eager."""

import pytest
import torch
import torch._dynamo.testing

import cutlass_ext as ext

from .helpers import draw


@pytest.mark.parametrize("mode", ["tf32", "tf32tf32", "halfhalf", "markidis", "fp32"])
def test_dynamic_shapes_compile_once_and_equal_eager(mode):
    """One backend call for every size: no recompile, and no restart of the first compilation (which a float
    default traced as a symbolic float would cause: gemm's alpha and beta)."""
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(lambda a, b: ext.gemm(a, b, mode=mode), backend=counter, dynamic=True, fullgraph=True)
    generator = torch.Generator(device="cuda").manual_seed(51)
    for m, n, k in [(96, 64, 128), (203, 136, 261), (7, 5, 3), (1030, 36, 17), (64, 2, 700)]:
        a, b = draw("normal", (m, k), generator), draw("normal", (k, n), generator)
        assert torch.equal(compiled(a, b), ext.gemm(a, b, mode=mode))
    assert counter.frame_count == 1


@pytest.mark.parametrize("mode", ["tf32tf32", "halfhalf"])
def test_dynamic_batch_with_bias_and_backward(mode):
    torch._dynamo.reset()

    def loss(x, weight, bias):
        return ext.gemm(x, weight.t(), mode=mode, bias=bias).square().sum()

    compiled = torch.compile(loss, dynamic=True, fullgraph=True)
    generator = torch.Generator(device="cuda").manual_seed(52)
    weight = draw("normal", (48, 80), generator).requires_grad_()
    bias = draw("normal", (48,), generator).requires_grad_()
    for batch, rows in [(2, 33), (3, 70)]:
        x = draw("normal", (batch, rows, 80), generator).requires_grad_()
        compiled(x, weight, bias).backward()
        grads = [t.grad.clone() for t in (x, weight, bias)]
        for t in (x, weight, bias):
            t.grad = None
        loss(x, weight, bias).backward()
        for ours, eager in zip(grads, (x.grad, weight.grad, bias.grad)):
            torch.testing.assert_close(ours, eager, rtol=1e-5, atol=1e-4)
        for t in (weight, bias):
            t.grad = None
