"""FP8 GEMMs at their sustained rate under the board's power limit, side by side with cuBLAS:

    python python/steady_state_fp8.py --shapes 8192x8192x8192 --variants NAME ... --out FILE.csv

A large GEMM on the H100 runs into the 700 W cap within milliseconds, after which its time depends on the
clock the cap allows, and so on the power it draws per FLOP (DRAM traffic among it). The benchmark's rows time a
few calls after an idle gap (events) or a short graph replay; here every contender replays back to back for
`--seconds` after `--warm-seconds` of the same, while NVML samples board power, SM clock and the power-cap flag.
Contenders per shape: `ext.gemm_fp8` (tuned dispatch) and `torch._scaled_mm` with per-tensor and row-wise scales,
fast and promoted accumulation, and any `--variants` by name (per-tensor scales), in `--passes` round-robin
passes; each row is one contender's median pass, with its µs, TFLOP/s, W, MHz and joules per GEMM.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import pandas as pd
import torch
from bench_fp8 import contenders, make_inputs
from bench_gemm import parse_shape

from cutlass_ext import benchmark, registry
from cutlass_ext.fp8_config import Fp8Config
from sweeps.measure_fp8 import kernel_runner
from sweeps.power import Sampler


def sustained(run, input_sets, warm_seconds: float, seconds: float) -> dict:
    """µs per call and the NVML means over `seconds` of back-to-back calls, after `warm_seconds` of them."""
    sampler = Sampler()
    us = benchmark.sustained_time_us(run, input_sets, seconds, warm_seconds, during=sampler)
    return {"us": us, **sampler.summary()}


def shape_contenders(sets, variants: list[Fp8Config]):
    """(name, granularity, accum, run, input sets): the benchmark's ours and cuBLAS rows, then the named variants."""
    for family, name, granularity, accum, run, input_sets in contenders(sets, repeats=3):
        if family in ("cutlass_ext", "cublas"):
            yield name, granularity, accum, run, input_sets
    for config in variants:
        yield config.name, "tensor", config.accum, kernel_runner(config)[0], sets["tensor"]


def measure_shape(m, n, k, variants, passes, warm_seconds, seconds, environment) -> list[dict]:
    sets = make_inputs(m, n, k)
    runs = list(shape_contenders(sets, variants))
    results = {index: [] for index in range(len(runs))}
    for pass_index in range(passes):
        for index, (_, _, _, run, input_sets) in benchmark.pass_order(enumerate(runs), pass_index):
            results[index].append(sustained(run, input_sets, warm_seconds, seconds))
    rows = []
    for index, (name, granularity, accum, _, _) in enumerate(runs):
        passes_us = [r["us"] for r in results[index]]
        median = sorted(results[index], key=lambda r: r["us"])[len(passes_us) // 2]
        rows.append(
            {
                "name": name,
                "granularity": granularity,
                "accum": accum,
                "m": m,
                "n": n,
                "k": k,
                "us": round(median["us"], 2),
                "tflops": round(2 * m * n * k / median["us"] / 1e6, 1),
                "pass_spread": round(max(passes_us) / min(passes_us) - 1, 3),
                "watts": round(median["watts"], 1),
                "sm_mhz": round(median["sm_mhz"]),
                "power_capped": round(median["power_capped"], 2),
                "joules_per_gemm": round(median["watts"] * median["us"] * 1e-6, 4),
                "passes": passes,
                "seconds": seconds,
                **environment,
                "command": shlex.join(["python", *sys.argv]),
            }
        )
        print(
            f"{m}x{n}x{k} {name:62s} {granularity:6s} {accum:8s} {median['us']:9.1f} us "
            f"{rows[-1]['tflops']:7.1f} TFLOP/s {median['watts']:5.0f} W {median['sm_mhz']:5.0f} MHz "
            f"capped {median['power_capped']:.2f}  spread {rows[-1]['pass_spread']:.3f}",
            flush=True,
        )
    del sets
    torch.cuda.empty_cache()
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", type=parse_shape, default=[(8192, 8192, 8192)], help="MxNxK ...")
    parser.add_argument("--variants", nargs="*", default=[], help="FP8 variant names timed beside the dispatch")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--warm-seconds", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--out", type=Path, default=Path("sweeps/results/local/steady_state_fp8.csv"))
    args = parser.parse_args(argv)
    variants = [Fp8Config.from_name(name) for name in args.variants]
    registry.ensure_registered(variants, torch.device("cuda"))
    environment = benchmark.environment()
    rows = []
    for m, n, k in args.shapes:
        rows += measure_shape(m, n, k, variants, args.passes, args.warm_seconds, args.seconds, environment)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(args.out, index=False)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
