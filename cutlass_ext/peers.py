"""The peers every benchmark runs beside our kernels: cuBLAS (through torch.matmul) in FP32 or TF32; Triton's
FP32-accurate matmul, a plain tiled kernel with tl.dot(..., input_precision="tf32x3"), best of a few configs per
shape; and CUTLASS's 3xTF32 (example 27's kernel, built from the nvidia-cutlass headers by our build). Imports
triton: load it only to benchmark."""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl

from . import benchmark, ops, registry
from .families.sm80.config import CUTLASS_3XTF32

# (block_m, block_n, block_k, warps, stages); the benchmark keeps the fastest per shape.
CONFIGS = [(128, 128, 32, 8, 3), (128, 256, 32, 8, 3), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (256, 128, 32, 8, 3)]


@triton.jit
def _matmul_kernel(
    a,
    b,
    c,
    m,
    n,
    k,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    depth = tl.arange(0, BLOCK_K)
    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, k, BLOCK_K):
        a_tile = tl.load(
            a + rows[:, None] * stride_am + (k0 + depth)[None, :] * stride_ak,
            mask=(rows[:, None] < m) & ((k0 + depth)[None, :] < k),
            other=0.0,
        )
        b_tile = tl.load(
            b + (k0 + depth)[:, None] * stride_bk + cols[None, :] * stride_bn,
            mask=((k0 + depth)[:, None] < k) & (cols[None, :] < n),
            other=0.0,
        )
        accumulator = tl.dot(a_tile, b_tile, accumulator, input_precision=PRECISION)
    tl.store(
        c + rows[:, None] * stride_cm + cols[None, :] * stride_cn,
        accumulator,
        mask=(rows[:, None] < m) & (cols[None, :] < n),
    )


def matmul(a: torch.Tensor, b: torch.Tensor, config, precision: str = "tf32x3") -> torch.Tensor:
    block_m, block_n, block_k, warps, stages = config
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty(m, n, device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    _matmul_kernel[grid](
        a,
        b,
        c,
        m,
        n,
        k,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        PRECISION=precision,
        num_warps=warps,
        num_stages=stages,
    )
    return c


def cublas(precision: str):
    """torch.matmul on float32 with cuBLAS in `ieee` (SGEMM) or `tf32` precision, whatever the global setting."""

    def run(a, b):
        previous = torch.backends.cuda.matmul.fp32_precision
        torch.backends.cuda.matmul.fp32_precision = precision
        try:
            return a @ b
        finally:
            torch.backends.cuda.matmul.fp32_precision = previous

    return run


def triton_tf32x3(input_sets, repeats: int):
    """(name, run) of Triton's tf32x3 matmul with the fastest of CONFIGS on these inputs."""
    timed = []
    for config in CONFIGS:

        def run(a, b, config=config):
            return matmul(a, b, config)

        try:
            timed.append(
                (benchmark.median_time_us(run, input_sets, warmup=2, repeats=max(3, repeats // 3)), config, run)
            )
        except Exception as error:  # noqa: BLE001 - whatever Triton raises for a config the shape or shared memory cannot take
            print(f"triton config {config} skipped: {type(error).__name__}", file=sys.stderr)
    _, config, run = min(timed, key=lambda entry: entry[0])
    return "tl.dot tf32x3 " + "x".join(str(v) for v in config), run


def cutlass_3xtf32():
    """(name, run, prepare) of CUTLASS's 3xTF32 GEMM as its example 27 configures it. It reads B column-major:
    `prepare` stores B so, outside the timed call, as the example's inputs are."""
    name = CUTLASS_3XTF32.name
    registry.ensure_registered([CUTLASS_3XTF32], torch.device("cuda"))  # built on first use, then cached

    def run(a, b):
        return ops.gemm(a, b, [name])

    def prepare(a, b):
        return a, b.t().contiguous().t()

    return name, run, prepare
