"""The low-bit-accumulator GEMM kernels on the GPU: forward bit for bit `reference.lowbit_matmul_fmt`, each STE's
gradients bit for bit `ste.grad_reference`, layouts, batches, torch.compile, CUDA graphs, memory and bad input."""

import pytest
import torch

from cutlass_ext.lowbit import kernel
from cutlass_ext.lowbit.format import LowbitFormat
from cutlass_ext.lowbit.reference import lowbit_matmul_fmt
from cutlass_ext.lowbit.ste import grad_reference

pytestmark = pytest.mark.gpu

M7E4 = LowbitFormat.make(7, 4, chunk=16)
FORMATS = {
    "M7E4": M7E4,
    "M7E4_nouf": M7E4.with_underflow(False),
    "M4E3": LowbitFormat.make(4, 3, chunk=8),
    "M3E5_prodM5E4": LowbitFormat.make(3, 5, acc_bias=14, prod_bias=9, chunk=5, prod_man=5, prod_exp=4),
    "M10E5_c1": LowbitFormat.make(10, 5, chunk=1, underflow=False),
    "M23E8_c64": LowbitFormat.make(23, 8, acc_bias=128, prod_bias=128, chunk=64, underflow=False),
}
DISTRIBUTIONS = {
    "normal": lambda g, shape: torch.randn(shape, generator=g, device="cuda"),
    "wide": lambda g, shape: (
        torch.randn(shape, generator=g, device="cuda")
        * 2.0 ** torch.randint(-12, 12, shape, generator=g, device="cuda")
    ),
    "positive": lambda g, shape: torch.rand(shape, generator=g, device="cuda") * 4,
}


def _draw(distribution, shape, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return DISTRIBUTIONS[distribution](g, shape)


def _same_bits(x, y):
    return x.shape == y.shape and torch.equal(x.contiguous().view(torch.int32), y.contiguous().view(torch.int32))


@pytest.mark.parametrize("fmt_name", list(FORMATS))
@pytest.mark.parametrize("distribution", list(DISTRIBUTIONS))
@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 5, 1), (33, 17, 31), (64, 64, 100), (65, 130, 129), (5, 3, 1000)])
def test_forward_equals_reference(fmt_name, distribution, shape):
    m, n, k = shape
    fmt = FORMATS[fmt_name]
    a = _draw(distribution, (m, k), seed=m + 3 * n + 7 * k)
    b = _draw(distribution, (k, n), seed=m + 5 * n + 11 * k)
    assert _same_bits(kernel.matmul(a, b, fmt), lowbit_matmul_fmt(a, b, fmt))


@pytest.mark.parametrize("underflow", [True, False])
def test_long_k_has_no_chunk_count_limit(underflow):
    # K = 65536 with chunk 16: 4096 chunks, four times the authors' kernel's 1024-chunk limit
    fmt = M7E4.with_underflow(underflow)
    a, b = _draw("normal", (9, 65536), 1), _draw("normal", (65536, 6), 2)
    assert _same_bits(kernel.matmul(a, b, fmt), lowbit_matmul_fmt(a, b, fmt))


def test_empty_k_gives_zeros_and_empty_shapes_pass():
    a, b = torch.zeros(4, 0, device="cuda"), torch.zeros(0, 3, device="cuda")
    assert torch.equal(kernel.matmul(a, b, M7E4), torch.zeros(4, 3, device="cuda"))
    assert kernel.matmul(torch.zeros(0, 5, device="cuda"), torch.zeros(5, 3, device="cuda"), M7E4).shape == (0, 3)


def test_batches_past_the_grid_limit():
    # grid z holds at most 65535 problems: the CTAs loop over the rest
    a = _draw("normal", (65537, 3, 5), 106)
    b = _draw("normal", (65537, 5, 2), 107)
    assert _same_bits(kernel.matmul(a, b, M7E4), lowbit_matmul_fmt(a, b, M7E4))


