"""ext.gemm(mode="tf32") on the GPU: accuracy against FP64 and cuBLAS TF32, shapes, strides, errors, caching."""

import os
import subprocess
import sys

import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import numerics

from .helpers import DISTRIBUTIONS, cublas_precision, operands, poison_allocator, reference

SHAPES = [(1, 1, 1), (17, 17, 17), (1000, 1000, 1000), (4097, 4097, 4097), (17, 1000, 4097), (4097, 17, 1),
          (1, 4097, 17), (1000, 3, 1000), (256, 256, 4096), (512, 512, 512)]


@pytest.mark.parametrize("distribution", list(DISTRIBUTIONS))
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_tf32_accuracy_matches_cublas_tf32(distribution, m, n, k):
    a, b = operands(distribution, m, n, k, seed=m * 7 + n * 13 + k)
    ref = reference(a, b)
    poison_allocator(m, n)
    c = ext.gemm(a, b, mode="tf32")
    assert c.shape == (m, n) and c.dtype == torch.float32
    assert torch.isfinite(c).all(), "unwritten (poisoned) or non-finite outputs"
    with cublas_precision("tf32"):
        cublas = numerics.relative_residual(a @ b, ref)
    ours = numerics.relative_residual(c, ref)
    # TF32's unit roundoff is 2^-11: a product of two rounded operands is off by up to ~1e-3 when k is tiny.
    assert ours <= max(1.5 * cublas, 1e-3), f"relres {ours:.3g} vs cuBLAS TF32 {cublas:.3g}"
    if k >= 64:
        assert ours > 3e-5, f"relres {ours:.3g} is FP32-level: the TF32 path did not run"


def test_tf32_agrees_with_the_numerics_emulation():
    """Same operand rounding (TF32 RNA) as numerics.emulated_gemm: they differ only by accumulation order."""
    a, b = operands("urand(-1,1)", 48, 40, 264, seed=1)
    ref = reference(a, b)
    emulated = numerics.emulated_gemm(a, b, "tf32", accumulate="rz")
    kernel = ext.gemm(a, b, mode="tf32")
    assert numerics.relative_residual(kernel, emulated.double()) < 1e-5
    truncated_inputs = (numerics.round_to(a, "tf32", "rz").double() @ numerics.round_to(b, "tf32", "rz").double())
    assert numerics.relative_residual(truncated_inputs, emulated.double()) > 1e-4  # the check can tell RZ from RNA
    assert numerics.relative_residual(kernel, ref) > 1e-4


def misaligned(t):
    """The same values, starting 4 bytes past a 16-byte boundary, rows K + 1 apart."""
    buffer = torch.empty(t.shape[0], t.shape[1] + 1, device=t.device)
    buffer[:, 1:] = t
    return buffer[:, 1:]


def strided_columns(t):
    buffer = torch.empty(t.shape[0], 3 * t.shape[1], device=t.device)
    buffer[:, ::3] = t
    return buffer[:, ::3]


@pytest.mark.parametrize(
    "make_a, make_b",
    [
        (lambda a: a.t().contiguous().t(), lambda b: b),  # column-major A
        (lambda a: a, lambda b: b.t().contiguous().t()),  # column-major B
        (misaligned, lambda b: b),
        (lambda a: a, strided_columns),
    ],
    ids=["a_transposed", "b_transposed", "a_misaligned", "b_strided"],
)
def test_views_give_the_same_result_as_contiguous_inputs(make_a, make_b):
    a, b = operands("normal", 300, 260, 516, seed=2)
    a_view, b_view = make_a(a.clone()), make_b(b.clone())
    assert torch.equal(a_view, a) and torch.equal(b_view, b)
    view_result = ext.gemm(a_view, b_view)
    assert numerics.relative_residual(view_result, reference(a, b)) < 1e-3


def test_empty_dimensions():
    a, b = operands("normal", 5, 3, 4, seed=3)
    assert torch.equal(ext.gemm(a[:, :0], b[:0]), torch.zeros(5, 3, device="cuda"))
    assert ext.gemm(a[:0], b).shape == (0, 3)


@pytest.mark.parametrize(
    "a, b, message",
    [
        (lambda: torch.ones(4, 5, device="cuda"), lambda: torch.ones(4, 5, device="cuda"), r"a.shape\[1\] must equal"),
        (lambda: torch.ones(4, 5, device="cuda"), lambda: torch.ones(5, 4), "b must be a CUDA tensor"),
        (lambda: torch.ones(2, 4, 5, device="cuda"), lambda: torch.ones(5, 4, device="cuda"), "a must be 2-D"),
    ],
)
def test_bad_arguments_raise_clear_errors(a, b, message):
    with pytest.raises((ValueError, TypeError), match=message):
        ext.gemm(a(), b())


def test_torch_compile_traces_without_graph_breaks():
    a, b = operands("normal", 64, 96, 128, seed=4)
    compiled = torch.compile(lambda x, y: ext.gemm(x, y) * 2.0, fullgraph=True)
    assert torch.equal(compiled(a, b), ext.gemm(a, b) * 2.0)


def test_cuda_graph_capture_and_replay():
    a, b = operands("normal", 128, 128, 256, seed=5)
    ext.gemm(a, b)  # build and register outside the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        c = ext.gemm(a, b)
    torch.cuda.current_stream().wait_stream(stream)
    fresh_a, fresh_b = operands("normal", 128, 128, 256, seed=6)
    a.copy_(fresh_a)
    b.copy_(fresh_b)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(c, ext.gemm(fresh_a, fresh_b))


def test_second_process_reuses_the_cached_build():
    a, _ = operands("normal", 8, 8, 8, seed=7)
    ext.gemm(a, a)  # this process has built (or found) everything
    program = "import torch, cutlass_ext as ext; a = torch.randn(64, 64, device='cuda'); ext.gemm(a, a); torch.cuda.synchronize()"
    completed = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=os.environ)
    assert completed.returncode == 0, completed.stderr
    assert "building" not in completed.stderr, completed.stderr
