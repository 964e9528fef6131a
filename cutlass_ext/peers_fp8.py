"""The peers of `gemm_fp8` in benchmarks and sweeps: cuBLAS FP8 through `torch._scaled_mm` (same scales and
accumulation), cuBLAS FP16, and a TK-GEMM-style Triton split-K FP8 kernel (seed 003 section 4: each program
sums one slice of K and adds its scaled partial tile into the output with atomics), tuned per shape from a few
configs; and a plain streaming read of the weights, the memory floor that decode's GEMMs are held to. Imports
triton: load it only to benchmark."""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl

from . import benchmark

# (block_m, block_n, block_k, split_k, warps, stages). Split-K for decode's few output tiles (seed 003's
# 64x64x256, split 4, among them); whole-K tiles once M fills the GPU.
SPLIT_K_CONFIGS = [
    (64, 64, 256, 4, 4, 3),
    (64, 64, 256, 4, 8, 3),
    (64, 64, 256, 8, 4, 3),
    (64, 128, 128, 2, 4, 4),
    (64, 128, 256, 2, 8, 3),
]
WHOLE_K_CONFIGS = [
    (128, 128, 128, 1, 8, 3),
    (128, 256, 128, 1, 8, 3),
    (64, 128, 128, 1, 4, 4),
    (128, 128, 128, 2, 8, 3),
]
_SPLIT_K_UP_TO_M = 128


@triton.jit
def _splitk_fp8_kernel(
    a,
    b,
    c,
    scale_a,
    scale_b,
    m,
    n,
    k,
    stride_am,
    stride_bn,
    stride_cm,
    ROW_SCALES: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    grid_m = tl.cdiv(m, BLOCK_M)
    grid_n = tl.cdiv(n, BLOCK_N)
    # GROUP_M row tiles launched together share their B panels in L2
    width = GROUP_M * grid_n
    group = pid // width
    group_size = min(grid_m - group * GROUP_M, GROUP_M)
    pid_m = group * GROUP_M + (pid % group_size)
    pid_n = (pid % width) // group_size
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    depth = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    a_tile_ptr = a + rows[:, None] * stride_am + depth[None, :]
    b_tile_ptr = b + cols[None, :] * stride_bn + depth[:, None]  # (BLOCK_K, BLOCK_N) view of B (N, K): K-major
    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(tl.cdiv(k, BLOCK_K * SPLIT_K)):
        remaining = k - step * BLOCK_K * SPLIT_K
        a_tile = tl.load(a_tile_ptr, mask=(rows[:, None] < m) & (depth[None, :] < remaining), other=0.0)
        b_tile = tl.load(b_tile_ptr, mask=(depth[:, None] < remaining) & (cols[None, :] < n), other=0.0)
        accumulator = tl.dot(a_tile, b_tile, accumulator)
        a_tile_ptr += BLOCK_K * SPLIT_K
        b_tile_ptr += BLOCK_K * SPLIT_K
    if ROW_SCALES:
        accumulator *= tl.load(scale_a + rows, mask=rows < m, other=0.0)[:, None]
        accumulator *= tl.load(scale_b + cols, mask=cols < n, other=0.0)[None, :]
    else:
        accumulator *= tl.load(scale_a) * tl.load(scale_b)
    c_tile_ptr = c + rows[:, None] * stride_cm + cols[None, :]
    mask = (rows[:, None] < m) & (cols[None, :] < n)
    if SPLIT_K == 1:
        tl.store(c_tile_ptr, accumulator.to(c.dtype.element_ty), mask=mask)
    else:
        tl.atomic_add(c_tile_ptr, accumulator, mask=mask)


def splitk_fp8(a, b, scale_a, scale_b, out_dtype, config) -> torch.Tensor:
    """scale_a · scale_b · a @ b.T for FP8 a (M, K), b (N, K); split-K sums into an FP32 buffer, then casts."""
    block_m, block_n, block_k, split_k, warps, stages = config
    m, k = a.shape
    n = b.shape[0]
    if split_k == 1:
        c = torch.empty(m, n, device=a.device, dtype=out_dtype)
    else:
        c = torch.zeros(m, n, device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n), split_k)
    _splitk_fp8_kernel[grid](
        a,
        b,
        c,
        scale_a,
        scale_b,
        m,
        n,
        k,
        a.stride(0),
        b.stride(0),
        c.stride(0),
        ROW_SCALES=scale_a.numel() > 1,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        SPLIT_K=split_k,
        GROUP_M=8,
        num_warps=warps,
        num_stages=stages,
    )
    return c if split_k == 1 else c.to(out_dtype)


