"""The Ozaki-II kernels on the GPU: bit for bit `reference.ozaki_matmul` (computed on the CPU) over shapes,
layouts, distributions and moduli counts; accuracy against FP64 beside cuBLAS SGEMM; batches, autograd,
torch.compile, CUDA graphs and bad input."""

import pytest
import torch

from cutlass_ext import ozaki
from cutlass_ext.numerics import exp_rand, relative_residual
from cutlass_ext.ozaki.inputs import KINDS, accuracy_inputs
from cutlass_ext.ozaki.reference import ozaki_matmul

pytestmark = pytest.mark.gpu

EXPONENT_RANGES = {"type1": (-15, 14), "type3": (-35, -15), "type4": (-100, -35), "wide": (-126, 120)}


def _draw(kind, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if kind == "urand":
        x = torch.rand(shape, generator=g) * 2 - 1
    elif kind == "positive":
        x = torch.rand(shape, generator=g)
    elif kind == "sparse":
        x = (torch.rand(shape, generator=g) * 2 - 1) * (torch.rand(shape, generator=g) < 0.05)
    else:
        x = exp_rand(shape, *EXPONENT_RANGES[kind], g)
    return x.cuda()


def _same_bits(x, y):
    x, y = x.cpu(), y.cpu()
    return x.shape == y.shape and torch.equal(x.contiguous().view(torch.int32), y.contiguous().view(torch.int32))


@pytest.mark.parametrize("kind", ["urand", "positive", "sparse", "type1", "type3", "type4", "wide"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 5, 3), (33, 17, 31), (128, 256, 128), (65, 130, 1029), (3, 300, 2)])
def test_equals_reference(kind, shape):
    m, n, k = shape
    a, b = _draw(kind, (m, k), m + 3 * n + 7 * k), _draw(kind, (k, n), m + 5 * n + 11 * k)
    assert _same_bits(ozaki.gemm(a, b), ozaki_matmul(a.cpu(), b.cpu(), 8))


@pytest.mark.parametrize("moduli", [3, 6, 7, 9, 14])
def test_every_moduli_count_equals_reference(moduli):
    a, b = _draw("type1", (70, 200), moduli), _draw("type1", (200, 45), moduli + 1)
    assert _same_bits(ozaki.gemm(a, b, moduli=moduli), ozaki_matmul(a.cpu(), b.cpu(), moduli))


@pytest.mark.parametrize("shape", [(70, 33, 200), (256, 512, 1000)])
def test_int32_product_output_gives_the_same_bits(shape):
    """The variant that writes INT32 products (and reduces them in the recombination) equals the residue one."""
    m, n, k = shape
    a, b = _draw("type1", (m, k), 17), _draw("type1", (k, n), 18)
    products = ozaki.gemm(a, b, config=ozaki.OzakiConfig(output="products"))
    assert _same_bits(products, ozaki.gemm(a, b))
    assert _same_bits(products, ozaki_matmul(a.cpu(), b.cpu(), 8))


# (37, 53, 301): strides not multiples of 4, every tile loaded a float at a time; (100, 72, 520): whole tiles loaded
# as float4 groups along whichever of row and k is contiguous, the edge tiles a float at a time
@pytest.mark.parametrize("m, n, k", [(37, 53, 301), (100, 72, 520)])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt", "strided"])
def test_layouts_equal_reference(layout, m, n, k):
    a, b = _draw("urand", (m, k), 1), _draw("urand", (k, n), 2)
    if layout in ("tn", "tt"):
        a = a.T.contiguous().T
    if layout in ("nt", "tt"):
        b = b.T.contiguous().T
    if layout == "strided":
        a = _draw("urand", (m, 2 * k), 3)[:, ::2]
        b = _draw("urand", (k, 3 * n), 4)[:, 1::3]
    assert _same_bits(ozaki.gemm(a, b), ozaki_matmul(a.cpu(), b.cpu(), 8))


def test_output_of_large_and_tiny_values():
    """Scales near the ends of FP32's range: overflow to inf and results in the subnormals round as the reference."""
    a, b = _draw("urand", (16, 64), 5), _draw("urand", (64, 16), 6)
    a[0] *= 2.0**100
    b[:, 0] *= 2.0**60
    a[1] *= 2.0**-100
    b[:, 1] *= 2.0**-60
    out = ozaki.gemm(a, b)
    assert torch.isinf(out[0, 0]) or out[0, 0].abs() > 2.0**120
    assert _same_bits(out, ozaki_matmul(a.cpu(), b.cpu(), 8))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("k", [256, 4096, 65536])
