"""Side-by-side GEMM benchmark: our kernels against cuBLAS FP32 and TF32, measured in one run.

    python python/bench_gemm.py --sizes 1024 4096 8192 --out sweeps/results/h100/gemm_tf32.csv

Each row: median time (CUDA events, warm-up, inputs rotated past L2), TFLOP/s, and the relative residual against
an FP64 product of the same inputs. Prints the table with ratios to cuBLAS; writes it as CSV with provenance.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import pandas as pd
import torch

import cutlass_ext as ext
from cutlass_ext import benchmark, numerics
from cutlass_ext.gemm import _DEFAULT_VARIANTS


def cublas(precision):
    def run(a, b):
        previous = torch.backends.cuda.matmul.fp32_precision
        torch.backends.cuda.matmul.fp32_precision = precision
        try:
            return a @ b
        finally:
            torch.backends.cuda.matmul.fp32_precision = previous

    return run


def contenders(modes):
    yield "cublas", "fp32", "torch.matmul ieee", cublas("ieee")
    yield "cublas", "tf32", "torch.matmul tf32", cublas("tf32")
    for mode in modes:
        yield "cutlass_ext", mode, _DEFAULT_VARIANTS[mode][0], lambda a, b, mode=mode: ext.gemm(a, b, mode=mode)


def measure(size, modes, repeats):
    m = n = k = size
    generator = torch.Generator(device="cuda").manual_seed(size)
    bytes_per_set = 4 * (m * k + k * n + m * n)
    input_sets = [
        (torch.randn(m, k, device="cuda", generator=generator), torch.randn(k, n, device="cuda", generator=generator))
        for _ in range(benchmark.rotation_count(bytes_per_set))
    ]
    a, b = input_sets[0]
    ref = a.double() @ b.double()
    rows = []
    for family, mode, name, run in contenders(modes):
        relres = numerics.relative_residual(run(a, b), ref)
        time_us = benchmark.median_time_us(run, input_sets, repeats=repeats)
        rows.append(dict(family=family, mode=mode, name=name, m=m, n=n, k=k, batch=1, time_us=round(time_us, 2),
                         tflops=round(2 * m * n * k / time_us / 1e6, 2), relres=relres))
    del input_sets, ref
    torch.cuda.empty_cache()
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192], help="m = n = k values")
    parser.add_argument("--modes", nargs="+", default=list(ext.MODES), help="our modes to run")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", type=Path, help="CSV to write")
    args = parser.parse_args(argv)

    rows = [row for size in args.sizes for row in measure(size, args.modes, args.repeats)]
    table = pd.DataFrame(rows)
    for column, value in benchmark.environment().items():
        table[column] = value
    table["command"] = shlex.join(["python"] + sys.argv)
    for column, mode in (("vs_cublas_fp32", "fp32"), ("vs_cublas_tf32", "tf32")):
        baseline = table[(table["family"] == "cublas") & (table["mode"] == mode)].set_index("m")["tflops"]
        table[column] = (table["tflops"] / table["m"].map(baseline)).round(3)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table[["family", "mode", "m", "time_us", "tflops", "relres", "vs_cublas_fp32", "vs_cublas_tf32"]]
              .to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out, index=False)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
