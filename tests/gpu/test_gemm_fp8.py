"""gemm_fp8 (CUTLASS 3.x, sm90a) against an FP64 product of the dequantized inputs, beside torch._scaled_mm
(cuBLAS FP8) with the same scales and accumulation: relres within 1.1x of it."""

import dataclasses
import functools

import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import numerics, ops, registry
from cutlass_ext.families.sm90_fp8.config import DEFAULT_FP8, FP8_DTYPES, OUT_DTYPES, Fp8Config

from . import early_writer
from .helpers import poison_allocator

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="needs a Hopper GPU"
)
FACTOR = 1.1
PAIRS = [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2")]
# the kernel shapes the tests name directly: each scheduler and schedule
EXPLICIT = [
    dataclasses.replace(DEFAULT_FP8, scheduler="splitk", splits=4),
    dataclasses.replace(DEFAULT_FP8, scheduler="persistent", cluster=(2, 1)),
    dataclasses.replace(DEFAULT_FP8, tile=(64, 128, 128), schedule="pingpong", scheduler="persistent"),
    dataclasses.replace(DEFAULT_FP8, tile=(64, 128, 128), schedule="pingpong", scheduler="persistent", accum="fast"),
]
# swapped operands (Dᵀ = B·Aᵀ): both schedules, split-K, a mixed input pair and every output type
SWAPPED = [
    Fp8Config.from_name("fp8_e4m3e4m3_bf16_64x16x256_c1x1_pp_fast_swap"),
    Fp8Config.from_name("fp8_e5m2e4m3_fp16_64x16x128_c1x1_pp_promoted_swap"),
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_128x32x128_c1x1_coop_promoted_splitk2_swap"),
]
# the L2 prefetch ahead of the programmatic-launch wait, swapped (weights are the kernel's A) and not (its B)
PREFETCHING = [
    Fp8Config.from_name("fp8_e4m3e4m3_bf16_64x16x256_c1x1_pp_fast_swap_l2pf8"),
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_128x128x128_c2x1_coop_promoted_l2pf4"),
]
# promotion overlapped with the next k-block's wgmmas (two partial fragments, k-blocks alternating between them):
# both schedules, a cluster, swapped, the schedulers that hand a CTA part of K (split-K, stream-K), and the widest
# tile the register rule allows (128x144: one n = 144 wgmma, three fragments of 72 registers)
OVERLAPPED = [
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_128x128x128_c2x1_coop_promoted"),
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_128x144x128_c1x1_coop_promoted"),
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_64x128x128_c1x1_pp_promoted"),
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_64x16x128_c1x1_pp_promoted_swap"),
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_128x32x128_c1x1_coop_promoted_splitk2_swap"),
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_128x128x128_c1x1_coop_promoted_streamk"),
]
# k-blocks 256 and 512 deep, promoted in slices of 128 (beside each, in OVERLAPPED or built for the test below, the
# same tile with 128-deep k-blocks)
SLICED = [
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_64x16x256_c1x1_pp_promoted_swap"),
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_64x16x512_c2x1_pp_promoted_swap_l2pf8"),
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_128x128x256_c2x1_coop_promoted"),
]
# the tile order named (down M, along N; swapped, the kernel's own M and N are the output's N and M), beside the
# same kernel in CUTLASS's order
RASTERED = [
    Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x128x128_c2x1_coop_promoted_w4_rm"),
    Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x128x128_c2x1_coop_promoted_w4_rn"),
    Fp8Config.from_name("fp8_e4m3e4m3_bf16_64x16x256_c1x1_pp_fast_rn_swap"),
]
# tiles claimed from a counter as CTAs come for them (kernels/sm90_dynamic_tile_scheduler.hpp), beside the same
# kernel under CUTLASS's fixed stride: both accumulations, a swizzled band along N, the output types
DYNAMIC = [
    Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x128x128_c1x1_coop_promoted_dynamic_w4"),
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_128x256x128_c1x1_coop_fast_dynamic_w8_rn"),
]
# promotion every k-block with the two warpgroups taking turns at the Tensor Core (two accumulator fragments:
# kernels/sm90_fp8_turn_taking_promotion.hpp): on a tile that the three-fragment mainloop also runs, and on the
# wider tiles it lets promote, under the fixed stride (in a cluster), the dynamic scheduler and stream-K, up to the
# register rule's limit (128x224)
TURNS = [
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_128x144x128_c1x1_coop_promoted_turns"),
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_128x208x128_c2x1_coop_promoted_turns_w4"),
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_128x192x128_c1x1_coop_promoted_turns_dynamic_w4"),
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_128x192x128_c1x1_coop_promoted_turns_streamk"),
    Fp8Config.from_name("fp8_e4m3e4m3_fp32_128x224x128_c1x1_coop_promoted_turns_w4"),
]
# D through the tile's last mainloop stage (kernels/sm90_stage_epilogue.hpp), beside the same kernels with CUTLASS's
# epilogue: a cluster with the L2 prefetch, fp16 output from a mixed input pair, the 128x64 tile
STAGE = [
    Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x128x128_c2x1_coop_promoted_l2pf8_se"),
    Fp8Config.from_name("fp8_e5m2e4m3_fp16_128x128x128_c1x1_coop_promoted_se"),
    Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x64x128_c1x1_coop_promoted_w4_se"),
]
# the same code writing D through a buffer of its own: the prefill tile dispatch picks at 4096 x 8192 x 8192, fp16
# from a mixed pair with the L2 prefetch, the 128x64 tile
BUFFER = [
    Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x128x128_c1x1_coop_promoted_w8_be"),
    Fp8Config.from_name("fp8_e5m2e4m3_fp16_128x128x128_c2x1_coop_promoted_l2pf8_be"),
    Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x64x128_c1x1_coop_promoted_w4_be"),
]
# each k-block's weights requested before its activations (kernels/sm90_weights_load_mainloop.hpp), beside the same
# kernels in CUTLASS's order: the tuned 176-column ping-pong fast tile in a 2-CTA cluster, the L2-prefetching
# stage-epilogue tile, fp32 output from a mixed input pair
WEIGHTS_FIRST = [
    Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x176x128_c2x1_pp_fast_wf"),
    Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x128x128_c2x1_coop_promoted_l2pf8_se_wf"),
    Fp8Config.from_name("fp8_e5m2e4m3_fp32_128x128x128_c1x1_coop_promoted_w4_wf"),
]
# promoted every 512 k elements (a 256-deep k-block, every 2nd): the span the filter rule removes
LONG_SPAN = Fp8Config.from_name("fp8_e4m3e4m3_fp32_64x128x256_c1x1_pp_promoted_p2")


@pytest.fixture(scope="module", autouse=True)
def defaults_only(tmp_path_factory):
    """Dispatch from the defaults (an empty tuned table) and build every variant the tests use in one go."""
    empty = tmp_path_factory.mktemp("tuned") / "empty.csv"
    empty.write_text("mode,m,n,k,batch,name,tflops,gpu,date\n")
    ext.set_tuned_table(empty)
    combos = {(a, b, "bf16", "promoted") for a, b in PAIRS}
    combos |= {("e4m3", "e4m3", out, accum) for out in OUT_DTYPES for accum in ("promoted", "fast")}
    configs = [dataclasses.replace(DEFAULT_FP8, accum=accum).with_dtypes(a, b, out) for a, b, out, accum in combos]
    prefetch_bases = [dataclasses.replace(c, l2_prefetch=0) for c in PREFETCHING]
    raster_bases = [dataclasses.replace(c, raster="auto") for c in RASTERED]
    sliced_bases = [with_128_deep_k_blocks(c) for c in SLICED]
    named = EXPLICIT + SWAPPED + OVERLAPPED + SLICED + sliced_bases + [LONG_SPAN]
    named += PREFETCHING + prefetch_bases + RASTERED + raster_bases
    named += DYNAMIC + [dataclasses.replace(c, scheduler="persistent") for c in DYNAMIC] + TURNS
    named += STAGE + [dataclasses.replace(c, stage_epilogue=False) for c in STAGE]
    named += BUFFER + [dataclasses.replace(c, buffer_epilogue=False) for c in BUFFER]
    named += WEIGHTS_FIRST + [dataclasses.replace(c, weights_first=False) for c in WEIGHTS_FIRST]
    registry.ensure_registered(configs + named, torch.device("cuda"))
    yield
    ext.set_tuned_table(None)


def draw(kind: str, rows: int, columns: int, generator) -> torch.Tensor:
    if kind == "normal":
        return torch.randn(rows, columns, generator=generator, device="cuda")
    if kind == "uniform":
        return torch.rand(rows, columns, generator=generator, device="cuda") * 2 - 1
    # a few large activations per row, as LLM activations have
    x = torch.randn(rows, columns, generator=generator, device="cuda")
    spikes = torch.rand(rows, columns, generator=generator, device="cuda") < 0.01
    return torch.where(spikes, x * 50, x)


def fp8_operands(m, n, k, a_dtype="e4m3", b_dtype="e4m3", granularity="tensor", kind="normal", seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed * 7919 + m * 31 + n * 17 + k)
    a, scale_a = ext.quantize_fp8(draw(kind, m, k, generator), FP8_DTYPES[a_dtype], granularity)
    b, scale_b = ext.quantize_fp8(draw(kind, n, k, generator), FP8_DTYPES[b_dtype], granularity)
    return a, b, scale_a, scale_b


def _scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, accum):
    row_scales = scale_a.numel() > 1 or scale_b.numel() > 1
    return torch._scaled_mm(
        a,
        b.t(),
        scale_a=scale_a.reshape(-1, 1) if row_scales else scale_a.reshape(()),
        scale_b=scale_b.reshape(1, -1) if row_scales else scale_b.reshape(()),
        bias=bias,
        out_dtype=out_dtype,
        use_fast_accum=accum == "fast",
    )


