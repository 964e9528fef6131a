"""The weight-gradient form of the grouped block-scaled FP8 GEMM (groups cut along K) on a Hopper GPU: each group's
(M, N) product over its own columns against the FP64 product of the dequantized inputs, empty groups, a partial last
k-block, offsets the kernel refuses (NaN), accumulation in place, output types, scales given M-major, CUDA graphs
whose offsets change between replays, torch.compile and bad input."""

import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import fp8_block
from cutlass_ext.build import build_libraries
from cutlass_ext.fp8_block import Fp8BlockConfig

from .test_fp8_block import ACCUMULATION_EPS, OUT_EPS, SUBNORMAL_ROUNDING, draw

pytestmark = pytest.mark.gpu

VARIANTS = [
    Fp8BlockConfig(out_dtype=out, scale_n=1, k_grouped=True, scale_a_major="m") for out in ("fp32", "bf16", "fp16")
]
# the dense kernel of the same tile, schedule and promotion: each group's product, one call per group
DENSE = Fp8BlockConfig(out_dtype="fp32", scale_n=1)


@pytest.fixture(scope="module", autouse=True)
def built():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("block-scaled FP8 kernels run on Hopper (sm90)")
    failed = [r for r in build_libraries([(c,) for c in [*VARIANTS, DENSE]], "90a") if r.library is None]
    assert not failed, failed[0].error


def operands(m, n, k, seed, distribution="wide"):
    """a (M, K) and b (N, K) FP8 with 1x128 scales along K: dYᵀ and Xᵀ of an MoE layer, tokens along K."""
    a8, scale_a = ext.quantize_fp8(draw(distribution, (m, k), seed), granularity="block", block=(1, 128))
    b8, scale_b = ext.quantize_fp8(draw("normal", (n, k), seed + 1), granularity="block", block=(1, 128))
    return a8, b8, scale_a, scale_b


def offsets_of(sizes):
    return torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()


def check_group(out_g, a8, b8, scale_a, scale_b, start, size, base=None):
    """|D - D_64| <= eps_out · |D_64| + ACCUMULATION_EPS · (|A| @ |B|ᵀ) over the group's columns (+ base: C)."""
    columns = slice(start, start + size)
    a64 = fp8_block.dequantize(a8, scale_a, 1)[:, columns]
    b64 = fp8_block.dequantize(b8, scale_b, 1)[:, columns]
    reference = a64 @ b64.T + (0 if base is None else base.double())
    bound = OUT_EPS[out_g.dtype] * reference.abs() + ACCUMULATION_EPS * (a64.abs() @ b64.abs().T)
    bound += SUBNORMAL_ROUNDING[out_g.dtype]
    assert torch.isfinite(out_g).all()
    worst = ((out_g.double() - reference).abs() / bound).max().item()
    assert worst <= 1.0, f"error up to {worst:.3g} x the bound"


def check_groups(out, a8, b8, scale_a, scale_b, sizes, c=None):
    """Every group against the FP64 product over its columns; an empty group's D is c (or 0) exactly."""
    start = 0
    for g, size in enumerate(sizes):
        base = None if c is None else c[g]
        if size == 0:
            assert torch.equal(out[g], torch.zeros_like(out[g]) if base is None else base), f"group {g} (empty)"
        else:
            check_group(out[g], a8, b8, scale_a, scale_b, start, size, base)
        start += size


SIZES = [[128, 256, 384], [0, 128, 0, 512, 256, 0], [384], [128, 0, 256, 100], [0, 0], [1024, 128]]


