"""FP32-accurate GEMM on INT8 Tensor Cores: `cutlass_ext.ozaki` at each moduli count beside GEMMul8 (the same
scheme through cuBLAS's INT8 GEMM), cuBLAS SGEMM / TF32 and our split modes `tf32tf32` and `halfhalf`, on the same
inputs, in one run.

    python python/bench_ozaki.py --out sweeps/results/h200/ozaki.csv

Each row: median time of a call among calls enqueued back to back (CUDA events, warm-up, inputs rotated past L2;
the best of two round-robin passes), TFLOP/s (2·m·n·k / time) and the relative residual ‖C − ref‖_F/‖ref‖_F
against an FP64 product of the same urand(-1, 1) inputs. GEMMul8 runs when `peers/gemmul8/libgemmul8_peer.so`
exists (python/ozaki_gemmul8.py builds it). Writes the CSV with provenance and a plot of TFLOP/s against n beside it.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import pandas as pd
import torch

import cutlass_ext as ext
from cutlass_ext import benchmark, numerics, ozaki

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ozaki_gemmul8 import LIBRARY, Gemmul8  # noqa: E402
from script_device import checked, require_cuda  # noqa: E402

DEFAULT_SIZES = [1024, 2048, 4096, 8192, 16384]


def _cublas(precision: str):
    def run(a, b):
        previous = torch.backends.cuda.matmul.fp32_precision
        torch.backends.cuda.matmul.fp32_precision = precision
        try:
            return a @ b
        finally:
            torch.backends.cuda.matmul.fp32_precision = previous

    return run


def contenders(moduli_counts, variants, gemmul8_moduli, split_modes) -> dict:
    """name -> (family, setting, run(a, b))."""
    found = {
        "cublas fp32": ("cublas", "fp32", _cublas("ieee")),
        "cublas tf32": ("cublas", "tf32", _cublas("tf32")),
    }
    for mode in split_modes:
        found[f"ours {mode}"] = ("cutlass_ext", mode, lambda a, b, mode=mode: ext.gemm(a, b, mode=mode))
    for count in moduli_counts:
        found[f"ours int8x{count}"] = ("cutlass_ext", f"int8x{count}", lambda a, b, c=count: ozaki.gemm(a, b, moduli=c))
    for name in variants:
        config = ozaki.OzakiConfig.from_name(name)
        found[f"ours {name}"] = ("cutlass_ext", name, lambda a, b, c=config: ozaki.gemm(a, b, c.moduli, c))
    if gemmul8_moduli and LIBRARY.is_file():
        peer = Gemmul8()
        for count in gemmul8_moduli:
            for fast in (True, False):
                scaling = "fast" if fast else "accurate"
                found[f"gemmul8 {count} {scaling}"] = (
                    "gemmul8",
                    f"int8x{count} {scaling}",
                    lambda a, b, c=count, f=fast: peer.sgemm(a, b, c, f),
                )
    elif gemmul8_moduli:
        print(f"GEMMul8 skipped: {LIBRARY} is missing (python/ozaki_gemmul8.py builds it)")
    return found


def measure(size: int, runners: dict, repeats: int, rounds: int = 2) -> list[dict]:
    m = n = k = size
    sets = benchmark.rotation_count(4 * (m * k + k * n))
    generator = torch.Generator(device="cuda").manual_seed(size)
    input_sets = [
        (
            torch.rand(m, k, device="cuda", generator=generator) * 2 - 1,
            torch.rand(k, n, device="cuda", generator=generator) * 2 - 1,
        )
        for _ in range(sets)
    ]
    a, b = input_sets[0]
    exact = a.double() @ b.double()
    rows = {}
    for name, (family, setting, run) in runners.items():
        rows[name] = {
            "contender": name,
            "family": family,
            "setting": setting,
            "m": m,
            "n": n,
            "k": k,
            "relres": numerics.relative_residual(run(a, b), exact),
            "time_us": float("inf"),
        }
    del exact
    for round_index in range(rounds):
        for name in benchmark.pass_order(runners, round_index):
            time_us = benchmark.enqueued_time_us(runners[name][2], input_sets, repeats=repeats)
            rows[name]["time_us"] = min(rows[name]["time_us"], time_us)
    for row in rows.values():
        row["tflops"] = 2.0 * m * n * k / row["time_us"] / 1e6
    return list(rows.values())


def profile(size: int, runners: dict, names: list) -> None:
    """Each named contender's kernels at m = n = k = size, as torch.profiler times them (where the time goes)."""
    a = torch.rand(size, size, device="cuda") * 2 - 1
    b = torch.rand(size, size, device="cuda") * 2 - 1
    for name in names:
        run = runners[name][2]
        run(a, b)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profiler:
            for _ in range(3):
                run(a, b)
            torch.cuda.synchronize()
        print(f"{name} at {size}^3, per call:")
        for event in sorted(profiler.key_averages(), key=lambda e: -e.device_time_total)[:8]:
            print(f"  {event.device_time_total / 3 / 1000:9.3f} ms  {event.key[:110]}")


