"""Eager cost per call: `ext.gemm` called back to back, as training code calls it, beside torch.mm (FP32 and TF32).

    python python/bench_eager.py --out sweeps/results/h200/eager_gemm.csv [--profile DIR]

Writes the CSV and its plot (the same name, .png: µs per call against size, log-log).

Each row is the wall time per call of `calls` calls in a row (host and GPU together, synchronised once at the end),
so below the size where the GPU's time dominates it is the host's cost per call: the median over `--rounds` rounds,
the contenders of a size interleaved within each round (a host's launch cost drifts by several µs between
moments; one round per contender let that drift decide close pairs), with the rounds' spread beside it. The
summary names, per mode, the smallest size at which it is faster than cuBLAS SGEMM in eager mode (the crossover).
`--profile DIR` writes a cProfile of each mode's calls at 256³ for finding where host time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shlex
import sys
import time
from pathlib import Path

import pandas as pd
import torch
from script_device import require_cuda

import cutlass_ext as ext
from cutlass_ext import benchmark

SIZES = (64, 128, 256, 512, 1024, 2048, 4096)
MODES = ("tf32tf32", "halfhalf", "markidis", "tf32", "fp32")


def per_call_us(run, operands, calls: int) -> float:
    for _ in range(3):
        run(*operands)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        run(*operands)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e6 / calls


def contenders():
    """(name, run, torch's FP32 matmul precision while it runs (set once around the calls, not per call), whether
    it takes a bias). The bias is made once, as nn.Linear's parameter is, and added by torch.addmm beside ours."""
    yield "torch.mm fp32 (ieee)", torch.mm, "ieee", False
    yield "torch.mm tf32", torch.mm, "tf32", False
    for mode in MODES:
        yield f"ext.gemm {mode}", lambda a, b, mode=mode: ext.gemm(a, b, mode=mode), "ieee", False
    yield "torch.addmm fp32 (ieee) +bias", lambda a, b, bias: torch.addmm(bias, a, b), "ieee", True
    for mode in ("tf32tf32", "halfhalf"):  # nn.Linear's call: the bias in the epilogue
        yield f"ext.gemm {mode} +bias", lambda a, b, bias, mode=mode: ext.gemm(a, b, mode=mode, bias=bias), "ieee", True


def plot(frame: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    for name, rows in frame.groupby("contender", sort=False):
        style = "--" if name.startswith("torch") else "-"
        axis.plot(rows["size"], rows["us_per_call"], style, marker="o", markersize=3, label=name)
    axis.set(xscale="log", yscale="log", xlabel="M = N = K", ylabel="µs per call (eager, back to back)")
    axis.set_title(f"ext.gemm eager cost per call, {frame['gpu'].iloc[0]}", fontsize=9)
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per size (median)")
    parser.add_argument("--profile", type=Path, help="folder for cProfile summaries of each mode at 256³")
    parser.add_argument("--trace", type=Path, help="folder for torch.profiler tables (CUDA runtime calls included)")
    args = parser.parse_args(argv)
    require_cuda("bench_eager")
    rows = []
    for size in args.sizes:
        a = torch.randn(size, size, device="cuda")
        b = torch.randn(size, size, device="cuda")
        calls = max(10, min(args.calls, int(args.calls * (1024 / size) ** 3)))
        bias = torch.randn(size, device="cuda")
        times = {}
        for _ in range(args.rounds):
            for name, run, precision, takes_bias in contenders():
                previous = torch.backends.cuda.matmul.fp32_precision
                torch.backends.cuda.matmul.fp32_precision = precision
                try:
                    time_us = per_call_us(run, (a, b, bias) if takes_bias else (a, b), calls)
                finally:
                    torch.backends.cuda.matmul.fp32_precision = previous
                times.setdefault(name, []).append(time_us)
        for name, samples in times.items():
            spread = pd.Series(samples)
            rows.append(
                {
                    "contender": name,
                    "size": size,
                    "us_per_call": round(spread.median(), 2),
                    "us_min": round(spread.min(), 2),
                    "us_max": round(spread.max(), 2),
                    "rounds": len(samples),
                }
            )
            row = rows[-1]
            print(f"{size:6d} {name:24s} {row['us_per_call']:10.2f} us ({row['us_min']}-{row['us_max']})", flush=True)
    frame = pd.DataFrame(rows).assign(**benchmark.environment(), command=shlex.join(["python", *sys.argv]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out, index=False)
    try:
        plot(frame, args.out.with_suffix(".png"))
    except ImportError:
        print("matplotlib is not installed: no plot (pip install -e '.[report]')")
    sgemm = frame[frame["contender"] == "torch.mm fp32 (ieee)"].set_index("size")["us_per_call"]
    for name in frame["contender"].unique():
        mine = frame[frame["contender"] == name].set_index("size")["us_per_call"]
        faster = [size for size in mine.index if mine[size] < sgemm[size]]
        at_256 = mine.get(256, float("nan"))
        print(f"{name:24s} at 256³ {at_256:8.2f} us/call; faster than SGEMM from {faster[0] if faster else '-'}")
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        a, b = torch.randn(256, 256, device="cuda"), torch.randn(256, 256, device="cuda")
        for mode in MODES:
            ext.gemm(a, b, mode=mode)
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(200):
                ext.gemm(a, b, mode=mode)
            torch.cuda.synchronize()
            profile.disable()
            with open(args.profile / f"eager_profile_{mode}.txt", "w") as handle:
                pstats.Stats(profile, stream=handle).sort_stats("tottime").print_stats(25)
    if args.trace:
        args.trace.mkdir(parents=True, exist_ok=True)
        a, b = torch.randn(256, 256, device="cuda"), torch.randn(256, 256, device="cuda")
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        for mode in MODES:
            ext.gemm(a, b, mode=mode)
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=activities) as profile:
                for _ in range(50):
                    ext.gemm(a, b, mode=mode)
                torch.cuda.synchronize()
            table = profile.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)
            (args.trace / f"eager_trace_{mode}.txt").write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
