"""ext.gemm on the GPU: every mode over odd shapes and views, TF32 accuracy, errors, compile, graphs, caching."""

import os
import subprocess
import sys

import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import numerics

from .helpers import DISTRIBUTIONS, cublas_precision, operands, poison_allocator, reference

SHAPES = [
    (1, 1, 1),
    (17, 17, 17),
    (1000, 1000, 1000),
    (4097, 4097, 4097),
    (17, 1000, 4097),
    (4097, 17, 1),
    (1, 4097, 17),
    (1000, 3, 1000),
    (256, 256, 4096),
    (512, 512, 512),
]


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


@pytest.mark.parametrize("mode", ["tf32tf32", "halfhalf", "markidis"])
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_corrected_modes_on_odd_shapes(mode, m, n, k):
    a, b = operands("normal", m, n, k, seed=m + 3 * n + 5 * k)
    ref = reference(a, b)
    poison_allocator(m, n)
    c = ext.gemm(a, b, mode=mode)
    assert c.shape == (m, n) and torch.isfinite(c).all()
    # lo·lo is dropped, so a single product keeps ~22 bits, not 24: FP32-level, a few times FP32's rounding
    bound = 1e-4 if mode == "markidis" else 1e-6
    assert numerics.relative_residual(c, ref) < bound


def test_tf32_agrees_with_the_numerics_emulation():
    """Same operand rounding (TF32 RNA) as numerics.emulated_gemm: they differ only by accumulation order."""
    a, b = operands("urand(-1,1)", 48, 40, 264, seed=1)
    ref = reference(a, b)
    emulated = numerics.emulated_gemm(a, b, "tf32", accumulate="rz")
    kernel = ext.gemm(a, b, mode="tf32")
    assert numerics.relative_residual(kernel, emulated.double()) < 1e-5
    truncated_inputs = numerics.round_to(a, "tf32", "rz").double() @ numerics.round_to(b, "tf32", "rz").double()
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
@pytest.mark.parametrize("mode", ["tf32", "tf32tf32", "halfhalf", "markidis"])
def test_views_give_the_same_result_as_contiguous_inputs(make_a, make_b, mode):
    a, b = operands("normal", 300, 260, 516, seed=2)
    a_view, b_view = make_a(a.clone()), make_b(b.clone())
    assert torch.equal(a_view, a) and torch.equal(b_view, b)
    ref = reference(a, b)
    # a column-major variant sums in another order: compare both with FP64, not bit for bit
    contiguous = numerics.relative_residual(ext.gemm(a, b, mode=mode), ref)
    viewed = numerics.relative_residual(ext.gemm(a_view, b_view, mode=mode), ref)
    assert viewed <= 1.5 * contiguous + 1e-7


@pytest.mark.parametrize("mode", ["tf32", "tf32tf32", "markidis", "halfhalf"])
@pytest.mark.parametrize("transpose_a, transpose_b", [(True, False), (False, True), (True, True)])
def test_transposed_views_are_read_without_a_copy(mode, transpose_a, transpose_b):
    """Transposed views run on column-major kernels: no operand-sized temporary appears beyond what the mode
    needs (halfhalf: its packed operands, in the views' layouts, and the product before unscaling)."""
    m = n = k = 1024
    a, b = operands("normal", m, n, k, seed=3)
    a_view = a.t().contiguous().t() if transpose_a else a
    b_view = b.t().contiguous().t() if transpose_b else b
    ext.gemm(a_view, b_view, mode=mode)  # build and register first
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    c = ext.gemm(a_view, b_view, mode=mode)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before - c.numel() * 4
    if mode == "halfhalf":
        extra -= (m * k + k * n + m * n) * 4
    assert extra < m * k * 4 // 2, f"{extra} bytes beyond the output: an operand was copied"
    assert numerics.relative_residual(c, reference(a, b)) < (1e-3 if mode in ("tf32", "markidis") else 1e-6)


@pytest.mark.parametrize("mode", ["tf32", "tf32tf32", "halfhalf"])
@pytest.mark.parametrize("a_batched, b_batched", [(True, True), (True, False), (False, True)])
def test_batched_products_equal_the_per_matrix_products(mode, a_batched, b_batched):
    batch, m, n, k = 3, 65, 47, 130
    generator = torch.Generator(device="cuda").manual_seed(8)
    a = torch.randn((batch, m, k) if a_batched else (m, k), device="cuda", generator=generator)
    b = torch.randn((batch, k, n) if b_batched else (k, n), device="cuda", generator=generator)
    poison_allocator(batch, m, n)
    c = ext.gemm(a, b, mode=mode)
    assert c.shape == (batch, m, n)
    for i in range(batch):
        single = ext.gemm(a[i] if a_batched else a, b[i] if b_batched else b, mode=mode)
        assert torch.equal(c[i], single)