def test_accuracy_within_sgemm(kind, k):
    """‖C − ref‖_F/‖ref‖_F against FP64 within 1.1x cuBLAS SGEMM's (issue's criterion), at 8 moduli."""
    a, b = accuracy_inputs(kind, 64, k, 64, seed=k)
    exact = a.double() @ b.double()
    previous = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    try:
        sgemm = relative_residual(a @ b, exact)
    finally:
        torch.backends.cuda.matmul.fp32_precision = previous
    assert relative_residual(ozaki.gemm(a, b), exact) <= 1.1 * sgemm


def test_batched_broadcast_equals_per_matrix():
    a, b = _draw("urand", (3, 1, 40, 90), 7), _draw("urand", (4, 90, 33), 8)
    out = ozaki.gemm(a, b)
    assert out.shape == (3, 4, 40, 33)
    for i in range(3):
        for j in range(4):
            assert _same_bits(out[i, j], ozaki.gemm(a[i, 0], b[j]))


def test_autograd_runs_ozaki_products():
    a = _draw("urand", (20, 50), 9).requires_grad_()
    b = _draw("urand", (50, 30), 10).requires_grad_()
    grad = _draw("urand", (20, 30), 11)
    ozaki.gemm(a, b).backward(grad)
    assert _same_bits(a.grad, ozaki_matmul(grad.cpu(), b.detach().cpu().T.contiguous(), 8))
    assert _same_bits(b.grad, ozaki_matmul(a.detach().cpu().T.contiguous(), grad.cpu(), 8))
    torch.autograd.gradcheck(
        lambda x, y: ozaki.gemm(x.float(), y.float()).double(),
        (
            torch.randn(3, 4, dtype=torch.float64, device="cuda", requires_grad=True),
            torch.randn(4, 2, dtype=torch.float64, device="cuda", requires_grad=True),
        ),
        eps=1e-2,
        atol=1e-3,
        rtol=1e-3,
    )


def test_compile_and_graph_replay_give_eager_bits():
    a, b = _draw("urand", (64, 96), 12), _draw("urand", (96, 80), 13)
    eager = ozaki.gemm(a, b)
    compiled = torch.compile(lambda x, y: ozaki.gemm(x, y) * 1.0, fullgraph=True)
    assert _same_bits(compiled(a, b), eager)
    static_a, static_b = a.clone(), b.clone()
    ozaki.gemm(static_a, static_b)  # builds and loads the library outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = ozaki.gemm(static_a, static_b)
    static_a.copy_(_draw("urand", (64, 96), 14))
    graph.replay()
    assert _same_bits(static_out, ozaki.gemm(static_a, static_b))


@pytest.mark.parametrize("layout", ["nn", "tt"])
def test_eager_call_and_the_op_give_the_same_bits(layout):
    """An eager call without autograd launches the kernels itself; the op (compile, autograd, tracing) the same."""
    a, b = _draw("type1", (300, 1100), 21), _draw("type1", (1100, 190), 22)
    if layout == "tt":
        a, b = a.T.contiguous().T, b.T.contiguous().T
    eager = ozaki.gemm(a, b)
    op = torch.ops.cutlass_ext.ozaki_gemm(a.unsqueeze(0), b.unsqueeze(0), ozaki.OzakiConfig().name)[0]
    assert _same_bits(eager, op)
    assert _same_bits(eager, ozaki_matmul(a.cpu(), b.cpu(), 8))


@pytest.mark.parametrize("layout", ["nn", "tt"])
def test_the_largest_value_in_a_partial_last_chunk_sets_the_shift(layout):
    """The norm pass reads k in chunks (32 staged, 16 per batch of loads) within slices of 1024: a row or column
    whose largest value sits in the last slice's partial chunk gets its shift from it, in both layouts."""
    k = 1024 + 64 + 11
    a, b = _draw("urand", (40, k), 31), _draw("urand", (k, 50), 32)
    a[5, k - 1], a[7, 1024 + 64] = 2.0**20, 2.0**-9
    b[k - 1, 3], b[1024 + 48, 9] = 2.0**20, 2.0**12
    if layout == "tt":
        a, b = a.T.contiguous().T, b.T.contiguous().T
    assert _same_bits(ozaki.gemm(a, b), ozaki_matmul(a.cpu(), b.cpu(), 8))


