"""Accuracy of `cutlass_ext.ozaki` at each moduli count against cuBLAS SGEMM, on urand, the seed's types 1–4 and
STARS-H-like matrices (`cutlass_ext.ozaki.inputs`), K up to 65536: ‖C − ref‖_F/‖ref‖_F against FP64.

    python python/ozaki_accuracy.py --out sweeps/results/h200/ozaki_accuracy.csv

Prints, per input, the error of each contender and its ratio to SGEMM's, and the fewest moduli within 1.1x SGEMM
everywhere (the criterion `DEFAULT_MODULI` is chosen by); exits non-zero if the default misses it anywhere.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import pandas as pd
import torch

from cutlass_ext import benchmark, numerics, ozaki
from cutlass_ext.ozaki.inputs import KINDS, accuracy_inputs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ozaki_gemmul8 import LIBRARY, Gemmul8  # noqa: E402
from script_device import checked, require_cuda  # noqa: E402

TOLERANCE = 1.1  # within 1.1x SGEMM's error


def sgemm(a, b):
    previous = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    try:
        return a @ b
    finally:
        torch.backends.cuda.matmul.fp32_precision = previous


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--ks", type=int, nargs="+", default=[1024, 4096, 16384, 65536])
    parser.add_argument("--size", type=int, default=512, help="m = n")
    parser.add_argument("--moduli", type=checked(ozaki.check_moduli_count, int), nargs="+", default=[6, 7, 8, 9])
    parser.add_argument("--seeds", type=int, default=2, help="input draws per (kind, k); the worst ratio counts")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    require_cuda("ozaki_accuracy")

    peer = Gemmul8() if LIBRARY.is_file() else None
    rows = []
    for kind in args.kinds:
        for k in args.ks:
            for seed in range(args.seeds):
                a, b = accuracy_inputs(kind, args.size, k, args.size, seed=seed)
                exact = a.double() @ b.double()
                row = {"kind": kind, "k": k, "seed": seed, "sgemm": numerics.relative_residual(sgemm(a, b), exact)}
                for count in args.moduli:
                    row[f"int8x{count}"] = numerics.relative_residual(ozaki.gemm(a, b, moduli=count), exact)
                if peer is not None:
                    for count in (7, 8):
                        row[f"gemmul8 {count} fast"] = numerics.relative_residual(peer.sgemm(a, b, count), exact)
                rows.append(row)
    table = pd.DataFrame(rows)
    contenders = [c for c in table.columns if c.startswith(("int8x", "gemmul8"))]
    worst = table.groupby(["kind", "k"])[["sgemm", *contenders]].max()
    # per draw first, then the worst: the largest ratio of any seed, not the ratio of the columns' maxima
    ratios = table[contenders].div(table["sgemm"], axis=0).groupby([table["kind"], table["k"]]).max()
    with pd.option_context("display.width", 220, "display.max_columns", 20):
        print("relative residual (worst over seeds):")
        print(worst.to_string(float_format=lambda v: f"{v:.2e}"))
        print("\nratio to SGEMM:")
        print(ratios.to_string(float_format=lambda v: f"{v:.2f}"))
    passing = [c for c in args.moduli if (ratios[f"int8x{c}"] <= TOLERANCE).all()]
    print(f"\nmoduli counts within {TOLERANCE}x SGEMM on every input: {passing}")
    if args.out:
        for column, value in benchmark.environment().items():
            table[column] = value
        table["command"] = shlex.join(["python"] + sys.argv)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out, index=False)
        print(f"wrote {args.out}")
    if ozaki.DEFAULT_MODULI in args.moduli and ozaki.DEFAULT_MODULI not in passing:
        sys.exit(f"the default, {ozaki.DEFAULT_MODULI} moduli, misses {TOLERANCE}x SGEMM somewhere")


if __name__ == "__main__":
    main()
