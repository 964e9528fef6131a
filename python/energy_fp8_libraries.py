"""Sustained time, board power, SM clock and energy per call of one FP8 variant from a given kernel-cache folder,
beside cuBLAS with the variant's accumulation (`torch._scaled_mm`), in alternating order. A large decode GEMM
(256 x 57344 x 8192) runs the H100 at its 700 W cap, where the clock settles per kernel: a kernel that stalls less
finishes sooner only if it also spends less energy per call, which graph replay of a few calls does not show
(NOTES.md, twenty-fourth session). Run one process per build of a name (a variant's name keys its symbols), as ab_fp8_libraries.py does.

    python python/energy_fp8_libraries.py [--row-wise] [--seconds 3] 256x57344x8192 NAME@CACHE_DIR
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from ab_fp8_libraries import library_of, row_wise_sets, scales_as_given

from cutlass_ext import benchmark, peers_fp8, registry
from cutlass_ext.fp8_config import Fp8Config
from sweeps import measure_fp8, power


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shape", help="MxNxK")
    parser.add_argument("variant", metavar="NAME@CACHE_DIR")
    parser.add_argument("--row-wise", action="store_true", help="row-wise scales (equal to the per-tensor ones)")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed window, after 1 s of the same calls")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    m, n, k = (int(v) for v in args.shape.split("x"))
    name, cache_dir = args.variant.split("@")
    config = Fp8Config.from_name(name)
    registry.register_library([config], library_of(name, cache_dir))
    problem = measure_fp8.make_problem(m, n, k)
    sets = row_wise_sets(problem.input_sets) if args.row_wise else problem.input_sets
    ours = scales_as_given(config) if args.row_wise else measure_fp8.kernel_runner(config)[0]
    runs = {name: ours, f"cublas {config.accum}": peers_fp8.scaled_mm(torch.bfloat16, config.accum)}
    label = args.shape + (" row-wise" if args.row_wise else "")
    for _ in range(args.rounds):
        for run_name, run in runs.items():
            sampler = power.Sampler()
            us = benchmark.sustained_time_us(run, sets, seconds=args.seconds, warm_seconds=1.0, during=sampler)
            s = sampler.summary()
            print(
                f"{label} {run_name:60s} {us:7.1f} us {s['watts']:6.1f} W {s['sm_mhz']:6.0f} MHz "
                f"capped {s['power_capped']:.2f} {s['watts'] * us / 1000:6.1f} mJ/call",
                flush=True,
            )


if __name__ == "__main__":
    main()