def plot(table: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 5))
    for name, group in table.groupby("contender", sort=False):
        style = "-" if group["family"].iloc[0] == "cutlass_ext" else "--"
        label = f"{name} (relres {group['relres'].median():.1e})"
        axis.plot(group["n"], group["tflops"], style, marker="o", label=label)
    axis.set_xscale("log", base=2)
    axis.set_xlabel("m = n = k")
    axis.set_ylabel("TFLOP/s")
    axis.set_title(f"FP32-accurate GEMM on {table['gpu'].iloc[0]}")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=DEFAULT_SIZES, help="m = n = k")
    moduli = checked(ozaki.check_moduli_count, int)
    parser.add_argument("--moduli", type=moduli, nargs="+", default=[6, 7, 8, 9], help="our moduli counts")
    parser.add_argument(
        "--variants",
        nargs="*",
        type=checked(ozaki.OzakiConfig.from_name),
        default=["ozaki_int8x8_128x256x128_c1x1_w8_p32", "ozaki_int8x8_128x256x128_c2x1_w8"],
        help="more of our variants, by name",
    )
    parser.add_argument("--profile", type=int, default=0, help="print each Ozaki contender's kernel times at this size")
    parser.add_argument("--gemmul8-moduli", type=int, nargs="*", default=[7, 8, 9])
    parser.add_argument("--split-modes", nargs="*", choices=ext.MODES, default=["tf32tf32", "halfhalf"])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, help="CSV to write (the plot goes beside it, .png)")
    args = parser.parse_args(argv)
    require_cuda("bench_ozaki")

    runners = contenders(args.moduli, args.variants, args.gemmul8_moduli, args.split_modes)
    if args.profile:
        profile(args.profile, runners, [n for n in runners if "int8x" in n or n.startswith("gemmul8")])
    rows = []
    for size in args.sizes:
        rows += measure(size, runners, args.repeats)
        torch.cuda.empty_cache()
    table = pd.DataFrame(rows)
    for column, value in benchmark.environment().items():
        table[column] = value
    table["command"] = shlex.join(["python"] + sys.argv)
    sgemm = table[table["contender"] == "cublas fp32"].set_index("n")
    table["vs_cublas_fp32"] = (table["tflops"] / table["n"].map(sgemm["tflops"])).round(3)
    table["relres_vs_cublas_fp32"] = (table["relres"] / table["n"].map(sgemm["relres"])).round(3)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(
            table[
                ["contender", "n", "time_us", "tflops", "relres", "vs_cublas_fp32", "relres_vs_cublas_fp32"]
            ].to_string(index=False, float_format=lambda v: f"{v:.4g}")
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out, index=False)
        plot(table, args.out.with_suffix(".png"))
        print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
