"""Where one `ext.gemm` call spends its time: each GPU kernel's share, and the host time per call.

    python python/profile_gemm.py --mode halfhalf --shapes 1024 8192

For each shape: the torch profiler's table of CUDA kernels over `--calls` calls (after a warm-up), the host
wall time per call when nothing waits on the GPU, and the GPU time per call from CUDA events.
"""

from __future__ import annotations

import argparse
import time

import torch
from bench_gemm import parse_shape
from script_device import require_cuda
from torch.profiler import ProfilerActivity, profile

import cutlass_ext as ext
from cutlass_ext import benchmark


def host_us_per_call(run, calls: int) -> float:
    """Launch cost: the GPU is kept busy elsewhere, so only the host's own work is timed."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        run()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", default="halfhalf", choices=ext.MODES)
    parser.add_argument("--shapes", type=parse_shape, nargs="+", default=[parse_shape("8192")])
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args(argv)
    require_cuda("profile_gemm")

    for m, n, k in args.shapes:
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda")

        def run(a=a, b=b):
            return ext.gemm(a, b, mode=args.mode)

        for _ in range(3):
            run()
        with profile(activities=[ProfilerActivity.CUDA]) as profiler:
            for _ in range(args.calls):
                run()
            torch.cuda.synchronize()
        print(f"== {args.mode} {m}x{n}x{k}: {args.calls} calls")
        print(profiler.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=70))
        gpu_us = benchmark.median_time_us(lambda x, y: ext.gemm(x, y, mode=args.mode), [(a, b)], repeats=args.calls)
        print(f"per call: GPU {gpu_us:.1f} us (CUDA events), host {host_us_per_call(run, args.calls):.1f} us")


if __name__ == "__main__":
    main()
