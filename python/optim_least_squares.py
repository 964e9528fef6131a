"""Seed 004 Figure 2: least-squares regression trained by SGD (batch 1) with BF16 weight updates.

    python python/optim_least_squares.py [--device cuda] [--seeds 16] [--steps 3000] [--out sweeps/results/h200/]

The seed's problem (section 3.1, "Theory Validation"): d = 10, x ~ N(0, 1), w* ~ U[0, 100), labels x·w* plus
N(0, 0.5²) noise, loss 1/2 (x·w - y)², lr 0.01, batch 1, w from 0. Five ways to train it:
  fp32            everything in FP32 (torch.optim.SGD);
  bf16-nearest    the 16-bit FPU: BF16 weights, forward/backward rounded to BF16 nearest, nearest weight updates;
  bf16-fwdbwd     forward/backward as in bf16-nearest, FP32 weights updated exactly (the seed's ablation: our SGD
                  on FP32 parameters);
  bf16-stochastic BF16 as bf16-nearest, stochastically rounded updates (Algorithm 2);
  bf16-kahan      BF16 as bf16-nearest, Kahan-compensated updates (Algorithm 3).
The BF16 optimizers compute in BF16 too (`--arithmetic bf16`, the seed's 16-bit FPU). Every seed is its own
dataset, w* and sample order, trained side by side as rows of one weight matrix. Writes
optim_least_squares.csv (training loss over the whole dataset in FP64, mean and spread over seeds, every
`--record-every` steps) and .png (log scale): nearest updates saturate orders of magnitude above FP32, the others
near it.
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import sys
from pathlib import Path

import pandas as pd
import torch
from script_device import default_device, device_name, require_device

from cutlass_ext import optim, tuned

VARIANTS = ("fp32", "bf16-nearest", "bf16-fwdbwd", "bf16-stochastic", "bf16-kahan")
DIMENSION, LABEL_NOISE, LR = 10, 0.5, 0.01


def default_out(device: torch.device) -> Path:
    gpu = tuned.gpu_key(torch.cuda.get_device_name(device)) if device.type == "cuda" else "cpu"
    return Path("sweeps") / "results" / gpu


def make_problem(seeds: int, samples: int, steps: int, device: torch.device):
    """Per seed: inputs (seeds, samples, d), labels (seeds, samples), w* (seeds, d) and the sample of each step."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(seeds, samples, DIMENSION, generator=generator, dtype=torch.float64)
    optimum = torch.rand(seeds, DIMENSION, generator=generator, dtype=torch.float64) * 100.0
    labels = (inputs @ optimum.unsqueeze(-1)).squeeze(-1)
    labels += LABEL_NOISE * torch.randn(seeds, samples, generator=generator, dtype=torch.float64)
    order = torch.randint(samples, (steps, seeds), generator=generator)
    return inputs.to(device), labels.to(device), optimum.to(device), order.to(device)


def bf16(values: torch.Tensor) -> torch.Tensor:
    """Round to BF16 nearest and widen back: one 16-bit FPU output."""
    return values.to(torch.bfloat16).float()


def gradient(weight: torch.Tensor, x: torch.Tensor, y: torch.Tensor, rounded: bool) -> torch.Tensor:
    """d/dw of 1/2 (x·w - y)² for one sample per row; `rounded`: every operator's output rounded to BF16 nearest
    (its inputs BF16, the dot product accumulated in FP32 as the seed's FMAC units do)."""
    if not rounded:
        return ((x * weight).sum(-1) - y).unsqueeze(-1) * x
    x, w = bf16(x), bf16(weight.float())
    residual = bf16(bf16((x * w).sum(-1)) - bf16(y))
    return bf16(residual.unsqueeze(-1) * x)


