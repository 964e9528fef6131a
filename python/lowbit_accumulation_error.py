"""Accumulation error of low-bit accumulators: relative residual against FP64 over mantissa bits M, exponent bits E,
chunk length and K, with the seed's Table 1 event counts (seed 002, sections 2.3 and 3).

    python python/lowbit_accumulation_error.py            # on the GPU: the kernel through cutlass_ext.lowbit
    python python/lowbit_accumulation_error.py --quick    # CPU reference, a few seconds

A, B ~ N(0, 1), (m, K) @ (K, n). Biases are set per GEMM from the output's largest exponent (`dynamic_bias`, the
seed's Llama runs), so each E shows its range and each M its swamping at the data's own scale. Writes into --out:
lowbit_accumulation_error.csv (relres per M, E, chunk, K, underflow on and off), lowbit_accumulation_events.csv
(Table 1 counts on a subset, from the reference, underflow on) and lowbit_accumulation_error.png (underflow on).
"""

from __future__ import annotations

import lowbit_common as common
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from cutlass_ext import lowbit  # noqa: E402
from cutlass_ext.numerics import relative_residual  # noqa: E402

FULL = dict(
    mans=range(4, 17),
    exps=(3, 4, 5),
    chunks=(1, 4, 16, 64, 256),
    ks=(64, 256, 1024, 4096, 16384, 65536),
    size=64,
    event_mans=(4, 7, 10, 16),
    event_k=4096,
    event_size=32,
)
QUICK = dict(mans=(4, 7), exps=(4,), chunks=(1, 16), ks=(64, 256), size=8, event_mans=(4, 7), event_k=64, event_size=4)


def config_for(man: int, exp: int, chunk: int, underflow: bool = True) -> lowbit.LowbitConfig:
    return lowbit.LowbitConfig(lowbit.LowbitFormat.make(man, exp, chunk=chunk, underflow=underflow), dynamic_bias=True)


def relres_rows(grid: dict, device: torch.device, generator: torch.Generator) -> list[dict]:
    rows = []
    size = grid["size"]
    for k in grid["ks"]:
        a = torch.randn(size, k, generator=generator).to(device)
        b = torch.randn(k, size, generator=generator).to(device)
        exact = a.double() @ b.double()
        fp32 = relative_residual(a @ b, exact)
        for exp in grid["exps"]:
            for man in grid["mans"]:
                for chunk in grid["chunks"]:
                    if chunk > k:  # one chunk of K: chunk = K's chain, with a product bias set for a longer chunk
                        continue
                    for underflow in (True, False):
                        config = config_for(man, exp, chunk, underflow)
                        fmt = lowbit.dynamic_format(a, b, config.format)
                        relres = relative_residual(lowbit.matmul(a, b, config), exact)
                        rows.append(
                            dict(
                                man=man,
                                exp=exp,
                                chunk=chunk,
                                underflow=underflow,
                                k=k,
                                m=size,
                                n=size,
                                acc_bias=fmt.acc_bias,
                                prod_bias=fmt.prod_bias,
                                relres=relres,
                                relres_fp32=fp32,
                            )
                        )
        print(f"K={k}: {len(rows)} rows")
    return rows


def event_rows(grid: dict, device: torch.device, generator: torch.Generator) -> list[dict]:
    size, k = grid["event_size"], grid["event_k"]
    a = torch.randn(size, k, generator=generator).to(device)
    b = torch.randn(k, size, generator=generator).to(device)
    rows = []
    for exp in grid["exps"]:
        for man in grid["event_mans"]:
            for chunk in grid["chunks"]:
                fmt = lowbit.dynamic_format(a, b, config_for(man, exp, chunk).format)
                events = lowbit.lowbit_matmul_events(a, b, fmt)
                rows.append(
                    dict(
                        man=man,
                        exp=exp,
                        chunk=chunk,
                        k=k,
                        m=size,
                        n=size,
                        acc_bias=fmt.acc_bias,
                        prod_bias=fmt.prod_bias,
                        **events,
                    )
                )
    return rows


def plot(table, path) -> None:
    table = table[table.underflow]
    exps = sorted(table.exp.unique())
    figure, axes = plt.subplots(2, len(exps), figsize=(4.5 * len(exps), 7.5), squeeze=False)
    man_ref = 7 if 7 in set(table.man) else int(table.man.min())
    k_ref = int(table.k.max())
    for column, exp in enumerate(exps):
        by_k = table[(table.exp == exp) & (table.man == man_ref)]
        by_m = table[(table.exp == exp) & (table.k == k_ref)]
        for chunk, group in by_k.groupby("chunk"):
            axes[0, column].loglog(group.k, group.relres, marker="o", label=f"chunk {chunk}")
        for chunk, group in by_m.groupby("chunk"):
            axes[1, column].semilogy(group.man, group.relres, marker="o", label=f"chunk {chunk}")
        fp32 = table[table.exp == exp].groupby("k").relres_fp32.first()
        axes[0, column].loglog(fp32.index, fp32.values, "k--", label="FP32")
        axes[0, column].set(title=f"M{man_ref}E{exp}", xlabel="K", ylabel="relres vs FP64")
        axes[1, column].set(title=f"E{exp}, K={k_ref}", xlabel="mantissa bits M", ylabel="relres vs FP64")
        axes[0, column].legend(fontsize=7)
        axes[1, column].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv=None) -> None:
    args = common.parser(__doc__).parse_args(argv)
    device = common.device_for(args.quick)
    out = common.out_folder(args.out, device)
    grid = QUICK if args.quick else FULL
    generator = torch.Generator().manual_seed(args.seed)
    clock = common.Stopwatch()
    table = common.write_csv(relres_rows(grid, device, generator), out / "lowbit_accumulation_error.csv", device)
    common.write_csv(event_rows(grid, device, generator), out / "lowbit_accumulation_events.csv", device)
    plot(table, out / "lowbit_accumulation_error.png")
    print(f"done in {clock():.1f} s")


if __name__ == "__main__":
    main()
