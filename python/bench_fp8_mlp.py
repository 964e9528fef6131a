"""A Llama-style MLP block in bf16 (torch.nn.Linear, cuBLAS) and in FP8 (ext.nn.Fp8Linear), speed and error in one run:

    python python/bench_fp8_mlp.py [--model llama3-70b] [--tokens 16 128 2048] [--out sweeps/results/<gpu>/fp8_mlp.csv]

The block is y = down(silu(gate(x)) · up(x)) without biases, as Llama's; weights bf16, normal with std 1/sqrt(fan-in)
like a trained layer's, x normal bf16. Contenders per token count: `bf16`, the block of torch.nn.Linear layers; and
`Fp8Linear.from_linear` of the same three layers with per-channel weight / per-token activation scales (`row`) and
per-tensor scales (`tensor`), each with promoted and fast accumulation: every call quantizes its activations
(ext.quantize_fp8) and runs gemm_fp8 with the tuned variant for its shape. Per row: the block's time per call with
CUDA events (`events_us`, host launch gaps included, as eager inference sees it) and replayed from a CUDA graph
(`graph_us`, the GPU's time alone), `speedup` (bf16's graph_us over the row's), and `relres`, the relative residual
against the block in FP64 on the same bf16 weights and inputs over the first tokens. The results folder defaults to
sweeps/results/<gpu>/ by the device's name; the command is recorded in each row. A PNG beside the CSV plots each
contender's speedup and relres per token count (`--plot-only` draws it from an existing CSV).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from script_device import require_cuda

import cutlass_ext as ext
from cutlass_ext import benchmark, fp8, registry, tuned

# hidden size and the MLP's intermediate size
MODELS = {"llama3-8b": (4096, 14336), "llama3-70b": (8192, 28672)}
REFERENCE_TOKENS = 64  # the FP64 block over the first tokens (rows are independent)
SCALINGS = ("row", "tensor")
ACCUMULATIONS = ("promoted", "fast")


class MlpBlock(torch.nn.Module):
    def __init__(self, gate: torch.nn.Module, up: torch.nn.Module, down: torch.nn.Module):
        super().__init__()
        self.gate, self.up, self.down = gate, up, down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


def bf16_block(hidden: int, intermediate: int, seed: int = 0) -> MlpBlock:
    generator = torch.Generator(device="cuda").manual_seed(seed)

    def layer(fan_in, fan_out):
        linear = torch.nn.Linear(fan_in, fan_out, bias=False, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            linear.weight.copy_(torch.randn(fan_out, fan_in, generator=generator, device="cuda") / fan_in**0.5)
        return linear

    return MlpBlock(layer(hidden, intermediate), layer(hidden, intermediate), layer(intermediate, hidden))


def fp8_block(block: MlpBlock, scaling: str, accum: str) -> MlpBlock:
    return MlpBlock(
        *(ext.nn.Fp8Linear.from_linear(layer, scaling, accum) for layer in (block.gate, block.up, block.down))
    )


@torch.no_grad()
def reference(block: MlpBlock, x: torch.Tensor) -> torch.Tensor:
    """The block in FP64 over the first tokens, layer by layer (one FP64 weight at a time)."""
    x = x[:REFERENCE_TOKENS].double()
    hidden = F.silu(x @ block.gate.weight.double().T) * (x @ block.up.weight.double().T)
    return hidden @ block.down.weight.double().T


def build_variants(hidden: int, intermediate: int, tokens: list[int], accums) -> None:
    """Every FP8 variant the block's GEMMs dispatch to, built in one parallel run before any timing (gemm_fp8 would
    build each at its first call, one at a time: ~75 s per kernel on a cold cache)."""
    device = torch.device("cuda", torch.cuda.current_device())
    shapes = [(m, n, k) for m in tokens for n, k in ((intermediate, hidden), (hidden, intermediate))]
    names = {
        name
        for m, n, k in shapes
        for accum in accums
        for name in fp8.variant_names(device, "e4m3", "e4m3", "bf16", accum, m, n, k)
    }
    registry.ensure_names_registered(sorted(names), device)


def measure(block, contenders, tokens: int, hidden: int, repeats: int) -> list[dict]:
    """Each contender checked against the FP64 block, then timed per call and from graph replay."""
    generator = torch.Generator(device="cuda").manual_seed(tokens)
    input_sets = [
        (torch.randn(tokens, hidden, generator=generator, device="cuda").to(torch.bfloat16),) for _ in range(2)
    ]
    expected = reference(block, input_sets[0][0])
    rows = []
    with torch.no_grad():
        for name, scaling, accum, candidate in contenders:
            relres = ext.numerics.relative_residual(candidate(*input_sets[0])[:REFERENCE_TOKENS], expected)
            events_us = benchmark.median_time_us(candidate, input_sets, warmup=3, repeats=repeats)
            calls = max(2, min(20, int(20_000 / events_us)))  # ~20 ms of replay per timing
            graph_us = benchmark.graph_time_us(candidate, input_sets, calls=calls)
            rows.append(
                {
                    "contender": name,
                    "scaling": scaling,
                    "accum": accum,
                    "tokens": tokens,
                    "events_us": round(events_us, 2),
                    "graph_us": round(graph_us, 2),
                    "relres": relres,
                }
            )
    bf16_us = next(row["graph_us"] for row in rows if row["contender"] == "bf16")
    for row in rows:
        row["speedup"] = round(bf16_us / row["graph_us"], 3)
    return rows


def plot(frame: pd.DataFrame, path: Path) -> None:
    """Speedup over bf16 (from graph replay) and relres against FP64, per contender, over the token counts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (speed, error) = plt.subplots(1, 2, figsize=(11, 4))
    labels = frame.contender + (" " + frame.scaling.fillna("") + " " + frame.accum.fillna("")).str.rstrip()
    for label, line in frame.assign(label=labels).groupby("label"):
        speed.plot(line.tokens, line.speedup, marker="o", label=label)
        error.plot(line.tokens, line.relres, marker="o", label=label)
    model = ", ".join(frame.model.unique())
    for axis, title in ((speed, "speedup over bf16 (CUDA graph)"), (error, "relres against FP64")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("tokens")
        axis.set_title(f"{model} MLP block: {title}")
        axis.legend(fontsize=7)
    error.set_yscale("log")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=list(MODELS), default="llama3-70b", help="hidden and intermediate sizes")
    parser.add_argument("--tokens", type=int, nargs="+", default=[16, 128, 2048], help="rows of x per call")
    parser.add_argument("--accums", nargs="+", choices=ACCUMULATIONS, default=list(ACCUMULATIONS))
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", type=Path, help="CSV path (default sweeps/results/<gpu>/fp8_mlp.csv)")
    parser.add_argument("--plot-only", action="store_true", help="draw the PNG from an existing --out CSV")
    args = parser.parse_args(argv)
    if args.plot_only:
        if args.out is None:
            parser.error("--plot-only draws from the CSV that --out names")
        frame = pd.read_csv(args.out)
        plot(frame, args.out.with_suffix(".png"))
        return frame
    require_cuda("bench_fp8_mlp")
    hidden, intermediate = MODELS[args.model]
    out = args.out or Path("sweeps/results") / tuned.gpu_key(torch.cuda.get_device_name()) / "fp8_mlp.csv"
    environment = {
        **benchmark.environment(),
        "command": shlex.join(["python", "python/bench_fp8_mlp.py", *sys.argv[1:]]),
    }
    build_variants(hidden, intermediate, args.tokens, args.accums)
    block = bf16_block(hidden, intermediate)
    contenders = [("bf16", "", "", block)]
    contenders += [
        ("fp8", scaling, accum, fp8_block(block, scaling, accum)) for scaling in SCALINGS for accum in args.accums
    ]
    rows = []
    for tokens in args.tokens:
        print(f"{args.model}: {tokens} tokens", file=sys.stderr, flush=True)
        measured = measure(block, contenders, tokens, hidden, args.repeats)
        rows += [
            {"model": args.model, "hidden": hidden, "intermediate": intermediate, **row, **environment}
            for row in measured
        ]
        out.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(out, index=False)  # every token count as it finishes
    frame = pd.DataFrame(rows)
    columns = ["tokens", "contender", "scaling", "accum", "events_us", "graph_us", "speedup", "relres"]
    with pd.option_context("display.width", 200):
        print(frame[columns].to_string(index=False))
    plot(frame, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return frame


if __name__ == "__main__":
    main()