def peer_relres(a, b, scale_a, scale_b, bias, out_dtype, accum, reference):
    """torch._scaled_mm's relres with the same scales and accumulation. Where cuBLAS lacks the combination (row-wise
    scales with FP16 or FP32 output): cuBLAS FP8 at FP32 output with unit scales, the same Tensor-Core sums and
    accumulation, then the scales and bias applied in FP32 and the result rounded to out_dtype. Where cuBLAS has no
    FP8 GEMM for the input pair either: cuBLAS SGEMM on the dequantized inputs rounded to out_dtype, a bound for
    promoted accumulation at 16-bit output (the output's rounding dominates); fast accumulation and FP32 output have
    no such bound there, and the test is skipped, saying so."""
    try:
        c = _scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, accum)
    except (RuntimeError, ValueError):  # torch raises either for combinations cuBLAS lacks
        c = None
    if c is None:
        one = torch.ones((), device=a.device)
        try:
            c = _scaled_mm(a, b, one, one, None, torch.float32, accum)
        except (RuntimeError, ValueError):
            c = None
        if c is not None:
            c = c * scale_a.reshape(-1, 1) * scale_b.reshape(1, -1) + (0 if bias is None else bias.float())
            c = c.to(out_dtype)
    if c is None:
        if accum == "fast" or out_dtype == torch.float32:
            pytest.skip("no cuBLAS FP8 GEMM for this input pair to hold this accumulation and output to")
        dequantized_a = a.float() * scale_a.reshape(-1, 1)
        dequantized_b = b.float() * scale_b.reshape(-1, 1)
        previous = torch.backends.cuda.matmul.fp32_precision
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        try:
            c = dequantized_a @ dequantized_b.T
        finally:
            torch.backends.cuda.matmul.fp32_precision = previous
        c = (c + (0 if bias is None else bias.float())).to(out_dtype)
    return numerics.relative_residual(c, reference)


