"""The Hopper corrected SGEMM (sm90a wgmma, hi·hi promoted into FP32 registers) against cuBLAS SGEMM's accuracy,
on the seed's distributions and on odd shapes, strides and batches; and its split pass against torch."""

import pytest
import torch

from cutlass_ext import corrected_sm90, device, numerics, ops, tuned
from cutlass_ext.families.sm90.config import DEFAULTS as DEFAULT_SPLIT
from cutlass_ext.families.sm90.config import Sm90Config as SplitConfig
from cutlass_ext.gemm import dispatched_variant, plan
from cutlass_ext.gemm import gemm as ext_gemm

from .helpers import cublas_precision, operands, poison_allocator, reference

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="needs a Hopper GPU"
)

# The defaults, every promotion interval we measure, and whatever the device's tuned table ships.
PROMOTIONS = (1, 2)  # 4 breaks the bound at k=16384 (docs/design-notes.md): the space stops at 2


def variants_under_test() -> list[str]:
    names = [
        SplitConfig(c.mode, c.tile, c.cluster, c.schedule, promotion).name
        for c in DEFAULT_SPLIT.values()
        for promotion in PROMOTIONS
    ]
    names += [c.name for c in tuned.shipped_configs() if isinstance(c, SplitConfig)]
    return list(dict.fromkeys(names))


CASES = [("tf32tf32", d) for d in ["urand(-1,1)", "type1", "type2", "type3", "type4"]] + [
    ("halfhalf", d) for d in ["urand(-1,1)", "type1", "type2", "type3"]
]
SIZES = [(1024, 1024), (256, 16384), (256, 65536)]


def relres_pair(name, distribution, m, k, seed=0):
    a, b = operands(distribution, m, m, k, seed=seed + k)
    ref = reference(a, b)
    poison_allocator(m, m)
    c = corrected_sm90.product(a, b, SplitConfig.from_name(name).mode, [name])
    assert torch.isfinite(c).all(), f"{name} returned non-finite values where FP32 SGEMM is finite"
    with cublas_precision("ieee"):
        cublas = numerics.relative_residual(a @ b, ref)
    return numerics.relative_residual(c, ref), cublas


@pytest.mark.parametrize("m, k", SIZES)
@pytest.mark.parametrize("mode, distribution", CASES)
@pytest.mark.parametrize("name", variants_under_test())
def test_matches_cublas_sgemm(name, mode, distribution, m, k):
    if SplitConfig.from_name(name).mode != mode:
        pytest.skip("another mode's variant")
    ours, cublas = zip(*(relres_pair(name, distribution, m, k, seed) for seed in (0, 1000)))
    ours, cublas = sum(ours) / 2, sum(cublas) / 2
    assert ours <= 1.1 * cublas, f"{name} {distribution} {m}x{m}x{k}: relres {ours:.3g} vs cuBLAS FP32 {cublas:.3g}"


def test_promotion_keeps_tensor_core_sums_short():
    """hi·hi summed in the Tensor Core over all of K (no promotion until the end) loses what promotion keeps:
    the promoted variant must be clearly more accurate on a deep, positive sum."""
    a, b = operands("urand(-1,1)", 256, 256, 65536, seed=5)
    a, b = a.abs(), b.abs()
    ref = reference(a, b)
    base = DEFAULT_SPLIT["tf32tf32"]
    every = corrected_sm90.product(a, b, "tf32tf32", [base.name])
    never = corrected_sm90.product(a, b, "tf32tf32", [SplitConfig(base.mode, base.tile, promotion=1 << 20).name])
    assert numerics.relative_residual(every, ref) * 4 < numerics.relative_residual(never, ref)


# (m, n, k): a single row, odd sizes, K not a multiple of the k-tile or of 16 bytes, N at its 4-element minimum
ODD_SHAPES = [(1, 8, 64), (3, 20, 1001), (17, 36, 333), (129, 260, 517), (1000, 4, 4096)]