def test_nan_and_inf_follow_the_reference():
    a, b = _draw("normal", (8, 40), 3), _draw("normal", (40, 8), 4)
    a[1, 3], a[2, 5], b[7, 6] = float("nan"), float("inf"), float("-inf")
    out, expected = kernel.matmul(a, b, M7E4), lowbit_matmul_fmt(a, b, M7E4)
    assert torch.equal(out.isnan(), expected.isnan())
    finite = ~expected.isnan()
    assert torch.equal(out[finite], expected[finite])


@pytest.mark.parametrize("layout", ["a_transposed", "b_transposed", "both_transposed", "strided"])
def test_layouts_equal_the_reference(layout):
    m, n, k = 37, 45, 77
    a, b = _draw("wide", (m, 2 * k), 5)[:, ::2], _draw("wide", (k, 3 * n), 6)[:, ::3]
    if layout in ("a_transposed", "both_transposed"):
        a = a.contiguous().T.contiguous().T
    if layout in ("b_transposed", "both_transposed"):
        b = b.contiguous().T.contiguous().T
    assert _same_bits(kernel.matmul(a, b, M7E4), lowbit_matmul_fmt(a, b, M7E4))


def test_batched_and_broadcast_operands():
    a = _draw("wide", (2, 3, 20, 33), 7)
    b = _draw("wide", (3, 33, 18), 8)
    out = kernel.matmul(a, b, M7E4)
    assert out.shape == (2, 3, 20, 18)
    assert _same_bits(out, lowbit_matmul_fmt(a, b, M7E4))
    shared = _draw("wide", (33, 18), 9)
    assert _same_bits(kernel.matmul(a, shared, M7E4), lowbit_matmul_fmt(a, shared, M7E4))


# Formats whose events the inputs reach (overflow at both levels, swamping, flushed products).
GRAD_FORMATS = {
    "M4E3": LowbitFormat.make(4, 3, acc_bias=3, prod_bias=4, chunk=4),
    "M3E3_c24_nouf": LowbitFormat.make(3, 3, acc_bias=1, prod_bias=2, chunk=24, underflow=False),
    "M7E4_c16": M7E4,
    "M5E4_c5": LowbitFormat.make(5, 4, acc_bias=5, prod_bias=6, chunk=5),
    # windows that start mid-chunk inside one chunk (the backward's in-chunk path with steps before the window)
    "M4E3_c32": LowbitFormat.make(4, 3, acc_bias=3, prod_bias=4, chunk=32),
    # chains carried from window to window, each later pair of windows rerunning its chunk's earlier steps
    "M6E4_c48": LowbitFormat.make(6, 4, acc_bias=6, prod_bias=8, chunk=48),
}


@pytest.mark.parametrize("ste", list(kernel.STES))
@pytest.mark.parametrize("fmt_name", list(GRAD_FORMATS))
@pytest.mark.parametrize("shape", [(5, 7, 40), (3, 130, 1), (17, 9, 53), (70, 6, 131)])
def test_gradients_equal_the_ste_reference(ste, fmt_name, shape):
    m, n, k = shape
    fmt = GRAD_FORMATS[fmt_name]
    a = _draw("wide", (m, k), 10 + k).requires_grad_()
    b = _draw("wide", (k, n), 20 + n).requires_grad_()
    g = _draw("normal", (m, n), 30 + m)
    kernel.matmul(a, b, fmt, ste).backward(g)
    grad_a, grad_b = grad_reference(a.detach(), b.detach(), g, fmt, ste)
    if ste == "identity":
        # plain GEMMs by cuBLAS, whose summation order is its own: agreement to FP32 rounding
        for got, expected in ((a.grad, grad_a), (b.grad, grad_b)):
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5 * float(expected.abs().max()))
        return
    assert _same_bits(a.grad, grad_a)
    assert _same_bits(b.grad, grad_b)


@pytest.mark.parametrize("ste", ["recursive-of", "immediate-diff"])
def test_gradients_of_transposed_and_batched_operands(ste):
    fmt = GRAD_FORMATS["M4E3"]
    a = _draw("wide", (2, 23, 6), 40).transpose(-1, -2).requires_grad_()  # (2, 6, 23), column-major
    b = _draw("wide", (2, 23, 11), 41).requires_grad_()
    g = _draw("normal", (2, 6, 11), 42)
    kernel.matmul(a, b, fmt, ste).backward(g)
    grad_a, grad_b = grad_reference(a.detach(), b.detach(), g, fmt, ste)
    assert _same_bits(a.grad, grad_a) and _same_bits(b.grad, grad_b)


