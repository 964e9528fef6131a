"""ext.gemm's throughput per mode at a few cubic sizes, one line each: a quick check beside bench_gemm.py's full
table (no peers, no CSV).

    python python/gemm_throughput.py --sizes 8192 --modes halfhalf tf32tf32 fp32
"""

from __future__ import annotations

import argparse

import torch

import cutlass_ext as ext
from cutlass_ext import benchmark


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8192])
    parser.add_argument("--modes", nargs="+", default=["halfhalf", "tf32tf32"], choices=list(ext.MODES))
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    for size in args.sizes:
        input_sets = [
            (torch.randn(size, size, device="cuda"), torch.randn(size, size, device="cuda"))
            for _ in range(benchmark.rotation_count(3 * 4 * size * size))
        ]
        for mode in args.modes:
            run = lambda a, b, mode=mode: ext.gemm(a, b, mode=mode)  # noqa: E731
            time_us = benchmark.median_time_us(run, input_sets, repeats=args.repeats)
            print(f"{size}^3 {mode:9s} {2 * size**3 / time_us / 1e6:8.1f} TFLOP/s ({torch.cuda.get_device_name()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
