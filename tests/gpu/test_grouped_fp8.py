"""Grouped block-scaled FP8 GEMM (mixture-of-experts) on a Hopper GPU: contiguous and masked layouts against the
FP64 product of the dequantized inputs, odd and empty groups, every scale form, output types, torch.compile, CUDA
graphs whose group sizes change between replays, and bad input."""

from pathlib import Path

import pytest
import torch
import yaml

import cutlass_ext as ext
from cutlass_ext import fp8_block
from cutlass_ext.build import build_libraries
from cutlass_ext.fp8_block import Fp8BlockConfig, space

from .test_fp8_block import check_close, draw

pytestmark = pytest.mark.gpu

GROUPED_VARIANTS = [
    Fp8BlockConfig(grouped=True),
    Fp8BlockConfig(grouped=True, scale_n=1),
    Fp8BlockConfig(grouped=True, out_dtype="fp16"),
    Fp8BlockConfig(grouped=True, out_dtype="fp32"),
    Fp8BlockConfig(grouped=True, tile=(64, 128, 128), schedule="pingpong"),
]
# every grouped kernel the sweep measures (and the shipped table may dispatch to): tiles and TMA multicast clusters
_SPACE = Path(__file__).resolve().parents[2] / "configs" / "sm90_fp8_grouped.yaml"
SWEPT_GROUPED = space.load_space(_SPACE, yaml.safe_load(_SPACE.read_text()))


@pytest.fixture(scope="module", autouse=True)
def built():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("block-scaled FP8 kernels run on Hopper (sm90)")
    configs = list(dict.fromkeys([*GROUPED_VARIANTS, *SWEPT_GROUPED]))
    failed = [r for r in build_libraries([(c,) for c in configs], "90a") if r.library is None]
    assert not failed, failed[0].error


def experts(groups, n, k, weight_block, seed):
    w = draw("normal", (groups, n, k), seed)
    return ext.quantize_fp8(w, granularity="block", block=weight_block)


def offsets_of(sizes):
    return torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()


def check_contiguous(out, a8, b8, scale_a, scale_b, scale_n, sizes, check=None):
    """Each non-empty group's rows by `check(out_rows, a8_rows, b8_g, scale_a_rows, scale_b_g)` (default: within
    the FP64 bound)."""
    check = check or (lambda out, a8, b8, scale_a, scale_b: check_close(out, a8, b8, scale_a, scale_b, scale_n))
    start = 0
    for g, size in enumerate(sizes):
        if size:
            rows = slice(start, start + size)
            check(out[rows], a8[rows], b8[g], scale_a[rows], scale_b[g])
        start += size


SIZES = [[0, 1, 37, 128, 129, 300], [5], [0, 0, 0], [200, 0, 0, 64, 0, 1, 0, 255]]


@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "-".join(map(str, s)))
@pytest.mark.parametrize("n, k", [(256, 512), (384, 528)])
@pytest.mark.parametrize("weight_block", [(128, 128), (1, 128)])
def test_contiguous_layout(sizes, n, k, weight_block):
    m = sum(sizes)
    a8, scale_a = ext.quantize_fp8(draw("wide", (m, k), m + k), granularity="block", block=(1, 128))
    b8, scale_b = experts(len(sizes), n, k, weight_block, seed=n)
    out = ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets=offsets_of(sizes))
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    check_contiguous(out, a8, b8, scale_a, scale_b, weight_block[0], sizes)


def test_random_group_sizes_at_moe_shapes():
    g = torch.Generator().manual_seed(0)
    sizes = torch.randint(0, 300, (16,), generator=g)
    sizes[torch.randint(0, 16, (3,), generator=g)] = 0
    sizes = sizes.tolist()
    n, k = 512, 2048
    a8, scale_a = ext.quantize_fp8(draw("outliers", (sum(sizes), k), 1), granularity="block", block=(1, 128))
    b8, scale_b = experts(16, n, k, (128, 128), seed=2)
    out = ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets=offsets_of(sizes))
    check_contiguous(out, a8, b8, scale_a, scale_b, 128, sizes)


@pytest.mark.parametrize("counts", [[0, 1, 96, 50, 97, 13], [96] * 3, [0] * 4])
def test_masked_layout(counts):
    groups, capacity, n, k = len(counts), 96, 256, 640
    a8, scale_a = ext.quantize_fp8(draw("wide", (groups, capacity, k), 3), granularity="block", block=(1, 128))
    b8, scale_b = experts(groups, n, k, (128, 128), seed=4)
    masked_counts = torch.tensor(counts, dtype=torch.int32, device="cuda")
    out = ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, masked_counts=masked_counts)
    assert out.shape == (groups, capacity, n)
    for g, count in enumerate(counts):
        rows = min(count, capacity)  # counts past the capacity are clamped to it
        if rows:
            check_close(out[g, :rows], a8[g, :rows], b8[g], scale_a[g, :rows], scale_b[g], 128)


