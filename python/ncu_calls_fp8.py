"""Calls for Nsight Compute to profile at one FP8 shape: each named variant, then cuBLAS promoted and fast
(`torch._scaled_mm`), per tensor, bf16 output, three calls each (ncu flushes the caches before each by default).
`--calls` and `--peers` narrow that, e.g. to one call of each kernel for a source-level (SASS) profile. A variant
given as NAME@CACHE_DIR is loaded from that kernel cache's build (as ab_fp8_libraries.py does: builds from other
kernel sources or CUTLASS headers), not built.

    ncu --clock-control none --metrics lts__t_bytes.sum,... -k regex:'device_kernel|nvjet' \
        python python/ncu_calls_fp8.py 256 57344 8192 fp8_e4m3e4m3_bf16_128x128x128_c1x1_coop_promoted_l2pf8

ncu also sees the calls made before the profiled ones, in this order: cuBLAS fast and promoted (the accuracy gate's
peers, in sweeps.measure_fp8.make_problem), then every contender once (warm-up).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from ab_fp8_libraries import library_of

from cutlass_ext import peers_fp8, registry
from cutlass_ext.fp8_config import Fp8Config
from sweeps import measure_fp8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("m", type=int)
    parser.add_argument("n", type=int)
    parser.add_argument("k", type=int)
    parser.add_argument(
        "variants", nargs="*", help="FP8 variant names (built or taken from the kernel cache), or NAME@CACHE_DIR"
    )
    parser.add_argument("--calls", type=int, default=3, help="profiled calls of each kernel")
    parser.add_argument(
        "--peers", nargs="*", choices=("promoted", "fast"), default=["promoted", "fast"], help="cuBLAS modes to profile"
    )
    args = parser.parse_args()
    configs = []
    for argument in args.variants:
        name, _, cache_dir = argument.partition("@")
        configs.append(Fp8Config.from_name(name))
        if cache_dir:
            registry.register_library(configs[-1:], library_of(name, cache_dir))
    registry.ensure_registered(configs, torch.device("cuda"))
    problem = measure_fp8.make_problem(args.m, args.n, args.k, sets=2)
    runs = [measure_fp8.kernel_runner(config)[0] for config in configs]
    runs += [peers_fp8.scaled_mm(torch.bfloat16, accum) for accum in args.peers]
    for run in runs:
        run(*problem.input_sets[0])
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for run in runs:
        for _ in range(args.calls):
            run(*problem.input_sets[-1])
        torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
