"""Which CUDA kernels one `ext.gemm_fp8` call and its cuBLAS peer (`torch._scaled_mm`, same scales and
accumulation) launch, and how long each runs on the GPU (the profiler's CUPTI times: no launch gaps).

    python python/profile_fp8.py --shapes 1x8192x8192 256x10240x8192 --accum fast promoted --scales tensor row

cuBLAS's kernel names carry its tile, cluster and schedule, which is what to compare ours against.
"""

from __future__ import annotations

import argparse
import functools

import torch
from bench_gemm import parse_shape
from script_device import require_cuda
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import cutlass_ext as ext
from cutlass_ext import peers_fp8


def operands(m: int, n: int, k: int, scales: str):
    a, scale_a = ext.quantize_fp8(torch.randn(m, k, device="cuda"), granularity=scales)
    b, scale_b = ext.quantize_fp8(torch.randn(n, k, device="cuda"), granularity=scales)
    return a, b, scale_a, scale_b


def kernel_times(run, calls: int) -> list[tuple[str, int, float]]:
    """(kernel name, launches per call, mean µs per launch) of every CUDA kernel `run` launches."""
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
    kernels = [e for e in profiler.key_averages() if e.device_type == DeviceType.CUDA]
    return [(e.key, e.count // calls, e.device_time) for e in sorted(kernels, key=lambda e: -e.device_time_total)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", type=parse_shape, nargs="+", default=[parse_shape("1x8192x8192")])
    parser.add_argument("--accum", nargs="+", default=["fast", "promoted"], choices=["fast", "promoted"])
    parser.add_argument("--scales", nargs="+", default=["tensor"], choices=["tensor", "row"])
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args(argv)
    require_cuda("profile_fp8")

    for m, n, k in args.shapes:
        for scales in args.scales:
            a, b, scale_a, scale_b = operands(m, n, k, scales)
            for accum in args.accum:
                contenders = {
                    "ext.gemm_fp8": functools.partial(ext.gemm_fp8, accum=accum),
                    "torch._scaled_mm": peers_fp8.scaled_mm(torch.bfloat16, accum),
                }
                for label, gemm in contenders.items():
                    run = functools.partial(gemm, a, b, scale_a, scale_b)
                    flops = 2 * m * n * k
                    for name, launches, us in kernel_times(run, args.calls):
                        rate = f"{flops / us / 1e6:8.1f} TFLOP/s" if launches == 1 else ""
                        print(f"{m}x{n}x{k} {scales:6s} {accum:8s} {label:16s} {us:9.2f} us x{launches} {rate}  {name}")


if __name__ == "__main__":
    main()