@pytest.mark.parametrize("variant", [c.name for c in SWEPT_GROUPED])
def test_every_swept_variant_on_uneven_empty_and_masked_experts(variant):
    """The sweep gates its variants on equal loads; here each one on uneven and empty experts, both layouts."""
    sizes, n, k = [0, 1, 200, 129, 0, 64], 384, 640
    a8, scale_a = ext.quantize_fp8(draw("wide", (sum(sizes), k), 21), granularity="block", block=(1, 128))
    b8, scale_b = experts(len(sizes), n, k, (128, 128), seed=22)
    out = ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets=offsets_of(sizes), variant=variant)
    check_contiguous(out, a8, b8, scale_a, scale_b, 128, sizes)
    capacity = 200
    stacked = torch.zeros(len(sizes), capacity, k, device="cuda").to(torch.float8_e4m3fn)
    stacked_scale = torch.ones(len(sizes), capacity, scale_a.shape[1], device="cuda")
    start = 0
    for g, size in enumerate(sizes):
        stacked[g, :size], stacked_scale[g, :size] = a8[start : start + size], scale_a[start : start + size]
        start += size
    counts = torch.tensor(sizes, dtype=torch.int32, device="cuda")
    masked = ext.grouped_gemm_fp8(stacked, b8, stacked_scale, scale_b, masked_counts=counts, variant=variant)
    start = 0
    for g, size in enumerate(sizes):
        assert torch.equal(masked[g, :size], out[start : start + size]), f"expert {g}: masked != contiguous"
        start += size


def test_masked_layout_with_row_and_tensor_scales():
    groups, capacity, n, k = 3, 64, 256, 384
    a8 = draw("normal", (groups, capacity, k), 19).to(torch.float8_e4m3fn)
    b8 = draw("normal", (groups, n, k), 20).to(torch.float8_e4m3fn)
    a_rows = torch.rand(groups, capacity, device="cuda") + 0.5  # one scale per token
    b_tensor = torch.rand(groups, device="cuda") + 0.5  # one per expert
    counts = [64, 0, 17]
    masked_counts = torch.tensor(counts, dtype=torch.int32, device="cuda")
    out = ext.grouped_gemm_fp8(a8, b8, a_rows, b_tensor, masked_counts=masked_counts)
    for g, count in enumerate(counts):
        if count:
            expanded_a = a_rows[g, :count, None].expand(count, 3)
            expanded_b = b_tensor[g].reshape(1, 1).expand(2, 3)
            check_close(out[g, :count], a8[g, :count], b8[g], expanded_a, expanded_b, 128)


@pytest.mark.parametrize("form", ["row-tensor", "tensor-row", "block-row"])
def test_per_row_and_per_tensor_scales(form):
    sizes, n, k = [3, 0, 70, 140], 256, 384
    m, groups, blocks = sum(sizes), len(sizes), 3
    a8 = draw("normal", (m, k), 5).to(torch.float8_e4m3fn)
    b8 = draw("normal", (groups, n, k), 6).to(torch.float8_e4m3fn)
    a_rows = torch.rand(m, device="cuda") + 0.5
    b_rows = torch.rand(groups, n, device="cuda") + 0.5
    b_tensor = torch.rand(groups, device="cuda") + 0.5
    a_blocks = torch.rand(m, blocks, device="cuda") + 0.5
    scale_a, scale_b = {"row-tensor": (a_rows, b_tensor), "tensor-row": (2.0, b_rows), "block-row": (a_blocks, b_rows)}[
        form
    ]
    out = ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets=offsets_of(sizes))
    expanded_a = fp8_block.api.activation_scales("scale_a", scale_a, m, k, a8.device)
    if form == "row-tensor":
        expanded_b, scale_n = b_tensor[:, None, None].expand(groups, 2, blocks), 128
    else:
        expanded_b, scale_n = b_rows[:, :, None].expand(groups, n, blocks), 1
    check_contiguous(out, a8, b8, expanded_a, expanded_b, scale_n, sizes)


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.float32])
def test_output_types(out_dtype):
    sizes, n, k = [17, 0, 130], 256, 512
    a8, scale_a = ext.quantize_fp8(draw("normal", (sum(sizes), k), 7), granularity="block", block=(1, 128))
    b8, scale_b = experts(3, n, k, (128, 128), seed=8)
    out = ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets=offsets_of(sizes), out_dtype=out_dtype)
    assert out.dtype == out_dtype
    check_contiguous(out, a8, b8, scale_a, scale_b, 128, sizes)