@pytest.mark.parametrize("mode", ["tf32tf32", "halfhalf"])
@pytest.mark.parametrize("m, n, k", ODD_SHAPES)
def test_odd_shapes(mode, m, n, k):
    a, b = operands("normal", m, n, k, seed=m + n + k)
    ref = reference(a, b)
    poison_allocator(m, n)
    c = corrected_sm90.product(a, b, mode)
    with cublas_precision("ieee"):
        bound = 1.1 * numerics.relative_residual(a @ b, ref) + 1e-7
    assert numerics.relative_residual(c, ref) <= bound


@pytest.mark.parametrize("mode", ["tf32tf32", "halfhalf"])
def test_strided_batched_and_folded(mode):
    generator = torch.Generator(device="cuda").manual_seed(3)
    a = torch.randn(3, 96, 200, device="cuda", generator=generator)
    b = torch.randn(3, 64, 200, device="cuda", generator=generator).mT  # column-major views
    with cublas_precision("ieee"):
        for x, y in ((a, b), (a[:, ::2], b), (a, b[0]), (a.mT.contiguous().mT, b[1])):
            ref = reference(x, y)
            bound = 1.1 * numerics.relative_residual(x @ y, ref) + 1e-7
            c = corrected_sm90.product(x, y, mode)
            assert c.shape == ref.shape
            assert numerics.relative_residual(c, ref) <= bound


def test_halfhalf_range_scaling_holds_tiny_operands():
    """A near 2^-100 underflows FP16 unscaled; the split pass's shifts and the epilogue's unscale keep it."""
    a, b = operands("urand(-1,1)", 256, 256, 1024, seed=9)
    a = a * 2.0**-100
    ref = reference(a, b)
    with cublas_precision("ieee"):
        cublas = numerics.relative_residual(a @ b, ref)
    assert numerics.relative_residual(corrected_sm90.product(a, b, "halfhalf"), ref) <= 1.1 * cublas


@pytest.mark.parametrize("mode", ["tf32tf32", "halfhalf"])
def test_split_planes_match_numerics(mode):
    """The pass writes exactly numerics.split's hi and lo (halfhalf: lo·2^11), read through a transposed view, and
    zeros in the rows' padding to 16 bytes."""
    corrected_sm90.product(*operands("normal", 8, 8, 8, seed=0), mode)  # loads the split pass
    x = torch.randn(70, 45, device="cuda").mT  # a column-major view: the pass transposes it
    hi, lo = ops.split_planes(x, None, ops.PLANES_HALF if mode == "halfhalf" else ops.PLANES_TF32)
    padded = -(-x.shape[1] * hi.element_size() // 16) * 16 // hi.element_size()
    assert hi.shape == (x.shape[0], padded) and hi.is_contiguous() and lo.shape == hi.shape
    expected_hi, expected_lo = numerics.split(x, mode)
    torch.testing.assert_close(hi[:, : x.shape[1]].float(), expected_hi, rtol=0, atol=0)
    torch.testing.assert_close(lo[:, : x.shape[1]].float(), expected_lo, rtol=0, atol=0)
    assert not hi[:, x.shape[1] :].any() and not lo[:, x.shape[1] :].any()


def test_graph_capture():
    a, b = operands("normal", 512, 512, 512, seed=1)
    expected = corrected_sm90.product(a, b, "halfhalf")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = corrected_sm90.product(a, b, "halfhalf")
    a.copy_(a * 2)
    graph.replay()
    torch.testing.assert_close(captured, 2 * expected, rtol=1e-6, atol=1e-5)


def test_dispatched_variant_names_what_runs_on_hopper():
    """Benchmarks label ext.gemm's rows with dispatched_variant: a Hopper kernel at large shapes, cuBLAS for fp32."""
    a = torch.randn(4096, 4096, device="cuda")
    for mode in ("tf32tf32", "halfhalf"):
        name = dispatched_variant(a, a, mode)
        assert SplitConfig.is_name(name), name
        assert name == plan(device.info(a.device.index), mode, 4096, 4096, 4096).variants[0]
        # and it is what ran: alone it gives the dispatched call's bits
        assert torch.equal(ext_gemm(a, a, mode=mode), corrected_sm90.product(a, a, mode, [name]))
    assert dispatched_variant(a, a, "fp32") == "cuBLAS"
    assert dispatched_variant(a[:0], a, "tf32tf32") == "none"