@pytest.mark.parametrize("moduli, output", [(8, "residues"), (8, "products"), (9, "residues")])
@pytest.mark.parametrize("layout", ["nn", "tt"])
def test_inf_and_nan_give_the_references_nan_rows_and_columns(moduli, output, layout):
    """A row of A or column of B holding Inf or NaN: NaN in its row or column, the other outputs unchanged (the
    FP32 residue path at 8 moduli, the integer one at 9)."""
    a, b = _draw("urand", (70, 300), 21), _draw("urand", (300, 45), 22)
    a[3, 7], a[40, 299], a[69, 0] = float("inf"), float("-inf"), float("nan")
    b[0, 2], b[150, 44] = float("nan"), float("inf")
    if layout == "tt":
        a, b = a.T.contiguous().T, b.T.contiguous().T
    config = ozaki.OzakiConfig(moduli=moduli, output=output)
    out = ozaki.gemm(a, b, moduli=moduli, config=config)
    expected = ozaki_matmul(a.cpu(), b.cpu(), moduli)
    assert _same_bits(out, expected)
    assert torch.isnan(expected[[3, 40, 69]]).all() and torch.isnan(expected[:, [2, 44]]).all()
    assert torch.isfinite(expected[:3, :2]).all()


def test_bad_arguments_raise_clear_errors():
    a, b = _draw("urand", (4, 8), 15), _draw("urand", (8, 3), 16)
    with pytest.raises(TypeError, match="a must be float32"):
        ozaki.gemm(a.half(), b)
    with pytest.raises(ValueError, match="must agree on K"):
        ozaki.gemm(a, b[:7])
    with pytest.raises(ValueError, match="one device"):
        ozaki.gemm(a, b.cpu())
    with pytest.raises(ValueError, match="moduli=15"):
        ozaki.gemm(a, b, moduli=15)
    with pytest.raises(ValueError, match="config.moduli=8 differs from moduli=7"):
        ozaki.gemm(a, b, moduli=7, config=ozaki.OzakiConfig())


def test_ext_gemm_mode():
    import cutlass_ext as ext

    a, b = _draw("urand", (2, 30, 70), 19), _draw("urand", (70, 20), 20)
    assert _same_bits(ext.gemm(a, b, mode="int8x7"), ozaki.gemm(a, b, moduli=7))


def test_linear_layer_in_an_ozaki_mode():
    import cutlass_ext as ext

    torch.manual_seed(21)
    layer = ext.nn.Linear(70, 20, mode="int8x8").cuda()
    x = _draw("urand", (3, 30, 70), 22).requires_grad_()
    y = layer(x)
    weight, bias = layer.weight.detach().cpu(), layer.bias.detach().cpu()
    assert _same_bits(y, ozaki_matmul(x.detach().cpu(), weight.T.contiguous(), 8) + bias)
    grad = _draw("urand", (3, 30, 20), 23)
    y.backward(grad)
    assert _same_bits(x.grad, ozaki_matmul(grad.cpu(), weight, 8))
    torch.testing.assert_close(layer.bias.grad.cpu(), grad.cpu().sum((0, 1)))  # torch's reduction, any order
    expected = torch.einsum("bmn,bmk->nk", grad.cpu().double(), x.detach().cpu().double())
    assert relative_residual(layer.weight.grad.cpu(), expected) < 1e-6


def test_precision_switch_in_an_ozaki_mode():
    import cutlass_ext as ext

    a, b = _draw("urand", (2, 30, 70), 24), _draw("urand", (70, 20), 25)
    bias = _draw("urand", (20,), 26)
    with ext.precision("int8x8"):
        product = a @ b
        linear = torch.nn.functional.linear(a, b.T, bias)
    assert _same_bits(product, ozaki.gemm(a, b))
    assert _same_bits(linear, ozaki.gemm(a, b) + bias)


def test_first_call_of_a_batch_size_inside_a_graph_capture():
    ozaki.gemm(_draw("urand", (8, 16), 21), _draw("urand", (16, 8), 22))  # the library, loaded outside the capture
    a, b = _draw("urand", (5, 24, 40), 23), _draw("urand", (5, 40, 12), 24)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ozaki.gemm(a, b)
    graph.replay()
    assert _same_bits(out, ozaki_matmul(a.cpu(), b.cpu(), 8))