@pytest.mark.parametrize("ste", ["recursive-of", "immediate-of", "immediate-diff"])
@pytest.mark.parametrize("fmt_name", ["M7E4_c16", "M5E4_c5", "M4E3_c32", "M3E3_c24_nouf"])
@pytest.mark.parametrize("m, n", [(323, 37), (37, 323)])
def test_gradients_across_row_blocks(ste, fmt_name, m, n):
    # 6 blocks of 64 rows (of A, or of Bᵀ when N > M), each continuing the row sums of the one before; 5 column
    # steps, the last one short
    fmt = GRAD_FORMATS[fmt_name]
    a = _draw("wide", (m, 40), 90).requires_grad_()
    b = _draw("wide", (40, n), 91).requires_grad_()
    g = _draw("normal", (m, n), 92)
    kernel.matmul(a, b, fmt, ste).backward(g)
    grad_a, grad_b = grad_reference(a.detach(), b.detach(), g, fmt, ste)
    assert _same_bits(a.grad, grad_a) and _same_bits(b.grad, grad_b)


@pytest.mark.parametrize("ste", ["recursive-of", "immediate-diff"])
@pytest.mark.parametrize("m, n", [(4096, 48), (48, 4096)])
def test_many_row_blocks_are_deterministic(ste, m, n):
    # 64 row blocks per window and 16 windows in flight at once: the same bits as the reference, run after run
    fmt = GRAD_FORMATS["M7E4_c16"]
    a = _draw("normal", (m, 256), 93).requires_grad_()
    b = _draw("normal", (256, n), 94).requires_grad_()
    g = _draw("normal", (m, n), 95)
    grads = [torch.autograd.grad(kernel.matmul(a, b, fmt, ste), (a, b), g) for _ in range(3)]
    grad_a, grad_b = grad_reference(a.detach(), b.detach(), g, fmt, ste)
    for got_a, got_b in grads:
        assert _same_bits(got_a, grad_a) and _same_bits(got_b, grad_b)


@pytest.mark.parametrize("wanted", ["a", "b"])
def test_one_operand_gradient(wanted):
    fmt = GRAD_FORMATS["M4E3"]
    a = _draw("wide", (130, 29), 96).requires_grad_(wanted == "a")
    b = _draw("wide", (29, 21), 97).requires_grad_(wanted == "b")
    g = _draw("normal", (130, 21), 98)
    (grad,) = torch.autograd.grad(kernel.matmul(a, b, fmt, "immediate-of"), (a if wanted == "a" else b,), g)
    expected = grad_reference(a.detach(), b.detach(), g, fmt, "immediate-of")[0 if wanted == "a" else 1]
    assert _same_bits(grad, expected)


def test_gradients_with_no_rows_or_no_columns():
    fmt = GRAD_FORMATS["M4E3"]
    for m, n in ((0, 5), (6, 0)):
        a = _draw("normal", (m, 9), 99).requires_grad_()
        b = _draw("normal", (9, n), 100).requires_grad_()
        kernel.matmul(a, b, fmt, "immediate-diff").backward(torch.ones(m, n, device="cuda"))
        assert torch.equal(a.grad, torch.zeros_like(a)) and torch.equal(b.grad, torch.zeros_like(b))


def test_torch_compile_and_cuda_graph():
    a = _draw("wide", (64, 96), 50).requires_grad_()
    b = _draw("wide", (96, 48), 51).requires_grad_()

    def step(a, b):
        return kernel.matmul(a, b, M7E4, "recursive-of").sum()

    eager_loss = step(a, b)
    eager_grads = torch.autograd.grad(eager_loss, (a, b))
    compiled = torch.compile(step, fullgraph=True)
    compiled_loss = compiled(a, b)
    compiled_grads = torch.autograd.grad(compiled_loss, (a, b))
    assert torch.equal(eager_loss, compiled_loss)
    assert all(torch.equal(x, y) for x, y in zip(eager_grads, compiled_grads))

    static_a, static_b = a.detach().clone(), b.detach().clone()
    out = kernel.matmul(static_a, static_b, M7E4)  # builds and loads the library outside the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        kernel.matmul(static_a, static_b, M7E4)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = kernel.matmul(static_a, static_b, M7E4)
    static_a.copy_(_draw("wide", (64, 96), 52))
    graph.replay()
    torch.cuda.synchronize()
    assert _same_bits(out, lowbit_matmul_fmt(static_a, static_b, M7E4))


