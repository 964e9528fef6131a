"""ext.gemm's torch.matmul semantics and fused epilogue on the GPU: alpha·A·B + beta·C + bias equals the separate
passes within each mode's accuracy, broadcasting equals torch.matmul's, gradients of a, b, bias and c, compile."""

import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import corrected_sm90, numerics

from .helpers import draw

MODES = ["tf32", "tf32tf32", "halfhalf", "markidis", "fp32"]
BOUND = {"tf32": 1e-3, "markidis": 1e-3, "tf32tf32": 1e-6, "halfhalf": 1e-6, "fp32": 1e-6}
# |d - A·B| <= bound · |A|·|B| per output at K = 97, for products that may cancel far below their terms. tf32: a
# worst case (operands RNA-rounded to TF32, 2^-10 per term, plus the Tensor Core's truncating accumulation,
# 97·2^-23); the others ~5-10x the worst of numerics.emulated_gemm over 20 seeds (markidis 1.1e-6, the corrected
# modes and FP32 2.1e-7), below an uncorrected TF32 product's (>= 3e-6 for one dot product, >= 7e-5 for 33 or more).
COMPONENTWISE_BOUND = {"tf32": 1e-3, "markidis": 1e-5, "tf32tf32": 1e-6, "halfhalf": 1e-6, "fp32": 1e-6}
# (a's shape, b's shape): odd sizes on the sm80 kernels, 2048 x 2048 on the Hopper path (a wave of tiles or more)
PROBLEMS = [((67, 131), (131, 45)), ((3, 65, 130), (130, 48)), ((2, 40, 96), (2, 96, 36)), ((2048, 512), (512, 2048))]


def reference(a, b, alpha, beta, c, bias):
    d = alpha * (a.double() @ b.double())
    if c is not None:
        d = d + beta * c.double()
    return d if bias is None else d + bias.double()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("a_shape, b_shape", PROBLEMS)
@pytest.mark.parametrize("kind", ["normal", (-15, 14)])
@pytest.mark.parametrize(
    "alpha, beta, c_of, with_bias",
    [
        (1.0, 0.0, None, True),  # nn.Linear's bias
        (0.5, 2.0, "full", False),
        (-1.5, 1.0, "row", True),  # c (n,) broadcast over the rows, and a bias
        (1.0, -1.0, "column", False),  # c (m, 1) broadcast over the columns
    ],
)
def test_fused_epilogue_equals_separate_passes(mode, a_shape, b_shape, kind, alpha, beta, c_of, with_bias):
    generator = torch.Generator(device="cuda").manual_seed(31)
    a, b = draw(kind, a_shape, generator), draw(kind, b_shape, generator)
    m, n = a_shape[-2], b_shape[-1]
    shapes = {"full": (*torch.broadcast_shapes(a_shape[:-2], b_shape[:-2]), m, n), "row": (n,), "column": (m, 1)}
    c = draw(kind, shapes[c_of], generator) if c_of else None
    bias = draw(kind, (n,), generator) if with_bias else None
    fused = ext.gemm(a, b, mode=mode, bias=bias, alpha=alpha, beta=beta, c=c)
    separate = alpha * ext.gemm(a, b, mode=mode)
    if c is not None:
        separate = separate + beta * c
    if bias is not None:
        separate = separate + bias
    expected = reference(a, b, alpha, beta, c, bias)
    assert fused.shape == expected.shape
    assert numerics.relative_residual(fused, expected) < BOUND[mode]
    assert numerics.relative_residual(fused, separate.double()) < BOUND[mode]


@pytest.mark.parametrize("mode", ["tf32", "tf32tf32", "halfhalf", "markidis"])
def test_bias_reaches_every_row_exactly(mode):
    # products of 2^20 plus biases 0..63: exact in FP32, so any row that missed its bias shows
    a = torch.full((100, 64), 2.0**10, device="cuda")
    b = torch.zeros((64, 64), device="cuda")
    b[0] = 2.0**10
    bias = torch.arange(64, dtype=torch.float32, device="cuda")
    assert torch.equal(ext.gemm(a, b, mode=mode, bias=bias), (2.0**20 + bias).expand(100, 64))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "a_shape, b_shape",
    [((97,), (97,)), ((97,), (97, 33)), ((35, 97), (97,)), ((2, 1, 35, 97), (4, 97, 33)), ((1, 35, 97), (3, 97, 33))],
)
def test_broadcasting_matches_torch_matmul(mode, a_shape, b_shape):
    generator = torch.Generator(device="cuda").manual_seed(32)
    a, b = draw("normal", a_shape, generator), draw("normal", b_shape, generator)
    ours = ext.gemm(a, b, mode=mode)
    expected = torch.matmul(a.double(), b.double())
    assert ours.shape == expected.shape
    scale = torch.matmul(a.abs().double(), b.abs().double())
    assert bool(((ours.double() - expected).abs() <= COMPONENTWISE_BOUND[mode] * scale).all())