def check(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, accum="promoted"):
    reference = numerics.dequantized_product(a, b, scale_a, scale_b, bias)
    poison_allocator(a.shape[0], b.shape[0])
    c = ext.gemm_fp8(a, b, scale_a, scale_b, out_dtype=out_dtype, bias=bias, accum=accum)
    assert c.dtype == out_dtype and c.shape == (a.shape[0], b.shape[0])
    assert torch.isfinite(c).all(), "unwritten (NaN-poisoned) or overflowed outputs"
    ours = numerics.relative_residual(c, reference)
    peer = peer_relres(a, b, scale_a, scale_b, bias, out_dtype, accum, reference)
    assert ours <= FACTOR * peer, f"relres {ours:.3g} vs peer {peer:.3g}"
    return ours


@pytest.mark.parametrize("kind", ["normal", "uniform", "outliers"])
@pytest.mark.parametrize("accum", ["promoted", "fast"])
@pytest.mark.parametrize("out", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("granularity", ["tensor", "row"])
def test_matches_scaled_mm(granularity, out, accum, kind):
    a, b, scale_a, scale_b = fp8_operands(384, 512, 4096, granularity=granularity, kind=kind)
    check(a, b, scale_a, scale_b, OUT_DTYPES[out], accum=accum)


@pytest.mark.parametrize("a_dtype, b_dtype", PAIRS)
@pytest.mark.parametrize("granularity", ["tensor", "row"])
def test_every_input_pair(a_dtype, b_dtype, granularity):
    a, b, scale_a, scale_b = fp8_operands(256, 256, 2048, a_dtype, b_dtype, granularity)
    check(a, b, scale_a, scale_b)


@pytest.mark.parametrize("m", [1, 3, 17])
@pytest.mark.parametrize("n, k", [(24, 48), (264, 16), (8200, 4112)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_odd_shapes_at_minimum_alignment(m, n, k, with_bias):
    a, b, scale_a, scale_b = fp8_operands(m, n, k, granularity="row", seed=m)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16) if with_bias else None
    check(a, b, scale_a, scale_b, bias=bias)


def test_bias_is_added_after_scaling():
    a, b, scale_a, scale_b = fp8_operands(64, 128, 256)
    bias = torch.linspace(-100, 100, 128, device="cuda")
    with_bias = ext.gemm_fp8(a, b, scale_a, scale_b, bias=bias, out_dtype=torch.float32)
    without = ext.gemm_fp8(a, b, scale_a, scale_b, out_dtype=torch.float32)
    torch.testing.assert_close(with_bias - without, bias.expand(64, 128), rtol=0, atol=2e-5 * 100)


# Fast accumulation sums all of K in the Tensor Core's accumulator. At decode M, cuBLAS splits K (shorter sums);
# a kernel that does not is up to 1.4x less accurate at K=8192 (measured 2026-11-22), and the sweep's gate keeps
# it out of the tuned table there. So the fast ping-pong kernel is held to the bound where it is used: larger M.
SCHEDULER_CASES = [(c, m) for c in EXPLICIT for m in (1, 16, 200) if c.accum == "promoted" or m == 200]


@pytest.mark.parametrize("config, m", SCHEDULER_CASES, ids=lambda v: v.name if hasattr(v, "name") else str(v))
def test_schedulers_and_schedules(config, m):
    """Split-K, clusters and ping-pong, named directly: the decode shapes they exist for, and a larger M."""
    a, b, scale_a, scale_b = fp8_operands(m, 1024, 8192, seed=3)
    reference = numerics.dequantized_product(a, b, scale_a, scale_b)
    poison_allocator(m, 1024)
    c = ops.gemm_fp8(a, b, scale_a.reshape(1), scale_b.reshape(1), None, torch.bfloat16, [config.name])
    ours = numerics.relative_residual(c, reference)
    peer = peer_relres(a, b, scale_a, scale_b, None, torch.bfloat16, config.accum, reference)
    assert ours <= FACTOR * peer, f"{config.name}: relres {ours:.3g} vs torch._scaled_mm {peer:.3g}"


@pytest.mark.parametrize("config", SWAPPED, ids=lambda c: c.name)
@pytest.mark.parametrize("m", [1, 3, 17, 40])
@pytest.mark.parametrize("granularity", ["tensor", "row"])
def test_swapped_operands(config, m, granularity):
    """Dᵀ = B·Aᵀ written into row-major D: scales, bias and the input pair follow the swap; N not a whole
    number of 64-row weight tiles (but a multiple of 16, so cuBLAS FP8 is the peer), M not of token tiles."""
    n, k = 272, 4112
    a, b, scale_a, scale_b = fp8_operands(m, n, k, config.a_dtype, config.b_dtype, granularity, seed=m)
    out_dtype = OUT_DTYPES[config.out_dtype]
    bias = (torch.randn(n, device="cuda") * 4).to(out_dtype)
    reference = numerics.dequantized_product(a, b, scale_a, scale_b, bias)
    poison_allocator(m, n)
    c = ops.gemm_fp8(a, b, scale_a.reshape(-1), scale_b.reshape(-1), bias, out_dtype, [config.name])
    assert torch.isfinite(c).all(), "unwritten (NaN-poisoned) outputs"
    ours = numerics.relative_residual(c, reference)
    peer = peer_relres(a, b, scale_a, scale_b, bias, out_dtype, config.accum, reference)
    assert ours <= FACTOR * peer, f"{config.name}: relres {ours:.3g} vs peer {peer:.3g}"


def test_cuda_graph_capture_and_replay():
    a, b, scale_a, scale_b = fp8_operands(16, 1024, 2048, granularity="row")
    expected = ext.gemm_fp8(a, b, scale_a, scale_b)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        ext.gemm_fp8(a, b, scale_a, scale_b)  # warm: everything built and loaded before capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ext.gemm_fp8(a, b, scale_a, scale_b)
    fresh = fp8_operands(16, 1024, 2048, granularity="row", seed=9)
    for target, source in zip((a, b, scale_a, scale_b), fresh):
        target.copy_(source)
    graph.replay()
    torch.cuda.synchronize()
    assert not torch.equal(captured, expected), "replay did not read the new inputs"
    torch.testing.assert_close(captured, ext.gemm_fp8(*fresh), rtol=0, atol=0)


@pytest.mark.parametrize("config", PREFETCHING, ids=lambda c: c.name)
def test_l2_prefetch_reads_the_weights_the_kernel_before_wrote(config):
    """The prefetch runs before the wait on the kernel before, which here writes the very weights prefetched:
    replayed from a graph, each product must equal (bit for bit) the same kernel's without the prefetch."""
    m, n, k, steps = 4, 1024, 4096, 4
    out_dtype = OUT_DTYPES[config.out_dtype]
    a, b, scale_a, scale_b = fp8_operands(m, n, k, granularity="row")
    weights = [fp8_operands(m, n, k, granularity="row", seed=20 + i)[1] for i in range(steps)]
    run = functools.partial(
        ops.gemm_fp8,
        a=a,
        scale_a=scale_a.reshape(-1),
        scale_b=scale_b.reshape(-1),
        bias=None,
        out_dtype=out_dtype,
        variants=[config.name],
    )
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        run(b=b)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        products = []
        for w in weights:
            b.copy_(w)  # the kernel just before the GEMM writes its weights
            products.append(run(b=b))
    graph.replay()
    torch.cuda.synchronize()
    base = dataclasses.replace(config, l2_prefetch=0).name
    for w, product in zip(weights, products):
        expected = ops.gemm_fp8(a, w, scale_a.reshape(-1), scale_b.reshape(-1), None, out_dtype, [base])
        assert torch.equal(product, expected)


@pytest.mark.parametrize("config", PREFETCHING, ids=lambda c: c.name)
def test_programmatic_launch_waits_for_a_writer_that_lets_it_start(config):
    """Persistent kernels launch programmatically. A kernel lets the GEMM launch at its start, then waits 50 µs
    before it writes its operands, both row-scale vectors and the bias: the GEMM starts inside that window and must
    still read the new values, bit for bit the same variant's product of them called alone. The control (a kernel
    launched the same way that reads without waiting) must see old bytes there, or the window is not there."""
    m, n, k = 40, 1024, 4096
    out_dtype = OUT_DTYPES[config.out_dtype]

    def operands(seed):
        a, b, scale_a, scale_b = fp8_operands(m, n, k, granularity="row", seed=seed)
        bias = torch.randn(n, generator=torch.Generator(device="cuda").manual_seed(seed), device="cuda")
        return [a, b, scale_a.reshape(-1), scale_b.reshape(-1), bias.to(out_dtype)]

    def run(a, b, scale_a, scale_b, bias):
        return ops.gemm_fp8(a, b, scale_a, scale_b, bias, out_dtype, [config.name])

    new = operands(seed=2)
    product, window = early_writer.run_after_late_writer(run, operands(seed=1), new)
    assert window, "the reader launched early saw only new bytes"
    assert torch.equal(product, run(*new))


@pytest.mark.parametrize("config", RASTERED, ids=lambda c: c.name)
def test_tile_order_changes_no_output(config):
    """Each output tile is one CTA's whole sum whatever order the tiles run in: bit for bit the product of the same
    kernel in CUTLASS's order, on a grid of tiles that is not whole in either side (nor in clusters or swizzle
    bands) and is more than one wave of CTAs."""
    m, n, k = (1100, 2200, 1024) if not config.swap_ab else (40, 8208, 1024)  # 9 x 18 tiles; swapped 129 x 3
    a, b, scale_a, scale_b = fp8_operands(m, n, k, granularity="row", seed=11)
    run = functools.partial(ops.gemm_fp8, a, b, scale_a.reshape(-1), scale_b.reshape(-1), None, torch.bfloat16)
    poison_allocator(m, n)
    c = run([config.name])
    assert torch.isfinite(c).all(), "unwritten (NaN-poisoned) outputs"
    poison_allocator(m, n)
    assert torch.equal(c, run([dataclasses.replace(config, raster="auto").name]))
    reference = numerics.dequantized_product(a, b, scale_a, scale_b)
    peer = peer_relres(a, b, scale_a, scale_b, None, torch.bfloat16, config.accum, reference)
    assert numerics.relative_residual(c, reference) <= FACTOR * peer


def assert_twin_output(config, twin, m, n, k, granularity, with_bias, seed):
    """`config` writes every output (poisoned before each call), bit for bit what `twin` (the same kernel without
    one knob) writes, within the bound of cuBLAS's relres with the same accumulation (not checked for unsplit fast
    accumulation at decode, which is outside it: test_fast_accumulation_without_split_k_...)."""
    a, b, scale_a, scale_b = fp8_operands(m, n, k, config.a_dtype, config.b_dtype, granularity, seed=seed)
    out_dtype = OUT_DTYPES[config.out_dtype]
    bias = (torch.randn(n, device="cuda") * 4).to(out_dtype) if with_bias else None
    run = functools.partial(ops.gemm_fp8, a, b, scale_a.reshape(-1), scale_b.reshape(-1), bias, out_dtype)
    poison_allocator(m, n)
    c = run([config.name])
    assert torch.isfinite(c).all(), "unwritten (NaN-poisoned) outputs"
    poison_allocator(m, n)
    assert torch.equal(c, run([twin.name]))
    if config.accum == "fast" and m <= 16:
        return
    reference = numerics.dequantized_product(a, b, scale_a, scale_b, bias)
    peer = peer_relres(a, b, scale_a, scale_b, bias, out_dtype, config.accum, reference)
    assert numerics.relative_residual(c, reference) <= FACTOR * peer


@pytest.mark.parametrize("config", STAGE, ids=lambda c: c.name)
@pytest.mark.parametrize("granularity", ["tensor", "row"])
@pytest.mark.parametrize(
    "m, n, k, with_bias",
    [
        (256, 8192, 1024, False),
        (17, 1008, 4112, True),
        (1000, 3008, 1008, True),
        (300, 2048, 128, True),
        (4096, 4096, 256, False),
    ],
    ids=["decode_256", "odd_m_partial_k", "edge_tiles", "one_k_block", "many_tiles_per_cta"],
)
def test_stage_epilogue_writes_what_cutlass_epilogue_writes(config, granularity, m, n, k, with_bias):
    """D written through the tile's last mainloop stage equals, bit for bit, the same kernel's output through
    CUTLASS's epilogue: partial tiles in M and N, row-wise scales and bias (which pass through shared memory in two
    buffers), one or two k-blocks per tile (the stage to reuse cycles fastest) and up to 8 tiles per CTA."""
    assert_twin_output(config, dataclasses.replace(config, stage_epilogue=False), m, n, k, granularity, with_bias, 5)


@pytest.mark.parametrize("config", BUFFER, ids=lambda c: c.name)
@pytest.mark.parametrize("granularity", ["tensor", "row"])
@pytest.mark.parametrize(
    "m, n, k, with_bias",
    [(256, 8192, 1024, False), (17, 1008, 4112, True), (1000, 3008, 1008, True), (4096, 4096, 256, True)],
    ids=["decode_256", "odd_m_partial_k", "edge_tiles", "many_tiles_per_cta"],
)
def test_buffer_epilogue_writes_what_cutlass_epilogue_writes(config, granularity, m, n, k, with_bias):
    """D written through the epilogue's own buffer equals, bit for bit, the same kernel's output through CUTLASS's
    epilogue: partial tiles, row-wise scales and bias, and up to 8 tiles per CTA (each tile's writes wait for the
    previous tile's stores to have read the buffer)."""
    assert_twin_output(config, dataclasses.replace(config, buffer_epilogue=False), m, n, k, granularity, with_bias, 5)


@pytest.mark.parametrize("config", WEIGHTS_FIRST, ids=lambda c: c.name)
@pytest.mark.parametrize(
    "m, n, k, with_bias",
    [(256, 8192, 2048, False), (17, 1000, 4112, True), (1000, 3000, 1008, True), (3, 264, 128, False)],
    ids=["decode_256", "odd_m_partial_k", "edge_tiles", "one_k_block"],
)
def test_weights_first_changes_no_output(config, m, n, k, with_bias):
    """The load order changes only which TMA request goes out first: bit for bit the same kernel's output in
    CUTLASS's order, on partial tiles in M, N and K, with row-wise scales and bias; each output written."""
    assert_twin_output(config, dataclasses.replace(config, weights_first=False), m, n, k, "row", with_bias, 17)


@pytest.mark.parametrize("config", DYNAMIC, ids=lambda c: c.name)
@pytest.mark.parametrize(
    "m, n_tiles, k",
    [(2100, 65, 512), (100, 3, 256), (1, 8, 4096), (1408, 12, 128)],
    ids=["17x65_tiles", "fewer_tiles_than_ctas", "decode", "one_wave_exactly"],
)
def test_dynamic_tile_claims_change_no_output(config, m, n_tiles, k):
    """Claimed from a counter, every tile is still one CTA's whole sum: bit for bit the product of the same kernel
    under CUTLASS's fixed stride, call after call (the counter starts from zero at each launch) and replayed from
    a CUDA graph (the zeroing is captured with the kernel); each output written (poisoned before every call)."""
    n = n_tiles * config.tile[1] - 16  # the last column of tiles not whole
    a, b, scale_a, scale_b = fp8_operands(m, n, k, granularity="row", seed=13)
    out_dtype = OUT_DTYPES[config.out_dtype]
    run = functools.partial(ops.gemm_fp8, a, b, scale_a.reshape(-1), scale_b.reshape(-1), None, out_dtype)
    poison_allocator(m, n)
    expected = run([dataclasses.replace(config, scheduler="persistent").name])
    assert torch.isfinite(expected).all(), "unwritten (NaN-poisoned) outputs"
    for _ in range(3):
        poison_allocator(m, n)
        assert torch.equal(run([config.name]), expected)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        run([config.name])
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    poison_allocator(m, n)
    with torch.cuda.graph(graph):
        captured = run([config.name])
    for _ in range(2):
        captured.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, expected)
    if config.accum == "fast" and m <= 16:
        return  # unsplit fast accumulation at decode is outside the bound (the test after this one)
    reference = numerics.dequantized_product(a, b, scale_a, scale_b)
    peer = peer_relres(a, b, scale_a, scale_b, None, out_dtype, config.accum, reference)
    assert numerics.relative_residual(expected, reference) <= FACTOR * peer


def test_fast_accumulation_without_split_k_is_caught_by_the_bound_at_decode():
    """The finding above, kept true: if it stops holding, the ping-pong case can join the decode shapes."""
    config = EXPLICIT[3]
    a, b, scale_a, scale_b = fp8_operands(16, 1024, 8192, seed=3)
    reference = numerics.dequantized_product(a, b, scale_a, scale_b)
    c = ops.gemm_fp8(a, b, scale_a.reshape(1), scale_b.reshape(1), None, torch.bfloat16, [config.name])
    peer = peer_relres(a, b, scale_a, scale_b, None, torch.bfloat16, "fast", reference)
    assert numerics.relative_residual(c, reference) > FACTOR * peer


@pytest.mark.parametrize("config", OVERLAPPED, ids=lambda c: c.name)
@pytest.mark.parametrize("k_blocks", [1, 2, 3, 4, 5, 64])
def test_overlapped_promotion_adds_every_k_block_once(config, k_blocks):
    """Odd and even k-block counts (the mainloop takes two per trip), a last block that TMA pads with zeros, and
    split-K's and stream-K's part-ranges of K: at FP32 output, where cuBLAS FP8's promoted relres is the bound and
    a dropped or doubled k-block would read ~1/k_blocks."""
    m, n, k = 200, 320, 128 * k_blocks - 16
    a, b, scale_a, scale_b = fp8_operands(m, n, k, seed=k_blocks)
    reference = numerics.dequantized_product(a, b, scale_a, scale_b)
    poison_allocator(m, n)
    c = ops.gemm_fp8(a, b, scale_a.reshape(1), scale_b.reshape(1), None, torch.float32, [config.name])
    ours = numerics.relative_residual(c, reference)
    peer = peer_relres(a, b, scale_a, scale_b, None, torch.float32, "promoted", reference)
    assert ours <= FACTOR * peer, f"{config.name}: relres {ours:.3g} vs torch._scaled_mm {peer:.3g}"


def with_128_deep_k_blocks(config: Fp8Config) -> Fp8Config:
    return dataclasses.replace(config, tile=(*config.tile[:2], 128))


@pytest.mark.parametrize("config", SLICED, ids=lambda c: c.name)
@pytest.mark.parametrize("k_blocks", [1, 2, 3, 5, 64])
def test_sliced_promotion_is_the_128_deep_k_blocks_sums(config, k_blocks):
    """A k-block of 256 or 512 promoted in slices of 128 makes the same FP32 additions in the same order as the
    same tile with 128-deep k-blocks: bit for bit its output, for slice counts that end a k-block early (TMA pads
    the rest with zeros), and within the bound at FP32 output."""
    m, n, k = 200, 320, 128 * k_blocks - 16
    a, b, scale_a, scale_b = fp8_operands(m, n, k, seed=k_blocks + 200)
    run = functools.partial(ops.gemm_fp8, a, b, scale_a.reshape(1), scale_b.reshape(1), None, torch.float32)
    poison_allocator(m, n)
    c = run([config.name])
    assert torch.isfinite(c).all(), "unwritten (NaN-poisoned) outputs"
    poison_allocator(m, n)
    assert torch.equal(c, run([with_128_deep_k_blocks(config).name]))
    reference = numerics.dequantized_product(a, b, scale_a, scale_b)
    ours = numerics.relative_residual(c, reference)
    peer = peer_relres(a, b, scale_a, scale_b, None, torch.float32, "promoted", reference)
    assert ours <= FACTOR * peer, f"{config.name}: relres {ours:.3g} vs torch._scaled_mm {peer:.3g}"


@pytest.mark.parametrize("config", TURNS, ids=lambda c: c.name)
@pytest.mark.parametrize("k_blocks", [1, 2, 3, 5, 64])
def test_turn_taking_promotion_adds_every_k_block_once(config, k_blocks):
    """The warpgroups' hand-overs balance within every tile, whatever its k-block count (one, odd, a last block
    that TMA pads with zeros, stream-K's part-ranges of K): each output is written (poisoned before), within the
    bound at FP32 output, where a dropped or doubled k-block would read ~1/k_blocks, over 17 x 9 tiles (more than
    one wave: the dynamic scheduler's claims run). On the tile the three-fragment mainloop also runs, the same
    FP32 additions in the same order: bit for bit its output."""
    m, n, k = 2100, 9 * config.tile[1] - 16, 128 * k_blocks - 16
    a, b, scale_a, scale_b = fp8_operands(m, n, k, seed=k_blocks + 100)
    run = functools.partial(ops.gemm_fp8, a, b, scale_a.reshape(1), scale_b.reshape(1), None, torch.float32)
    poison_allocator(m, n)
    c = run([config.name])
    assert torch.isfinite(c).all(), "unwritten (NaN-poisoned) outputs"
    reference = numerics.dequantized_product(a, b, scale_a, scale_b)
    ours = numerics.relative_residual(c, reference)
    peer = peer_relres(a, b, scale_a, scale_b, None, torch.float32, "promoted", reference)
    assert ours <= FACTOR * peer, f"{config.name}: relres {ours:.3g} vs torch._scaled_mm {peer:.3g}"
    own_turn = dataclasses.replace(config, turns=False)
    if own_turn in OVERLAPPED:
        poison_allocator(m, n)
        assert torch.equal(c, run([own_turn.name]))


def test_promotion_every_512_k_elements_breaks_the_bound_at_fp32_output():
    """Why sweeps/filters_fp8.py caps the promotion span at 128: kept true, or the cap can go."""
    a, b, scale_a, scale_b = fp8_operands(16, 1024, 8192, seed=5)
    reference = numerics.dequantized_product(a, b, scale_a, scale_b)
    peer = peer_relres(a, b, scale_a, scale_b, None, torch.float32, "promoted", reference)
    c = ops.gemm_fp8(a, b, scale_a.reshape(1), scale_b.reshape(1), None, torch.float32, [LONG_SPAN.name])
    assert numerics.relative_residual(c, reference) > 2 * peer


def test_torch_compile():
    a, b, scale_a, scale_b = fp8_operands(32, 256, 512, granularity="row")
    bias = torch.randn(256, device="cuda").to(torch.bfloat16)

    def layer(x, w, sx, sw, bias):
        return torch.relu(ext.gemm_fp8(x, w, sx, sw, bias=bias))

    compiled = torch.compile(layer, fullgraph=True)
    torch.testing.assert_close(compiled(a, b, scale_a, scale_b, bias), layer(a, b, scale_a, scale_b, bias))


def test_quantize_fp8_round_trip_on_gpu():
    """Rounding to e4m3 errs by at most 2^-4 of each value in its normal range and half a subnormal step, 2^-10 of
    the scale, below it; per row, rows 10^6 apart each keep that against their own scale."""
    x = torch.randn(300, 512, device="cuda") * torch.logspace(-3, 3, 300, device="cuda")[:, None]

    def within_rounding(x8, scale):
        bound = torch.maximum(2**-4 * x.abs(), 2**-10 * scale) * (1 + 2**-20)  # and the product's FP32 rounding
        return bool(((x8.float() * scale - x).abs() <= bound).all())

    x8, scale = ext.quantize_fp8(x, granularity="tensor")
    assert within_rounding(x8, scale)
    x8, scale = ext.quantize_fp8(x, granularity="row")
    assert scale.shape == (300, 1) and x8.dtype == torch.float8_e4m3fn
    assert within_rounding(x8, scale)


def test_errors_name_the_argument():
    """Dtypes and shapes are checked once per signature, the rest on every call: a signature that ran once is
    checked again."""
    a, b, scale_a, scale_b = fp8_operands(16, 64, 64)
    ext.gemm_fp8(a, b, scale_a, scale_b)
    with pytest.raises(TypeError, match="a must be one of"):
        ext.gemm_fp8(a.float(), b, scale_a, scale_b)
    with pytest.raises(ValueError, match="b must have unit stride along K"):
        ext.gemm_fp8(a, b.t().contiguous().t(), scale_a, scale_b)
    with pytest.raises(ValueError, match="K=40 must be a multiple of 16"):
        ext.gemm_fp8(a[:, :40], b[:, :40], scale_a, scale_b)
    with pytest.raises(ValueError, match="N=60 rows: N must be a multiple of 8"):
        ext.gemm_fp8(a, b[:60], scale_a, scale_b)
    with pytest.raises(ValueError, match="scale_a has shape"):
        ext.gemm_fp8(a, b, torch.ones(3, device="cuda"), scale_b)
    with pytest.raises(TypeError, match="scale_b must be float32"):
        ext.gemm_fp8(a, b, scale_a, scale_b.double())
    with pytest.raises(ValueError, match="scale_a=inf must be finite"):
        ext.gemm_fp8(a, b, float("inf"), scale_b)
    with pytest.raises(ValueError, match="scale_b=nan must be finite"):
        ext.gemm_fp8(a, b, scale_a, torch.tensor(float("nan")))
    with pytest.raises(ValueError, match="scale_b holds non-finite values"):
        ext.gemm_fp8(a, b, scale_a, torch.full((64, 1), float("inf"), device="cuda"), check_scales=True)
    with pytest.raises(TypeError, match="bias must have out_dtype"):
        ext.gemm_fp8(a, b, scale_a, scale_b, bias=torch.zeros(64, device="cuda"))
    with pytest.raises(ValueError, match="accum="):
        ext.gemm_fp8(a, b, scale_a, scale_b, accum="exact")
    with pytest.raises(ValueError, match="must start on a 16-byte boundary"):
        ext.gemm_fp8(a.reshape(-1)[1 : 1 + 16 * 63].reshape(63, 16), b[:, :16], scale_a, scale_b)
    with pytest.raises(ValueError, match="a's row stride 72 must be a multiple of 16"):
        ext.gemm_fp8(torch.ones(16, 72, device="cuda").to(a.dtype)[:, :64], b, scale_a, scale_b)
    with pytest.raises(ValueError, match="b must be a CUDA tensor"):
        ext.gemm_fp8(a, b.cpu(), scale_a, scale_b)
    with pytest.raises(ValueError, match="scale_b must be on cuda"):
        ext.gemm_fp8(a, b, scale_a, scale_b.new_ones(64, 1).cpu())
    with pytest.raises(ValueError, match=r"bias must have shape \(64,\)"):
        ext.gemm_fp8(a, b, scale_a, scale_b, bias=torch.zeros(63, dtype=torch.bfloat16, device="cuda"))
    # the op itself checks what ext.gemm_fp8 plans once per signature, for callers of torch.ops
    with pytest.raises(ValueError, match=r"a \(M, K\) and b \(N, K\) must share K; got \[16, 64\] and \[64, 32\]"):
        torch.ops.cutlass_ext.gemm_fp8(a, b[:, :32], scale_a, scale_b, None, torch.bfloat16, [DEFAULT_FP8.name])
