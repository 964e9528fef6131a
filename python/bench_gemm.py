"""Side-by-side FP32 GEMM benchmark: our modes against cuBLAS FP32 / TF32, Triton tf32x3 and CUTLASS 3xTF32
(example 27's kernel), in one run.

    python python/bench_gemm.py --out sweeps/results/h100/gemm_corrected.csv

Each row: median time (CUDA events, warm-up, inputs rotated past L2; the best of two round-robin passes over the
contenders), TFLOP/s, and the relative residual against an FP64 product of the same inputs. Prints the table with
ratios to cuBLAS; writes it as CSV with provenance.
`--variants NAME ...` adds rows for specific kernel variants (their kernel alone, for choosing defaults; packed
variants read operands packed beforehand).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import pandas as pd
import torch
from script_device import checked, require_cuda

import cutlass_ext as ext
from cutlass_ext import benchmark, corrected_sm90, numerics, ops, peers, registry, scaling
from cutlass_ext.families.sm80.config import KernelConfig
from cutlass_ext.families.sm90.config import Sm90Config as SplitConfig
from cutlass_ext.gemm import dispatched_variant

DEFAULT_SHAPES = ["1024", "2048", "4096", "8192", "16384", "1024x1024x65536"]


def parse_shape(text: str) -> tuple[int, int, int]:
    values = [int(v) for v in text.split("x")]
    if len(values) == 1:
        return values[0], values[0], values[0]
    if len(values) != 3:
        raise argparse.ArgumentTypeError(f"shape {text!r} must be N or MxNxK")
    return tuple(values)


def check_variant(name: str) -> None:
    """A name `contenders` times on its own: a Hopper corrected (split) variant or an sm80-family kernel."""
    if not SplitConfig.is_name(name):
        KernelConfig.from_name(name)


def contenders(modes, variants, input_sets, repeats):
    """(family, mode, name, run, prepare): prepare, if not None, turns each (a, b) into what run reads."""
    yield "cublas", "fp32", "torch.matmul ieee", peers.cublas("ieee"), None
    yield "cublas", "tf32", "torch.matmul tf32", peers.cublas("tf32"), None
    yield ("triton", "tf32x3", *peers.triton_tf32x3(input_sets, repeats), None)
    yield ("cutlass", "3xtf32", *peers.cutlass_3xtf32())
    for mode in modes:
        name = dispatched_variant(*input_sets[0], mode)  # what dispatch runs at this shape on this GPU
        yield "cutlass_ext", mode, name, lambda a, b, mode=mode: ext.gemm(a, b, mode=mode), None
    for name in variants:
        if SplitConfig.is_name(name):
            yield from _split_contenders(name)
            continue
        config = KernelConfig.from_name(name)
        yield (
            "cutlass_ext_variant",
            config.mode,
            name,
            lambda a, b, name=name: ops.gemm(a, b, [name]),
            scaling.packed_unscaled if config.operands == "packed" else None,
        )


def _split_contenders(name: str):
    """A Hopper corrected variant end to end (split pass + kernel), and its kernel alone on planes split before."""
    mode = SplitConfig.from_name(name).mode
    yield "cutlass_ext_sm90", mode, name, lambda a, b: corrected_sm90.product(a, b, mode, [name]), None
    format = ops.PLANES_HALF if mode == "halfhalf" else ops.PLANES_TF32

    def planes(a, b):
        return ops.split_planes(a, None, format), ops.split_planes(b.mT, None, format)

    def kernel(a_planes, b_planes):
        return ops.gemm_split(*a_planes, *b_planes, None, None, [name])

    yield "cutlass_ext_sm90_kernel", mode, name, kernel, planes


def stored(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The same matrix, stored row-major (`r`) or column-major (`c`, a transposed view)."""
    return t.t().contiguous().t() if layout == "c" else t


