"""A block-scaled FP8 linear layer at decode, quantizer and GEMM together, in one run:

    python python/bench_fp8_block_layer.py --out sweeps/results/h200/fp8_block_layer.csv

`ext.nn.Fp8Linear(scaling="block")` runs two kernels a call: the 1x128 activation quantizer, then the GEMM
dispatch picks. Where that GEMM launches programmatically (`_pdl` variants) the quantizer lets it launch at its
start, so the GEMM's prologue and the L2 prefetch of its weights overlap the quantizer; this times the layer with
that signal (`layer`) and without (`layer, no early launch`), beside the GEMM alone on pre-quantized inputs
(`gemm`). Rows: DeepSeek-V3's (N, K) x M, bf16 activations and output, each time the median of interleaved rounds
of CUDA-graph replays (inputs rotated past L2); `ratio` is the time without the early launch over the time with it.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from pathlib import Path

import pandas as pd
import torch
from script_device import require_cuda

import cutlass_ext as ext
from cutlass_ext import benchmark
from cutlass_ext.fp8_block import quantize_kernel

DENSE_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
DENSE_M = [1, 16, 32, 64, 128]


def _layer_contenders(layer: torch.nn.Module):
    def with_early_launch(early: bool):
        def run(x):
            quantize_kernel.LAUNCH_DEPENDENTS_EARLY = early  # read as each launch is captured
            try:
                return layer(x)
            finally:
                quantize_kernel.LAUNCH_DEPENDENTS_EARLY = True

        return run

    yield "layer", with_early_launch(True)
    yield "layer, no early launch", with_early_launch(False)


def bench_shape(m, n, k, repeats, rounds, environment) -> list[dict]:
    linear = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
    layer = ext.nn.Fp8Linear.from_linear(linear, scaling="block")
    count = benchmark.rotation_count(n * k)
    xs = [(torch.randn(m, k, device="cuda", dtype=torch.bfloat16),) for _ in range(count)]
    quantized = [ext.quantize_fp8(x, granularity="block", block=(1, 128)) for (x,) in xs]
    gemm_sets = [(a8, scale_a) for a8, scale_a in quantized]
    contenders = [(label, run, xs) for label, run in _layer_contenders(layer)]
    contenders.append(("gemm", lambda a8, sa: ext.gemm_fp8(a8, layer.weight, sa, layer.weight_scale), gemm_sets))
    times = {label: [] for label, _, _ in contenders}
    for r in range(rounds):
        for label, run, sets in benchmark.pass_order(contenders, r):
            times[label].append(benchmark.graph_time_us(run, sets, repeats=repeats))
    rows = [
        {**environment, "contender": label, "m": m, "n": n, "k": k, "us": statistics.median(t)}
        for label, t in times.items()
    ]
    ratio = statistics.median(times["layer, no early launch"]) / statistics.median(times["layer"])
    for row in rows:
        row["ratio"] = ratio if row["contender"] == "layer" else None
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="CSV path")
    parser.add_argument("--m", type=lambda t: [int(v) for v in t.split(",") if v], default=DENSE_M)
    parser.add_argument("--repeats", type=int, default=5, help="graph replays per round (median)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per shape (median of rounds)")
    args = parser.parse_args(argv)
    require_cuda("bench_fp8_block_layer")
    environment = {**benchmark.environment(), "command": shlex.join(["python", *sys.argv])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for n, k in DENSE_NK:
        for m in args.m:
            rows += bench_shape(m, n, k, args.repeats, args.rounds, environment)
            pd.DataFrame(rows).to_csv(args.out, index=False)
            layer = rows[-3]
            print(f"{m} x {n} x {k}: layer {layer['us']:.2f} us, {layer['ratio']:.3f}x without the early launch")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
