"""How much of a decode GEMM's time the overlap with the call before hides: graph replay of calls back to back
(programmatic dependent launch, the L2 prefetch ahead of the wait) against the same calls kept apart by a
one-element add (timed alone and subtracted). N = K = 8192 at M = 1 and 16, 5 round-robin passes, medians:

    python python/decode_overlap_fp8.py fp8_e4m3e4m3_bf16_64x16x256_c1x1_pp_fast_swap_l2pf8 [NAME ...]
"""

import statistics
import sys

import torch

from cutlass_ext import benchmark, registry
from cutlass_ext.fp8_config import Fp8Config
from sweeps import measure_fp8

PASSES = 5


def main() -> None:
    configs = [Fp8Config.from_name(name) for name in sys.argv[1:]]
    registry.ensure_registered(configs, torch.device("cuda"))
    runs = {config.name: measure_fp8.kernel_runner(config)[0] for config in configs}
    counter = torch.zeros(1, device="cuda")
    problems = {m: measure_fp8.make_problem(m, 8192, 8192) for m in (1, 16)}
    rows = {}
    for _ in range(PASSES):
        for m, problem in problems.items():
            add_alone = benchmark.graph_time_us(lambda *_: counter.add_(1), problem.input_sets, calls=20)
            rows.setdefault((m, "add alone"), []).append(add_alone)
            for name, run in runs.items():
                back = benchmark.graph_time_us(run, problem.input_sets, calls=20)
                apart = benchmark.graph_time_us(
                    lambda *s, run=run: (run(*s), counter.add_(1)), problem.input_sets, calls=20
                )
                rows.setdefault((m, f"{name} back to back"), []).append(back)
                rows.setdefault((m, f"{name} apart, less the add"), []).append(apart - add_alone)
    for (m, label), times in rows.items():
        print(f"M={m:3d} {label:75s} {statistics.median(times):7.2f} us  ({min(times):.2f}-{max(times):.2f})")


if __name__ == "__main__":
    main()
