"""mode="fp32" is IEEE SGEMM everywhere (eager, compiled, graph-captured) whatever torch's TF32 setting says, and
never changes that setting, which is process-wide: another thread's matmul keeps its precision."""

import ctypes
import threading

import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import cublas, numerics

from .helpers import cublas_precision, draw

# FP32 with K = 4096 on normal data: relres ~1e-7; TF32 ~3e-4
IEEE_BOUND = 1e-6


def problem(seed, m=256, n=192, k=4096):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return draw("normal", (m, k), generator), draw("normal", (k, n), generator)


def ieee(result, a, b):
    return numerics.relative_residual(result, a.double() @ b.double()) < IEEE_BOUND


def test_eager_is_ieee_while_torch_runs_tf32():
    a, b = problem(41)
    with cublas_precision("tf32"):
        assert not ieee(a @ b, a, b), "the TF32 setting took no effect: this test would prove nothing"
        assert ieee(ext.gemm(a, b, mode="fp32"), a, b)
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"


@pytest.fixture
def high_precision():
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    yield
    torch.set_float32_matmul_precision(previous)


def test_compiled_is_ieee_under_high_matmul_precision(high_precision):
    a, b = problem(42)
    compiled = torch.compile(lambda x, y: ext.gemm(x, y, mode="fp32"), fullgraph=True)
    ours = compiled(a, b)
    assert ieee(ours, a, b)
    assert torch.equal(ours, ext.gemm(a, b, mode="fp32"))


def test_graph_captured_is_ieee_under_tf32():
    a, b = problem(43)
    with cublas_precision("tf32"):
        ext.gemm(a, b, mode="fp32")
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
            d = ext.gemm(a, b, mode="fp32")
        torch.cuda.current_stream().wait_stream(stream)
        fresh_a, fresh_b = problem(44)
        a.copy_(fresh_a)
        b.copy_(fresh_b)
        graph.replay()
        torch.cuda.synchronize()
    assert ieee(d, fresh_a, fresh_b)


def test_another_threads_precision_is_never_changed():
    a, b = problem(45, m=64, n=64, k=64)
    seen = set()
    done = threading.Event()

    def products():
        try:
            for _ in range(2000):
                ext.gemm(a, b, mode="fp32")
        finally:
            done.set()

    with cublas_precision("tf32"):
        worker = threading.Thread(target=products)
        worker.start()
        while not done.is_set():
            seen.add(torch.backends.cuda.matmul.fp32_precision)
        worker.join()
    assert seen == {"tf32"}


@pytest.mark.parametrize(
    "make_a, make_b",
    [
        (lambda t: t.mT.contiguous().mT, lambda t: t),  # A column-major
        (lambda t: t, lambda t: t.mT.contiguous().mT),  # B column-major
        (lambda t: torch.stack([t, t], -1)[..., 0], lambda t: t),  # A strided: copied
        (lambda t: torch.stack([t, 2 * t]), lambda t: t),  # a batch times a shared B
        (lambda t: t, lambda t: torch.stack([t, -t, t]).mT.contiguous().mT),  # shared A times column-major batch
    ],
)
@pytest.mark.parametrize("precision", ["ieee", "tf32"])  # torch's matmul, or the pedantic call
def test_layouts_and_batches(make_a, make_b, precision):
    a, b = problem(46, m=37, n=45, k=131)
    a, b = make_a(a), make_b(b)
    with cublas_precision(precision):
        assert cublas.torch_matmul_is_ieee() == (precision == "ieee")
        assert ieee(ext.gemm(a, b, mode="fp32"), a, b)


@pytest.mark.parametrize("batched", [False, True])
def test_planned_call_equals_a_call_built_from_plain_ints(batched):
    # the eager path passes ctypes values made once per signature: the same cuBLAS call, so the same bits
    a, b = problem(47, m=70, n=52, k=300)
    if batched:
        a = torch.stack([a, -0.5 * a, 2 * a])
    ours = ext.gemm(a, b, mode="fp32", bias=b[0])
    batch, m, n, k = (3 if batched else 1), 70, 52, 300
    expected = b[0].expand(*a.shape[:-1], n).contiguous()
    one = ctypes.byref(ctypes.c_float(1.0))
    handle = torch.cuda.current_blas_handle()
    status = cublas._gemm_strided_batched()(
        handle, 0, 0, n, m, k, one, b.data_ptr(), 0, n, 0, a.data_ptr(), 0, k, m * k if batched else 0,
        one, expected.data_ptr(), 0, n, m * n if batched else 0, batch, 69, -1,
    )  # fmt: skip
    assert status == 0
    assert torch.equal(ours, expected)
