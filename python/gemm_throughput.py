"""ext.gemm's throughput per mode at a few cubic sizes, plain and with gemm's bias epilogue: a quick check beside
bench_gemm.py's full table (no peers).

    python python/gemm_throughput.py --sizes 8192 --modes halfhalf tf32tf32 fp32 [--bias] [--out FILE.csv]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch
from script_device import require_cuda

import cutlass_ext as ext
from cutlass_ext import benchmark


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8192])
    parser.add_argument("--modes", nargs="+", default=["halfhalf", "tf32tf32"], choices=list(ext.MODES))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--bias", action="store_true", help="also time each mode with a bias (N,) in the epilogue")
    parser.add_argument("--out", type=Path, help="CSV to write")
    args = parser.parse_args(argv)
    require_cuda("gemm_throughput")
    rows = []
    for size in args.sizes:
        input_sets = [
            (torch.randn(size, size, device="cuda"), torch.randn(size, size, device="cuda"))
            for _ in range(benchmark.rotation_count(3 * 4 * size * size))
        ]
        bias = torch.randn(size, device="cuda")
        for mode in args.modes:
            for epilogue in ("none", "bias") if args.bias else ("none",):
                extra = {"bias": bias} if epilogue == "bias" else {}
                run = lambda a, b, mode=mode, extra=extra: ext.gemm(a, b, mode=mode, **extra)  # noqa: E731
                time_us = benchmark.median_time_us(run, input_sets, repeats=args.repeats)
                tflops = 2 * size**3 / time_us / 1e6
                rows.append({"mode": mode, "epilogue": epilogue, "size": size, "time_us": round(time_us, 1)})
                rows[-1]["tflops"] = round(tflops, 1)
                print(f"{size}^3 {mode:9s} {epilogue:5s} {tflops:8.1f} TFLOP/s", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).assign(**benchmark.environment()).to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