@pytest.mark.parametrize("ste", ["recursive-of", "immediate-diff"])
def test_backward_in_a_cuda_graph(ste):
    # the gradient kernel clears its workspace on the stream: a replayed graph gives fresh, equal gradients
    a = _draw("wide", (150, 48), 101).requires_grad_()
    b = _draw("wide", (48, 20), 102).requires_grad_()
    g = _draw("normal", (150, 20), 103)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.autograd.grad(kernel.matmul(a, b, M7E4, ste), (a, b), g)  # builds the library outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        grad_a, grad_b = torch.autograd.grad(kernel.matmul(a, b, M7E4, ste), (a, b), g)
    for seed in (104, 105):
        with torch.no_grad():
            a.copy_(_draw("wide", (150, 48), seed))
        graph.replay()
        torch.cuda.synchronize()
        expected_a, expected_b = grad_reference(a.detach(), b.detach(), g, M7E4, ste)
        assert _same_bits(grad_a, expected_a) and _same_bits(grad_b, expected_b)


def test_backward_memory_stays_near_the_identity_ste():
    # no M·N·K tensor: the recursive STE keeps one int32 per output beyond what the identity STE holds
    m = n = k = 1024
    a = _draw("normal", (m, k), 60).requires_grad_()
    b = _draw("normal", (k, n), 61).requires_grad_()
    g = _draw("normal", (m, n), 62)
    peaks = {}
    for ste in ("identity", "recursive-of", "immediate-of", "immediate-diff"):
        a.grad = b.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        kernel.matmul(a, b, M7E4, ste).backward(g)
        torch.cuda.synchronize()
        peaks[ste] = torch.cuda.max_memory_allocated()  # inputs, output, saved tensors and gradients
    for ste, peak in peaks.items():
        assert peak <= 1.2 * peaks["identity"], (ste, peaks)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda a, b: kernel.matmul(a.cpu(), b, M7E4), ValueError, "a must be a CUDA tensor"),
        (lambda a, b: kernel.matmul(a, b.double(), M7E4), TypeError, "b must be float32"),
        (lambda a, b: kernel.matmul(a, b[:-1], M7E4), ValueError, "must agree on K"),
        (lambda a, b: kernel.matmul(a, b, M7E4, ste="straight"), ValueError, "ste="),
        (lambda a, b: kernel.matmul(a, b, "M7E4"), TypeError, "fmt must be"),
        (lambda a, b: kernel.matmul(a[0], b, M7E4), ValueError, "a must have at least 2"),
    ],
)
def test_bad_input_names_the_argument(call, error, match):
    a, b = _draw("normal", (4, 6), 70), _draw("normal", (6, 5), 71)
    with pytest.raises(error, match=match):
        call(a, b)


def test_other_variants_compute_the_same_bits():
    # smaller tiles, and a gradient window of 8 that chunks of 16 span (the backward's steps before the window)
    config = kernel.LowbitKernelConfig(block=(32, 32, 8), thread=(2, 2), window=8)
    fmt = GRAD_FORMATS["M7E4_c16"]
    a = _draw("wide", (19, 75), 80).requires_grad_()
    b = _draw("wide", (75, 23), 81).requires_grad_()
    g = _draw("normal", (19, 23), 82)
    for ste in ("recursive-of", "immediate-diff"):
        a.grad = b.grad = None
        out = kernel.matmul(a, b, fmt, ste, config=config)
        assert _same_bits(out, lowbit_matmul_fmt(a.detach(), b.detach(), fmt))
        out.backward(g)
        grad_a, grad_b = grad_reference(a.detach(), b.detach(), g, fmt, ste)
        assert _same_bits(a.grad, grad_a) and _same_bits(b.grad, grad_b)