def triton_splitk(input_sets, out_dtype, repeats: int):
    """(name, run) of the Triton split-K FP8 kernel with the fastest of its configs for this M on these inputs;
    input sets are (a, b, scale_a, scale_b)."""
    m = input_sets[0][0].shape[0]
    configs = SPLIT_K_CONFIGS if m <= _SPLIT_K_UP_TO_M else WHOLE_K_CONFIGS

    def make_run(config):
        return lambda a, b, scale_a, scale_b: splitk_fp8(a, b, scale_a, scale_b, out_dtype, config)

    return _fastest("triton splitk", configs, make_run, input_sets, repeats)


def _fastest(label: str, configs, make_run, input_sets, repeats: int):
    """(`label` + config, run) of the config whose run is fastest by CUDA-graph replay on these inputs (per-call
    launches would time the host at decode sizes); a config that cannot run the shape is skipped."""
    timed = []
    for config in configs:
        run = make_run(config)
        try:
            time_us = benchmark.graph_time_us(run, input_sets, calls=5, repeats=max(3, repeats // 5))
        except Exception as error:  # noqa: BLE001 - whatever Triton raises for a config the shape or shared memory cannot take
            print(f"{label} config {config} skipped: {type(error).__name__}: {error}", file=sys.stderr)
            continue
        timed.append((time_us, config, run))
    _, config, run = min(timed, key=lambda entry: entry[0])
    return f"{label} " + "x".join(str(v) for v in config), run


# (words per load step, steps per program, warps): a few shapes of one plain streaming read, the fastest kept
STREAM_READ_CONFIGS = [(1024, 16, 4), (2048, 8, 8), (4096, 4, 8), (8192, 8, 8)]


@triton.jit
def _stream_read_kernel(words, checksums, count, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    # each program reads STEPS consecutive blocks of 4-byte words and writes their sum, which keeps the loads live
    # and lets a test see that every word was read once
    start = tl.program_id(0).to(tl.int64) * BLOCK * STEPS
    total = tl.zeros((BLOCK,), dtype=tl.int64)
    for step in range(STEPS):
        offsets = start + step * BLOCK + tl.arange(0, BLOCK)
        total += tl.load(words + offsets, mask=offsets < count, other=0).to(tl.int64)
    tl.store(checksums + tl.program_id(0), tl.sum(total, axis=0))


def stream_read(x: torch.Tensor, config=STREAM_READ_CONFIGS[0]) -> torch.Tensor:
    """Reads every byte of the contiguous `x` once (as 4-byte words) and returns the words' sum per program: the
    DRAM floor of a kernel that must stream `x`, such as decode's weights."""
    block, steps, warps = config
    words = x.reshape(-1).view(torch.int32)
    programs = triton.cdiv(words.numel(), block * steps)
    checksums = torch.empty(programs, device=x.device, dtype=torch.int64)
    _stream_read_kernel[(programs,)](words, checksums, words.numel(), BLOCK=block, STEPS=steps, num_warps=warps)
    return checksums


def weights_read(input_sets, repeats: int):
    """(name, run) of the fastest streaming read of B's bytes alone, timed like the GEMMs (graph replay over the
    same rotated input sets, so that B comes from DRAM): what reading decode's weights costs at the least."""
    return _fastest(
        "weights read", STREAM_READ_CONFIGS, lambda config: lambda a, b, *_: stream_read(b, config), input_sets, repeats
    )


def scaled_mm(out_dtype, accum: str):
    """cuBLAS FP8 through torch._scaled_mm with the same scales (per tensor or per row) and accumulation."""

    def run(a, b, scale_a, scale_b):
        rowwise = scale_a.numel() > 1 or scale_b.numel() > 1
        if rowwise:
            scale_a, scale_b = scale_a.reshape(-1, 1), scale_b.reshape(1, -1)
        else:
            scale_a, scale_b = scale_a.reshape(()), scale_b.reshape(())
        return torch._scaled_mm(
            a, b.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, use_fast_accum=accum == "fast"
        )

    return run


def scaled_mm_block(out_dtype=torch.bfloat16):
    """cuBLAS's blockwise FP8 GEMM through torch._scaled_mm with 1x128 activation and 128x128 weight scales (a8 (M,
    K), b8 (N, K), the scales as `quantize_fp8(granularity="block")` writes them): activation scales outer-dim-major,
    weight scales as for bᵀ (K, N) in the first of two layouts this torch takes, found on the first call."""
    layouts = []

    def run(a8, b8, scale_a, scale_b):
        forms = layouts or [lambda s: s.T, lambda s: s.T.contiguous()]
        for index, form in enumerate(forms):
            try:
                out = torch._scaled_mm(a8, b8.T, scale_a.T.contiguous().T, form(scale_b), out_dtype=out_dtype)
            except RuntimeError:
                if index == len(forms) - 1:
                    raise
                continue
            if not layouts:
                layouts.append(form)
            return out

    return run


def cublas_fp16(a16: torch.Tensor, b16: torch.Tensor) -> torch.Tensor:
    """The FP16 product the FP8 kernels replace: a (M, K) @ b (N, K).T on cuBLAS."""
    return a16 @ b16.t()
