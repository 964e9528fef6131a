"""Low-bit-accumulator GEMM (seed 002) speed: our kernel's forward and each STE's backward (the variant dispatch
runs for the shape: `cutlass_ext` rows, their `variant` column; `--variants` adds others) beside the plain PyTorch
chunked emulation (`lowbit.reference` on the GPU) and, where `peers/lba_fc` holds the authors' torch extension
(github itayhubara/qlora, branch lba, folder lba_fc), their kernel; one run, one device.

    python python/bench_lowbit.py [--shapes 256x256x1024 1024 2048 4096] [--variants NAME ...]
                                  [--no-authors] [--out sweeps/results/h200/lowbit_gemm.csv]

TFLOP/s-equivalent = 2·M·N·K / time (CUDA events, median; the emulation once per shape past 10^11 FLOP). Backward
rows time `torch.autograd.grad` of both operands after one forward (the recursive STE's forward also records the
last overflowing chunk per output). The authors' kernel takes exp_bias = 2^(E−1) − b_acc (anchors README: their
b_prod = b_acc + 2, the paper's M7E4 b_acc = 10, b_prod = 12 at exp_bias = −2). Writes CSV + PNG.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd
import torch
from bench_gemm import parse_shape  # python/ is on sys.path when a script here runs
from script_device import require_cuda

from cutlass_ext import benchmark, registry
from cutlass_ext.lowbit import kernel
from cutlass_ext.lowbit.format import LowbitFormat
from cutlass_ext.lowbit.reference import lowbit_matmul_fmt
from cutlass_ext.tuned import gpu_key

DEFAULT_SHAPES = ["256x256x1024", "1024", "2048", "4096"]
PEER_DIR = Path("peers/lba_fc")


def time_us(run, repeats: int) -> float:
    """Median of `repeats` timed calls after one warm-up call (which also builds the kernel library)."""
    run()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def authors_kernel():
    """The authors' `matmul(x (b, m, k), w (n, k), bit_mask, exp, chunk, exp_bias, uf)` built from PEER_DIR, or
    the reason it is absent. Their AT_DISPATCH lines take `.scalar_type()` on current torch."""
    sources = [PEER_DIR / "kernels" / "lba_fc_cuda.cpp", PEER_DIR / "kernels" / "lba_fc_cuda_kernel.cu"]
    if not all(s.is_file() for s in sources):
        return None, f"no {PEER_DIR}/kernels (fetch github itayhubara/qlora, branch lba, folder lba_fc)"
    from torch.utils import cpp_extension

    build = Path(tempfile.mkdtemp(prefix="lba_fc_"))
    for source in sources:
        text = re.sub(r"(AT_DISPATCH\w*\(\s*\w+)\.type\(\)", r"\1.scalar_type()", source.read_text())
        (build / source.name).write_text(text)
    try:
        module = cpp_extension.load(
            name="lba_fc_peer",
            sources=[str(build / s.name) for s in sources],
            build_directory=str(build),
            verbose=False,
        )
    except (RuntimeError, ImportError, OSError) as error:  # a peer that fails to build is a row with its reason
        return None, f"build failed: {str(error).splitlines()[0]}"
    finally:
        shutil.rmtree(build / "build", ignore_errors=True)
    return module, ""


def recomputed_share(a, b, fmt, config) -> float:
    """The share of (output, chunk) whose chains the recursive STE's backward recomputes, from the forward's
    record (kernels/lowbit_grad.cuh, ChainRecord): chunks after the last blocked one, up to the last with a
    first-level overflow (a forward thread records that chunk for all of its outputs)."""
    chunks = -(-a.shape[1] // fmt.chunk)
    if chunks > 65534:  # a record of L2 alone: every chunk after it is recomputed
        return float("nan")
    fields = kernel._format_fields(fmt)
    _, record = torch.ops.cutlass_ext.lowbit_forward(a.detach()[None], b.detach()[None], *fields, True, config.name)
    record = record.long() & 0xFFFFFFFF
    last_blocked, last_failed = (record & 0xFFFF) - 1, (record >> 16) - 1
    return float(((last_failed - last_blocked).clamp(min=0) / chunks).mean())


def measure_shape(shape, fmt, args, peer) -> list[dict]:
    m, n, k = shape
    flop = 2.0 * m * n * k
    generator = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, generator=generator, device="cuda").requires_grad_()
    b = torch.randn(k, n, generator=generator, device="cuda").requires_grad_()
    g = torch.randn(m, n, generator=generator, device="cuda")
    rows = []

    def row(contender, direction, us, note="", variant=None):
        rows.append(
            {
                "m": m,
                "n": n,
                "k": k,
                "format": fmt.name,
                "contender": contender,
                "variant": variant,
                "direction": direction,
                "time_us": round(us, 2) if us else None,
                "tflops_equiv": round(flop / us / 1e6, 4) if us else None,
                "note": note,
            }
        )

    # ours as dispatch runs it (this GPU's tuned entry for the shape, else the default), then any named variants
    planned = kernel.plan(registry.device_info(torch.cuda.current_device()), m, n, k)[0]
    for config in dict.fromkeys([planned, *args.variants]):
        name = "cutlass_ext" if config == planned else f"cutlass_ext {config.name}"
        with torch.no_grad():
            forward_us = time_us(lambda config=config: kernel.matmul(a, b, fmt, config=config), args.repeats)
        row(name, "forward", forward_us, variant=config.name)
        for ste in kernel.STES:
            out = kernel.matmul(a, b, fmt, ste, config=config)
            us = time_us(lambda out=out: torch.autograd.grad(out, (a, b), g, retain_graph=True), args.repeats)
            note = f"{us / forward_us:.2f}x forward"
            if ste == "recursive-of":
                note += f"; chains recomputed in {recomputed_share(a, b, fmt, config):.1%} of (output, chunk)"
            row(name, f"backward {ste}", us, note, config.name)
        # The recursive STE recomputes a chunk's chains only where a first-level sum overflowed in it and the
        # second level lets its gradient through: its worst case, every chain recomputed, from a record saying so
        # (the last chunk for the first level, none for the second).
        chunks = -(-k // fmt.chunk)
        if chunks <= 65534:
            record = chunks << 16  # L1 + 1 = chunks, L2 + 1 = 0, as an int32's bits
            worst = torch.full((1, m, n), record - (1 << 32) * (record >= 1 << 31), dtype=torch.int32, device="cuda")
            operands = (a.detach()[None], b.detach()[None], g[None], worst, *kernel._format_fields(fmt))
            us = time_us(
                lambda operands=operands, c=config: torch.ops.cutlass_ext.lowbit_grads(
                    *operands, "recursive-of", kernel.DEFAULT_EPS1, kernel.DEFAULT_EPS2, True, True, c.name
                ),
                args.repeats,
            )
            row(
                name,
                "backward recursive-of, every chain",
                us,
                f"{us / forward_us:.2f}x forward (its worst case)",
                config.name,
            )
    if flop <= args.emulation_max_flop:
        repeats = 1 if flop > 1e11 else args.repeats
        with torch.no_grad():
            us = time_us(lambda: lowbit_matmul_fmt(a, b, fmt), repeats)
        row("pytorch emulation", "forward", us)
    else:
        row("pytorch emulation", "forward", None, f"skipped above {args.emulation_max_flop:.0e} FLOP")
    module, reason = peer
    if module is None:
        row("authors lba_fc", "forward", None, reason)
    elif k > 1024 * fmt.chunk:
        row("authors lba_fc", "forward", None, "K above its 1024-chunk limit")
    else:
        x, w = a.detach().unsqueeze(0).contiguous(), b.detach().T.contiguous()
        mask = -(2 ** (23 - fmt.man))
        exp_bias = 2 ** (fmt.exp - 1) - fmt.acc_bias
        with torch.no_grad():
            us = time_us(lambda: module.matmul(x, w, mask, fmt.exp, fmt.chunk, exp_bias, fmt.underflow), args.repeats)
            same = torch.equal(
                module.matmul(x, w, mask, fmt.exp, fmt.chunk, exp_bias, fmt.underflow)[0],
                kernel.matmul(a.detach(), b.detach(), fmt),
            )
        row("authors lba_fc", "forward", us, f"equal to ours bit for bit: {same}")
    kernel_us = next(r["time_us"] for r in rows if r["direction"] == "forward")
    for r in rows:
        if r["direction"] == "forward" and r["time_us"] and not r["contender"].startswith("cutlass_ext"):
            r["note"] = f"{r['time_us'] / kernel_us:.1f}x our time" + (f"; {r['note']}" if r["note"] else "")
    return rows


def plot(frame: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = frame.dropna(subset=["tflops_equiv"]).copy()
    frame["shape"] = frame.apply(lambda r: f"{r.m}x{r.n}x{r.k}", axis=1)
    # dispatch's rows are `cutlass_ext` (their variant in its own column), named variants keep their names
    frame["series"] = frame.contender + " " + frame.direction
    formats = list(dict.fromkeys(frame.format))  # one panel per format (underflow on / off), same series colors
    series = list(dict.fromkeys(frame.series))
    figure, axes = plt.subplots(1, len(formats), figsize=(7 * len(formats), 5.5), sharey=True, squeeze=False)
    for axis, fmt in zip(axes[0], formats):
        rows = frame[frame.format == fmt]
        table = rows.pivot_table(index="shape", columns="series", values="tflops_equiv", sort=False)
        table = table.reindex(columns=[name for name in series if name in table.columns])
        colors = [plt.cm.tab10(series.index(name) % 10) for name in table.columns]
        table.plot(kind="bar", logy=True, rot=0, ax=axis, color=colors, legend=False)
        axis.set_title(fmt)
        axis.set_ylabel("TFLOP/s-equivalent (2·M·N·K / time)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    dispatched = frame.variant[frame.contender == "cutlass_ext"].dropna().unique() if "variant" in frame else []
    named = f" ({dispatched[0]})" if len(dispatched) == 1 else " (cutlass_ext: the tuned variant per shape)"
    figure.suptitle(f"Low-bit-accumulator GEMM on {frame.gpu.iloc[0]}{named}")
    figure.tight_layout(rect=(0, 0.1, 1, 1))
    plt.savefig(path, dpi=120)
    plt.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", type=parse_shape, default=[parse_shape(s) for s in DEFAULT_SHAPES])
    parser.add_argument("--man", type=int, default=7)
    parser.add_argument("--exp", type=int, default=4)
    parser.add_argument("--chunk", type=int, default=16)
    parser.add_argument("--underflow", choices=["on", "off", "both"], default="both")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument(
        "--variants",
        nargs="*",
        default=[],
        type=kernel.LowbitKernelConfig.from_name,
        metavar="NAME",
        help="more kernel variants to time (e.g. lowbit_64x128x32_t4x8_w16)",
    )
    parser.add_argument(
        "--emulation-max-flop",
        type=float,
        default=2e11,
        help="time the PyTorch emulation up to this many FLOP (4096³ is 1.4e11)",
    )
    parser.add_argument("--no-authors", action="store_true", help="leave out the authors' kernel (its build)")
    parser.add_argument("--out", type=Path, help="CSV path (default sweeps/results/<gpu>/lowbit_gemm.csv)")
    args = parser.parse_args(argv)
    require_cuda("bench_lowbit")
    out = args.out or Path("sweeps/results") / gpu_key(torch.cuda.get_device_name()) / "lowbit_gemm.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    base = LowbitFormat.make(args.man, args.exp, chunk=args.chunk)
    formats = {"on": [base], "off": [base.with_underflow(False)], "both": [base, base.with_underflow(False)]}
    peer = (None, "left out (--no-authors)") if args.no_authors else authors_kernel()
    rows = []
    for shape in args.shapes:
        for fmt in formats[args.underflow]:
            for r in measure_shape(shape, fmt, args, peer):
                rows.append(r)
                print(
                    f"{r['m']}x{r['n']}x{r['k']:<6} {r['format']:<24} {r['contender']:<18} {r['direction']:<26} "
                    f"{r['time_us'] or '-':>12} us  {r['tflops_equiv'] or '-':>8} TFLOP/s  {r['note']}",
                    flush=True,
                )
    frame = pd.DataFrame(rows)
    for column, value in benchmark.environment().items():
        frame[column] = value
    frame["command"] = "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])])
    frame.to_csv(out, index=False)
    plot(frame, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