@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "-".join(map(str, s)))
@pytest.mark.parametrize("m, n", [(256, 384), (136, 200), (1, 8)])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_groups_against_fp64(sizes, m, n, out_dtype):
    k = sum(sizes)
    k_padded = max(16, -(-k // 16) * 16)  # K a multiple of 16 (TMA rows); the padding columns belong to no group
    a8, b8, scale_a, scale_b = operands(m, n, k_padded, seed=m + n + k)
    out = ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets_of(sizes), out_dtype=out_dtype)
    assert out.shape == (len(sizes), m, n) and out.dtype == out_dtype
    check_groups(out, a8, b8, scale_a, scale_b, sizes)


@pytest.mark.parametrize("distribution", ["normal", "outliers"])
def test_moe_shapes_with_random_expert_loads_equal_the_dense_kernel_per_group(distribution):
    """Each group's product is the dense block-scaled kernel's (same tile, schedule and promotion) on its columns,
    bit for bit; against FP64 within the bound where no outliers sit in a Tensor Core k-block (their products set
    its alignment: the smaller ones lose bits against them, in both kernels alike)."""
    g = torch.Generator().manual_seed(0)
    sizes = (torch.randint(0, 12, (8,), generator=g) * 128).tolist()
    sizes[3] = 0
    m, n = 512, 1024
    a8, b8, scale_a, scale_b = operands(m, n, sum(sizes), seed=3, distribution=distribution)
    out = ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets_of(sizes))
    start = 0
    for group, size in enumerate(sizes):
        columns, blocks = slice(start, start + size), slice(start // 128, (start + size) // 128)
        if size:
            dense = fp8_block.gemm_fp8_block(
                a8[:, columns].contiguous(),
                b8[:, columns].contiguous(),
                scale_a[:, blocks].contiguous(),
                scale_b[:, blocks].contiguous(),
                torch.float32,
                variant=DENSE.name,
            )
            assert torch.equal(out[group], dense), f"group {group}"
        start += size
    if distribution == "normal":
        check_groups(out, a8, b8, scale_a, scale_b, sizes)


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_accumulates_into_out_in_place(out_dtype):
    sizes, m, n = [256, 0, 128], 200, 264
    a8, b8, scale_a, scale_b = operands(m, n, sum(sizes), seed=5, distribution="normal")  # within float16's range
    c = (torch.randn(len(sizes), m, n, device="cuda") * 8).to(out_dtype)
    out = c.clone()
    got = ext.k_grouped_gemm_fp8(
        a8, b8, scale_a, scale_b, offsets_of(sizes), out=out, accumulate=True, out_dtype=out_dtype
    )
    assert got is out
    check_groups(out, a8, b8, scale_a, scale_b, sizes, c=c)
    # without accumulate, out is overwritten
    ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets_of(sizes), out=out, out_dtype=out_dtype)
    check_groups(out, a8, b8, scale_a, scale_b, sizes)


@pytest.mark.parametrize(
    "ends, invalid",
    [([100, 228], [1]), ([256, 128, 384], [1]), ([128, 512], [1]), ([-128, 128], [0, 1]), ([100, 100, 228], [2])],
    ids=["unaligned-start", "backwards", "past-k", "negative", "empty-after-partial"],
)
def test_offsets_the_kernel_refuses_come_out_nan(ends, invalid):
    m, n, k = 136, 200, 384
    a8, b8, scale_a, scale_b = operands(m, n, k, seed=7)
    offsets = torch.tensor(ends, dtype=torch.int32, device="cuda")
    out = ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets)
    reference = fp8_block.k_grouped_reference(a8, b8, scale_a, scale_b, offsets)
    for g in range(len(ends)):
        assert out[g].isnan().all() == (g in invalid) == reference[g].isnan().all(), f"group {g}"
    for g in range(len(ends)):
        if g not in invalid:
            start = ends[g - 1] if g else 0
            check_group(out[g], a8, b8, scale_a, scale_b, start, ends[g] - start)


def test_scales_given_m_major_are_read_as_they_are():
    sizes, m, n = [128, 256], 136, 200
    a8, b8, scale_a, scale_b = operands(m, n, sum(sizes), seed=9)
    plain = ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets_of(sizes))
    m_major_a, m_major_b = scale_a.t().contiguous().t(), scale_b.t().contiguous().t()
    assert torch.equal(ext.k_grouped_gemm_fp8(a8, b8, m_major_a, m_major_b, offsets_of(sizes)), plain)