@pytest.mark.parametrize("mode", ["tf32tf32", "halfhalf", "tf32"])
def test_gradients_of_a_b_bias_and_c_match_fp64(mode):
    generator = torch.Generator(device="cuda").manual_seed(33)
    leaves = [draw("normal", shape, generator).requires_grad_() for shape in ((3, 70, 90), (90, 52), (52,), (70, 52))]
    a, b, bias, c = leaves
    d = ext.gemm(a, b, mode=mode, bias=bias, alpha=0.75, beta=-2.0, c=c)
    weight = torch.randn(d.shape, device="cuda", generator=generator)
    (d * weight).sum().backward()
    doubles = [t.detach().double().requires_grad_() for t in leaves]
    (reference(*doubles[:2], 0.75, -2.0, doubles[3], doubles[2]) * weight.double()).sum().backward()
    for leaf, double in zip(leaves, doubles):
        assert numerics.relative_residual(leaf.grad, double.grad) < BOUND[mode]


def test_out_is_written():
    generator = torch.Generator(device="cuda").manual_seed(34)
    a, b = draw("normal", (2, 33, 65), generator), draw("normal", (65, 17), generator)
    out = torch.empty(2, 33, 17, device="cuda")
    assert ext.gemm(a, b, out=out) is out
    assert torch.equal(out, ext.gemm(a, b))


@pytest.mark.parametrize("mode", ["tf32", "tf32tf32", "halfhalf"])
def test_compiled_epilogue_equals_eager(mode):
    generator = torch.Generator(device="cuda").manual_seed(35)
    a, b = draw("normal", (4, 64, 96), generator), draw("normal", (96, 80), generator)
    bias, c = draw("normal", (80,), generator), draw("normal", (64, 80), generator)

    def run(x, y, bias, c):
        return ext.gemm(x, y, mode=mode, bias=bias, alpha=2.0, beta=0.5, c=c)

    compiled = torch.compile(run, fullgraph=True)
    assert torch.equal(compiled(a, b, bias, c), run(a, b, bias, c))


@pytest.mark.parametrize("mode", MODES)
def test_batches_past_the_grid_limit(mode):
    # CUTLASS 2.x launches put the batch on the grid's z (at most 65535): the binding launches it in parts
    generator = torch.Generator(device="cuda").manual_seed(36)
    a, b = draw("normal", (65537, 3, 5), generator), draw("normal", (65537, 5, 4), generator)
    bias = draw("normal", (4,), generator)
    ours = ext.gemm(a, b, mode=mode, bias=bias)
    assert numerics.relative_residual(ours, reference(a, b, 1.0, 0.0, None, bias)) < BOUND[mode]


HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.skipif(not HOPPER, reason="the sm90a kernels need Hopper")
@pytest.mark.parametrize("mode", ["tf32tf32", "halfhalf"])
@pytest.mark.parametrize("folded", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_hopper_bias_variants_add_alpha_and_bias_in_their_epilogue(mode, folded, with_bias):
    generator = torch.Generator(device="cuda").manual_seed(37)
    a = draw((-15, 14), (2, 300, 384) if folded else (300, 384), generator)
    b = draw((-15, 14), (384, 260), generator)
    bias = draw("normal", (260,), generator) if with_bias else None
    plain = [corrected_sm90.default_variants(mode)[0]]
    twins = [name + "_bias" for name in plain]
    ours = corrected_sm90.product(a, b, mode, twins, bias, -0.75)
    expected = reference(a, b, -0.75, 0.0, None, bias)
    assert numerics.relative_residual(ours, expected) < BOUND[mode]
    separate = -0.75 * corrected_sm90.product(a, b, mode, plain) + (0 if bias is None else bias)
    assert numerics.relative_residual(ours, separate.double()) < BOUND[mode]