@pytest.mark.parametrize("mode", ["tf32tf32", "halfhalf", "tf32"])
@pytest.mark.parametrize(
    "a_shape, b_shape",
    [((70, 90), (90, 50)), ((3, 70, 90), (90, 50)), ((70, 90), (3, 90, 50)), ((3, 70, 90), (3, 90, 50))],
)
def test_gradients_match_fp64(mode, a_shape, b_shape):
    generator = torch.Generator(device="cuda").manual_seed(9)
    a = torch.randn(a_shape, device="cuda", generator=generator, requires_grad=True)
    b = torch.randn(b_shape, device="cuda", generator=generator, requires_grad=True)
    c = ext.gemm(a, b, mode=mode)
    weight = torch.randn(c.shape, device="cuda", generator=generator)
    (c * weight).sum().backward()
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    ((a64 @ b64) * weight.double()).sum().backward()
    bound = 1e-3 if mode == "tf32" else 1e-6
    assert numerics.relative_residual(a.grad, a64.grad) < bound
    assert numerics.relative_residual(b.grad, b64.grad) < bound


def test_linear_is_a_drop_in_for_torch_linear():
    reference_layer = torch.nn.Linear(96, 40, device="cuda")
    layer = ext.nn.Linear(96, 40, mode="tf32tf32", device="cuda")
    layer.load_state_dict(reference_layer.state_dict())
    x = torch.randn(5, 7, 96, device="cuda", requires_grad=True)
    y = layer(x)
    weight64 = reference_layer.weight.detach().double().requires_grad_()
    bias64 = reference_layer.bias.detach().double().requires_grad_()
    x64 = x.detach().double().requires_grad_()
    y64 = torch.nn.functional.linear(x64, weight64, bias64)
    assert y.shape == (5, 7, 40) and numerics.relative_residual(y, y64) < 1e-6
    grad = torch.randn_like(y)
    y.backward(grad)
    y64.backward(grad.double())
    assert numerics.relative_residual(layer.weight.grad, weight64.grad) < 1e-6
    assert numerics.relative_residual(layer.bias.grad, bias64.grad) < 1e-6
    assert numerics.relative_residual(x.grad, x64.grad) < 1e-6


def test_empty_dimensions():
    a, b = operands("normal", 5, 3, 4, seed=3)
    assert torch.equal(ext.gemm(a[:, :0], b[:0]), torch.zeros(5, 3, device="cuda"))
    assert ext.gemm(a[:0], b).shape == (0, 3)


@pytest.mark.parametrize(
    "a, b, message",
    [
        (lambda: torch.ones(4, 5, device="cuda"), lambda: torch.ones(4, 5, device="cuda"), r"a.shape\[-1\] must equal"),
        (lambda: torch.ones(4, 5, device="cuda"), lambda: torch.ones(5, 4), "b must be a CUDA tensor"),
        (
            lambda: torch.ones((), device="cuda"),
            lambda: torch.ones(5, 4, device="cuda"),
            "a must have at least one dimension",
        ),
        (
            lambda: torch.ones(2, 4, 5, device="cuda"),
            lambda: torch.ones(3, 5, 4, device="cuda"),
            "batch sizes must match",
        ),
    ],
)
def test_bad_arguments_raise_clear_errors(a, b, message):
    with pytest.raises((ValueError, TypeError), match=message):
        ext.gemm(a(), b())


@pytest.mark.parametrize("mode", ["tf32", "tf32tf32", "halfhalf"])
def test_torch_compile_traces_without_graph_breaks(mode):
    a, b = operands("normal", 64, 96, 128, seed=4)
    compiled = torch.compile(lambda x, y: ext.gemm(x, y, mode=mode) * 2.0, fullgraph=True)
    assert torch.equal(compiled(a, b), ext.gemm(a, b, mode=mode) * 2.0)
    a.requires_grad_()
    compiled(a, b).sum().backward()  # the backward graph runs the same kernels
    assert torch.equal(a.grad, ext.gemm(torch.full((64, 96), 2.0, device="cuda"), b.t(), mode=mode))


@pytest.mark.parametrize("mode", ["tf32", "tf32tf32", "halfhalf"])
def test_cuda_graph_capture_and_replay(mode):
    a, b = operands("normal", 128, 128, 4096, seed=5)  # deep K: split-K's workspace is captured too
    ext.gemm(a, b, mode=mode)  # build and register outside the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        c = ext.gemm(a, b, mode=mode)
    torch.cuda.current_stream().wait_stream(stream)
    fresh_a, fresh_b = operands("normal", 128, 128, 4096, seed=6)
    a.copy_(fresh_a)
    b.copy_(fresh_b)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(c, ext.gemm(fresh_a, fresh_b, mode=mode))


def test_second_process_reuses_the_cached_build():
    a, _ = operands("normal", 8, 8, 8, seed=7)
    ext.gemm(a, a)  # this process has built (or found) everything
    program = (
        "import torch, cutlass_ext as ext; a = torch.randn(64, 64, device='cuda'); "
        "[ext.gemm(a, a, mode=m) for m in ext.MODES]; torch.cuda.synchronize()"
    )
    completed = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=os.environ, check=False
    )
    assert completed.returncode == 0, completed.stderr
    assert "building" not in completed.stderr, completed.stderr