def test_per_row_and_per_tensor_scales():
    sizes, m, n, k = [128, 256], 64, 128, 384
    a = draw("normal", (m, k), 11)
    b = draw("normal", (n, k), 12)
    a8, scale_a = ext.quantize_fp8(a, granularity="row")
    b8, scale_b = ext.quantize_fp8(b, granularity="tensor")
    out = ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets_of(sizes))
    blocks = -(-k // 128)
    check_groups(out, a8, b8, scale_a.reshape(m, 1).expand(m, blocks), scale_b.reshape(1, 1).expand(n, blocks), sizes)


def test_offsets_change_between_graph_replays():
    m, n, k = 256, 384, 768
    a8, b8, scale_a, scale_b = operands(m, n, k, seed=13)
    offsets = offsets_of([256, 256, 256])
    out = torch.empty(3, m, n, device="cuda")
    ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets, out=out)  # built and loaded before capture
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets, out=out)
    torch.cuda.current_stream().wait_stream(stream)
    for sizes in ([0, 640, 128], [128, 0, 0]):
        offsets.copy_(offsets_of(sizes))
        graph.replay()
        torch.cuda.synchronize()
        check_groups(out, a8, b8, scale_a, scale_b, sizes)


def test_torch_compile_and_fake_kernel():
    sizes, m, n = [128, 0, 256], 128, 256
    a8, b8, scale_a, scale_b = operands(m, n, sum(sizes), seed=15)
    offsets = offsets_of(sizes)

    def weight_grads(a8, scale_a, offsets):
        out = torch.ones(len(sizes), m, n, device="cuda")
        return ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets, out=out, accumulate=True) * 2

    compiled = torch.compile(weight_grads, fullgraph=True)
    assert torch.equal(compiled(a8, scale_a, offsets), weight_grads(a8, scale_a, offsets))

    def accumulate(a8, scale_a, offsets, grads):  # gradient accumulation into a buffer the graph is handed
        ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets, out=grads, accumulate=True)

    grads = torch.randn(len(sizes), m, n, device="cuda")
    expected, got = grads.clone(), grads.clone()
    accumulate(a8, scale_a, offsets, expected)
    torch.compile(accumulate, fullgraph=True)(a8, scale_a, offsets, got)
    assert torch.equal(got, expected) and not torch.equal(got, grads)
    out = torch.empty(len(sizes), m, n, device="cuda")
    torch.library.opcheck(
        torch.ops.cutlass_ext.k_grouped_gemm_fp8_block,
        (a8, b8, scale_a.t().contiguous(), scale_b.t().contiguous(), offsets, out, False, VARIANTS[0].name),
        test_utils=("test_faketensor",),  # test_schema multiplies the inputs: no FP8 mul on CUDA
    )


def test_bad_input_is_refused_with_the_argument_named():
    sizes, m, n = [128, 128], 64, 128
    a8, b8, scale_a, scale_b = operands(m, n, 256, seed=17)
    offsets = offsets_of(sizes)
    with pytest.raises(ValueError, match=r"offsets must be a \(G,\) int32 tensor"):
        ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets.long())
    with pytest.raises(ValueError, match="offsets must be on cuda"):
        ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets.cpu())
    with pytest.raises(ValueError, match="accumulate=True adds to out"):
        ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets, accumulate=True)
    with pytest.raises(ValueError, match=r"out must be a \(2, 64, 128\) tensor of torch.float32"):
        ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets, out=torch.empty(2, 64, 64, device="cuda"))
    with pytest.raises(ValueError, match="a and b must agree on K"):
        ext.k_grouped_gemm_fp8(a8, b8[:, :128], scale_a, scale_b, offsets)
    with pytest.raises(ValueError, match="scale_a has shape"):
        ext.k_grouped_gemm_fp8(a8, b8, scale_a[:1], scale_b, offsets)
    with pytest.raises(ValueError, match="does not fit this call"):
        ext.k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets, variant=VARIANTS[1].name)
    with pytest.raises(ValueError, match="out must start on a 16-byte boundary"):
        ext.k_grouped_gemm_fp8(
            a8, b8, scale_a, scale_b, offsets, out=torch.empty(2 * 64 * 128 + 1, device="cuda")[1:].view(2, 64, 128)
        )
    # a K-grouped kernel named for a dense product: refused, not looked up in a library that lacks it
    with pytest.raises(ValueError, match="not a K-grouped kernel"):
        fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, torch.float32, variant=VARIANTS[0].name)