def measure(shape, modes, variants, repeats, layouts="rr", rounds: int = 2):
    """Each contender checked against the FP64 product, then timed in `rounds` round-robin passes over all of
    them, the best pass kept: the FP16 Tensor Cores run near their power limit, and a single pass let the order
    of the rows move a row by up to 7% (the same halfhalf path read 181 and 195 TFLOP/s in one run)."""
    m, n, k = shape
    generator = torch.Generator(device="cuda").manual_seed(m * 31 + n * 17 + k)
    bytes_per_set = 4 * (m * k + k * n + m * n)
    input_sets = [
        (
            stored(torch.randn(m, k, device="cuda", generator=generator), layouts[0]),
            stored(torch.randn(k, n, device="cuda", generator=generator), layouts[1]),
        )
        for _ in range(benchmark.rotation_count(bytes_per_set))
    ]
    a, b = input_sets[0]
    ref = a.double() @ b.double()
    entries = list(contenders(modes, variants, input_sets, repeats))
    residuals, times = {}, {i: [] for i in range(len(entries))}
    for round_index in range(rounds):
        for i, (_, _, _, run, prepare) in benchmark.pass_order(enumerate(entries), round_index):
            sets = [prepare(*inputs) for inputs in input_sets] if prepare else input_sets
            if round_index == 0:
                residuals[i] = numerics.relative_residual(run(*sets[0]), ref)
            times[i].append(benchmark.median_time_us(run, sets, repeats=repeats))
            del sets
    rows = []
    for i, (family, mode, name, _, _) in enumerate(entries):
        time_us, relres = min(times[i]), residuals[i]
        rows.append(
            {
                "family": family,
                "mode": mode,
                "name": name,
                "layouts": layouts,
                "m": m,
                "n": n,
                "k": k,
                "batch": 1,
                "time_us": round(time_us, 2),
                "tflops": round(2 * m * n * k / time_us / 1e6, 2),
                "relres": relres,
            }
        )
        print(
            f"{m}x{n}x{k} {family:20s} {mode:9s} {rows[-1]['tflops']:8.1f} TFLOP/s relres {relres:.2e}",
            file=sys.stderr,
            flush=True,
        )
    del input_sets, ref
    torch.cuda.empty_cache()
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--shapes",
        type=parse_shape,
        nargs="+",
        default=[parse_shape(s) for s in DEFAULT_SHAPES],
        help="N (for N x N x N) or MxNxK",
    )
    parser.add_argument("--modes", nargs="+", choices=ext.MODES, default=list(ext.MODES), help="our modes to run")
    parser.add_argument(
        "--variants", nargs="*", type=checked(check_variant), default=[], help="kernel variant names to time alone"
    )
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--layouts",
        nargs="+",
        default=["rr"],
        choices=["rr", "rc", "cr", "cc"],
        help="how A and B are stored: r row-major, c column-major (a transposed view)",
    )
    parser.add_argument("--out", type=Path, help="CSV to write")
    args = parser.parse_args(argv)
    require_cuda("bench_gemm")

    if args.variants:
        registry.ensure_names_registered(args.variants, torch.device("cuda"))
    rows = [
        row
        for layouts in args.layouts
        for shape in args.shapes
        for row in measure(shape, args.modes, args.variants, args.repeats, layouts)
    ]
    table = pd.DataFrame(rows)
    for column, value in benchmark.environment().items():
        table[column] = value
    table["command"] = shlex.join(["python"] + sys.argv)
    shape_key = (
        table["layouts"] + ":" + table["m"].astype(str) + "x" + table["n"].astype(str) + "x" + table["k"].astype(str)
    )
    baselines = (
        ("vs_cublas_fp32", "cublas", "fp32"),
        ("vs_cublas_tf32", "cublas", "tf32"),
        ("vs_cutlass_3xtf32", "cutlass", "3xtf32"),
    )
    for column, family, mode in baselines:
        baseline = table[(table["family"] == family) & (table["mode"] == mode)]
        baseline_tflops = dict(zip(shape_key[baseline.index], baseline["tflops"]))
        table[column] = (table["tflops"] / shape_key.map(baseline_tflops)).round(3)
    with pd.option_context("display.width", 250, "display.max_columns", 20, "display.max_colwidth", 44):
        print(
            table[
                ["family", "mode", "layouts", "m", "n", "k", "tflops", "relres"]
                + [column for column, _, _ in baselines]
            ].to_string(index=False, float_format=lambda v: f"{v:.3g}")
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out, index=False)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
