"""Time FP8 variants from given kernel-cache folders side by side: two builds of one variant from different kernel
sources (a variant's name keys its symbols, so each build runs in its own process; compare each to a shared
baseline and to cuBLAS promoted, timed in the same passes), or variants built from different kernel sources (an
edited header changes every variant's cache key; the older builds stay in their folders under their old keys).
`--floor` adds cuBLAS with fast accumulation and a plain read of the weights (decode's DRAM floor); `--row-wise`
times row-wise scales.

    python python/ab_fp8_libraries.py [--floor] [--row-wise] 8192x8192x8192 NAME@CACHE_DIR [NAME@CACHE_DIR ...]

Each shape: the accuracy gate (sweeps.measure_fp8's problem), then graph replay in 5 round-robin passes, every
other one in reverse order; prints the median, TFLOP/s and the passes' spread.
"""

import argparse
import glob
import json
import statistics
from pathlib import Path

import torch

from cutlass_ext import benchmark, ops, peers_fp8, registry
from cutlass_ext.fp8_config import OUT_DTYPES, Fp8Config
from sweeps import measure_fp8

ROUNDS = 5


def library_of(name: str, cache_dir: str) -> str:
    """The library in `cache_dir`'s sm_90a kernel cache that holds variant `name`: its newest build where the folder
    holds builds from several kernel sources (printed, so that a log says which one ran)."""
    found = []
    for path in glob.glob(f"{cache_dir}/kernels/sm_90a/*/manifest.json"):
        manifest = json.loads(Path(path).read_text())
        for fields in manifest["configs"]:
            try:
                config = Fp8Config(**dict(fields, tile=tuple(fields["tile"]), cluster=tuple(fields["cluster"])))
            except (KeyError, TypeError, ValueError):  # another family's library, or fields this version lacks
                continue
            if config.name == name:
                found.append(Path(path).parent / manifest["library"])
    if not found:
        raise SystemExit(f"{name} is not in {cache_dir}")
    newest = max(found, key=lambda library: (library.parent / "manifest.json").stat().st_mtime)
    print(f"{name}: {newest.parent} (newest of {len(found)})")
    return str(newest)


def row_wise_sets(input_sets):
    """The same inputs with one scale per row of a and of b (scale_a (M, 1), scale_b (N, 1)), equal to the tensor's."""
    return [
        (
            a,
            b,
            scale_a.reshape(1, 1).expand(a.shape[0], 1).contiguous(),
            scale_b.reshape(1, 1).expand(b.shape[0], 1).contiguous(),
        )
        for a, b, scale_a, scale_b in input_sets
    ]


def scales_as_given(config: Fp8Config):
    """A runner of one variant that passes the scales' shapes through (measure_fp8's runner makes them one value)."""
    out_dtype = OUT_DTYPES[config.out_dtype]
    return lambda a, b, scale_a, scale_b: ops.gemm_fp8(a, b, scale_a, scale_b, None, out_dtype, [config.name])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shapes", help="MxNxK[,MxNxK ...]")
    parser.add_argument("variants", nargs="+", metavar="NAME@CACHE_DIR")
    parser.add_argument("--floor", action="store_true", help="add cuBLAS fast accumulation and the weights read")
    parser.add_argument("--sets", type=int, help="input sets to cycle through (default: benchmark.rotation_count)")
    parser.add_argument("--row-wise", action="store_true", help="row-wise scales (the gate's relres stays per tensor)")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
    configs = []
    for argument in args.variants:
        name, cache_dir = argument.split("@")
        config = Fp8Config.from_name(name)
        registry.register_library([config], library_of(name, cache_dir))
        configs.append(config)
    for m, n, k in shapes:
        problem = measure_fp8.make_problem(m, n, k, sets=args.sets)
        input_sets = row_wise_sets(problem.input_sets) if args.row_wise else problem.input_sets
        runs = {}
        for config in configs:
            run, _ = measure_fp8.kernel_runner(config)
            per_tensor = run(*problem.input_sets[0])
            relres = problem.relres(per_tensor)
            print(f"{m}x{n}x{k} {config.name} relres {relres:.4g} gate {problem.gate(config.mode, relres)}")
            if args.row_wise:  # equal scales per row: the same output as per tensor
                runs[config.name] = scales_as_given(config)
                same = torch.equal(runs[config.name](*input_sets[0]), per_tensor)
                print(f"{m}x{n}x{k} {config.name} row-wise output equals per-tensor output: {same}")
            else:
                runs[config.name] = run
        runs["cublas promoted"] = peers_fp8.scaled_mm(torch.bfloat16, "promoted")
        if args.floor:
            runs["cublas fast"] = peers_fp8.scaled_mm(torch.bfloat16, "fast")
            _, runs["weights read"] = peers_fp8.weights_read(problem.input_sets, 10)
        passes = {name: [] for name in runs}
        for pass_index in range(ROUNDS):
            for name, run in benchmark.pass_order(runs.items(), pass_index):
                passes[name].append(benchmark.graph_time_us(run, input_sets, problem.graph_calls, 10))
        for name, times in passes.items():
            median = statistics.median(times)
            print(
                f"{m}x{n}x{k} {name:70s} {median:9.1f} us {problem.flops / median / 1e6:7.0f} TFLOP/s  "
                f"passes {min(times):.0f}-{max(times):.0f}",
                flush=True,
            )
        del problem
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