def training_loss(weight: torch.Tensor, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per seed: mean over the dataset of 1/2 (x·w - y)², in FP64."""
    residual = (inputs @ weight.double().unsqueeze(-1)).squeeze(-1) - labels
    return 0.5 * (residual**2).mean(-1)


def make_optimizer(variant: str, weight: torch.nn.Parameter, arithmetic: str, seed: int):
    if variant == "fp32":
        return torch.optim.SGD([weight], lr=LR)
    if variant == "bf16-fwdbwd":
        return optim.SGD([weight], lr=LR)  # FP32 parameters: updated plainly
    update = variant.removeprefix("bf16-")
    return optim.SGD([weight], lr=LR, update=update, arithmetic=arithmetic, seed=seed)


def train(variant: str, problem, steps: int, record_every: int, arithmetic: str, seed: int) -> list[dict]:
    inputs, labels, _, order = problem
    seeds = inputs.shape[0]
    weight_dtype = torch.float32 if variant in ("fp32", "bf16-fwdbwd") else torch.bfloat16
    weight = torch.nn.Parameter(torch.zeros(seeds, DIMENSION, dtype=weight_dtype, device=inputs.device))
    optimizer = make_optimizer(variant, weight, arithmetic, seed)
    rows_of_seeds = torch.arange(seeds, device=inputs.device)
    records = []
    for step in range(steps + 1):
        if step % record_every == 0 or step == steps:
            records.append((step, training_loss(weight.detach(), inputs, labels)))
        if step == steps:
            break
        x = inputs[rows_of_seeds, order[step]].float()
        y = labels[rows_of_seeds, order[step]].float()
        weight.grad = gradient(weight.detach(), x, y, rounded=variant != "fp32").to(weight_dtype)
        optimizer.step()
    rows = []
    for step, losses in records:
        losses = losses.cpu()
        rows.append(
            {
                "variant": variant,
                "step": step,
                "loss_mean": losses.mean().item(),
                "loss_min": losses.min().item(),
                "loss_max": losses.max().item(),
                "loss_log10_std": losses.log10().std().item() if seeds > 1 else 0.0,
            }
        )
    return rows


def plot(frame: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.4, 4.4))
    for variant, rows in frame.groupby("variant", sort=False):
        line = axis.plot(rows["step"], rows["loss_mean"], label=variant)
        axis.fill_between(rows["step"], rows["loss_min"], rows["loss_max"], color=line[0].get_color(), alpha=0.15)
    axis.set_yscale("log")
    axis.set_xlabel("iteration")
    axis.set_ylabel("training loss (mean over seeds; band: min to max)")
    axis.set_title(f"Least squares, d = {DIMENSION}, lr {LR}, batch 1 ({frame['seeds'].iloc[0]} seeds)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--device", type=device_name, default=default_device(), help="cpu or cuda (default: cuda where visible)"
    )
    parser.add_argument("--seeds", type=int, default=16, help="independent problems, averaged (at least 1)")
    parser.add_argument("--samples", type=int, default=1000, help="dataset size of each problem")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--record-every", type=int, default=20)
    parser.add_argument(
        "--arithmetic",
        choices=("bf16", "fp32"),
        default="bf16",
        help="how the BF16 optimizers compute the update (bf16: the seed's 16-bit FPU)",
    )
    parser.add_argument("--seed", type=int, default=0, help="stochastic rounding's seed")
    parser.add_argument("--out", type=Path, help="results folder (default sweeps/results/<gpu>/)")
    parser.add_argument("--quick", action="store_true", help="CPU, 2 seeds, 300 steps (CI smoke test)")
    args = parser.parse_args(argv)
    for name in ("seeds", "samples", "steps", "record_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.quick:
        args.device, args.seeds, args.steps = "cpu", 2, 300
    device = torch.device(args.device)
    require_device(device, "optim_least_squares")
    out = args.out or default_out(device)
    out.mkdir(parents=True, exist_ok=True)

    problem = make_problem(args.seeds, args.samples, args.steps, device)
    rows = []
    for variant in VARIANTS:
        rows.extend(train(variant, problem, args.steps, args.record_every, args.arithmetic, args.seed))
    frame = pd.DataFrame(rows).assign(
        seeds=args.seeds,
        samples=args.samples,
        arithmetic=args.arithmetic,
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        torch=torch.__version__,
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        command=shlex.join(["python", "python/optim_least_squares.py", *(argv if argv is not None else sys.argv[1:])]),
    )
    frame.to_csv(out / "optim_least_squares.csv", index=False)
    plot(frame, out / "optim_least_squares.png")

    tail = frame[frame["step"] >= args.steps * 0.8].groupby("variant", sort=False)["loss_mean"].mean()
    print(f"training loss over the last 20% of {args.steps} steps (mean over {args.seeds} seeds):")
    print(tail.to_string(float_format=lambda v: f"{v:.4g}"))
    return frame


if __name__ == "__main__":
    main()