def test_pingpong_variant_and_rows_past_the_last_offset():
    sizes, n, k = [10, 70, 0, 33], 384, 1024
    m = sum(sizes) + 20  # 20 trailing rows no group owns
    a8, scale_a = ext.quantize_fp8(draw("wide", (m, k), 9), granularity="block", block=(1, 128))
    b8, scale_b = experts(4, n, k, (128, 128), seed=10)
    variant = GROUPED_VARIANTS[-1].name
    out = ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets=offsets_of(sizes), variant=variant)
    check_contiguous(out, a8, b8, scale_a, scale_b, 128, sizes)


def test_group_sizes_change_between_graph_replays():
    groups, capacity, n, k = 4, 128, 256, 1024
    a8, scale_a = ext.quantize_fp8(draw("normal", (groups, capacity, k), 11), granularity="block", block=(1, 128))
    b8, scale_b = experts(groups, n, k, (128, 128), seed=12)
    counts = torch.tensor([128, 5, 0, 77], dtype=torch.int32, device="cuda")
    ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, masked_counts=counts)  # built and loaded before capture
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            out = ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, masked_counts=counts)
    torch.cuda.current_stream().wait_stream(stream)
    for new_counts in ([1, 128, 64, 0], [0, 0, 3, 128]):
        counts.copy_(torch.tensor(new_counts, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        for g, count in enumerate(new_counts):
            if count:
                check_close(out[g, :count], a8[g, :count], b8[g], scale_a[g, :count], scale_b[g], 128)


def test_contiguous_offsets_change_between_graph_replays():
    n, k, m = 256, 512, 300
    a8, scale_a = ext.quantize_fp8(draw("normal", (m, k), 13), granularity="block", block=(1, 128))
    b8, scale_b = experts(3, n, k, (128, 128), seed=14)
    offsets = offsets_of([100, 100, 100])
    ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets=offsets)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        out = ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets=offsets)
    torch.cuda.current_stream().wait_stream(stream)
    sizes = [0, 299, 1]
    offsets.copy_(offsets_of(sizes))
    graph.replay()
    torch.cuda.synchronize()
    check_contiguous(out, a8, b8, scale_a, scale_b, 128, sizes)


def test_torch_compile_and_fake_kernel():
    sizes, n, k = [40, 0, 88], 256, 512
    a8, scale_a = ext.quantize_fp8(draw("normal", (sum(sizes), k), 15), granularity="block", block=(1, 128))
    b8, scale_b = experts(3, n, k, (128, 128), seed=16)
    offsets = offsets_of(sizes)

    def moe(a8, scale_a, offsets):
        return ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets=offsets).float().sum(-1)

    assert torch.equal(torch.compile(moe, fullgraph=True)(a8, scale_a, offsets), moe(a8, scale_a, offsets))
    variant = GROUPED_VARIANTS[0].name
    torch.library.opcheck(
        torch.ops.cutlass_ext.grouped_gemm_fp8_block,
        (a8, b8, scale_a, scale_b, offsets, None, torch.bfloat16, variant),
        test_utils=("test_faketensor",),
    )


def test_bad_input_is_refused_with_the_argument_named():
    sizes, n, k = [4, 4], 256, 256
    a8, scale_a = ext.quantize_fp8(draw("normal", (8, k), 17), granularity="block", block=(1, 128))
    b8, scale_b = experts(2, n, k, (128, 128), seed=18)
    with pytest.raises(ValueError, match=r"offsets must be a \(2,\) int32 tensor"):
        ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets=offsets_of(sizes).long())
    with pytest.raises(ValueError, match="offsets must be on cuda"):
        ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets=offsets_of(sizes).cpu())
    with pytest.raises(ValueError, match="a must be 3-D"):
        ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b, masked_counts=offsets_of(sizes))
    with pytest.raises(ValueError, match=r"a \(G, C, K\) must have G=2"):
        ext.grouped_gemm_fp8(a8.reshape(4, 2, k), b8, scale_a, scale_b, masked_counts=offsets_of(sizes))
    with pytest.raises(ValueError, match="scale_b must hold one entry per expert"):
        ext.grouped_gemm_fp8(a8, b8, scale_a, scale_b[:1], offsets=offsets_of(sizes))
