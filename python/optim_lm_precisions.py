"""Seed 004 Table 4 on a language model: train_lm.py in five precisions over a few seeds, side by side.

    python python/optim_lm_precisions.py [--seeds 0 1 2] [--steps 1500] [--device cuda] [--out sweeps/results/h200/]

Trains the character-level transformer of train_lm.py in FP32, mixed precision, BF16 with nearest, stochastic and
Kahan updates, each precision with the same seeds (the same initial weights and batches per seed). Writes
optim_lm_precisions.csv (one row per run: final validation and training loss, time), optim_lm_curves.csv (every
run's validation curve) and optim_lm_precisions.png (curves, mean over seeds), and prints mean ± std per precision
and each one's gap to FP32. The seed's pattern: nearest clearly worse, stochastic rounding and Kahan within noise of
FP32.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch
import train_lm


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per precision: mean and std of the final validation loss over seeds, and the mean's gap to FP32's."""
    table = runs.groupby("precision", sort=False)["final_val_loss"].agg(["mean", "std", "count"])
    table["std"] = table["std"].fillna(0.0)
    if "fp32" in table.index:
        table["gap_to_fp32"] = table["mean"] - table.loc["fp32", "mean"]
    return table


def plot(curves: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    mean = curves.groupby(["precision", "step"], sort=False)["val_loss"].agg(["mean", "min", "max"]).reset_index()
    for precision, rows in mean.groupby("precision", sort=False):
        for axis in axes:
            line = axis.plot(rows["step"], rows["mean"], label=precision)
            axis.fill_between(rows["step"], rows["min"], rows["max"], color=line[0].get_color(), alpha=0.15)
    late = mean[mean["step"] >= mean["step"].max() / 2]
    axes[1].set_xlim(late["step"].min(), late["step"].max())
    axes[1].set_ylim(late["min"].min() - 0.02, late["max"].max() + 0.02)
    axes[0].set_title("validation loss (mean over seeds; band: min to max)")
    axes[1].set_title("second half of training")
    for axis in axes:
        axis.set_xlabel("step")
        axis.set_ylabel("validation loss (nats per byte)")
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None) -> pd.DataFrame:
    parser = train_lm.build_parser()
    parser.description = __doc__.split("\n\n")[0]
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--precisions", nargs="+", choices=train_lm.PRECISIONS, default=list(train_lm.PRECISIONS))
    args = train_lm.parse(parser, argv)
    if args.seed != parser.get_default("seed"):
        parser.error("--seed: this script runs each of --seeds")
    if args.precision != parser.get_default("precision"):
        parser.error("--precision: this script runs each of --precisions")
    base = train_lm.config_from_args(args)
    try:
        train_lm.validate(base)
    except ValueError as error:
        parser.error(str(error))
    seeds = args.seeds[:1] if args.quick else args.seeds
    out = args.out or train_lm.default_out(torch.device(base.device))
    out.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "python/optim_lm_precisions.py", *(argv if argv is not None else sys.argv[1:])])

    runs, curves = [], []
    for seed in seeds:  # seeds outermost: an interrupted run still has every precision of the first seeds
        for precision in args.precisions:
            result = train_lm.train(replace(base, precision=precision, seed=seed))
            curves.append(result.pop("curve"))
            runs.append({**result, "command": command})
            pd.DataFrame(runs).to_csv(out / "optim_lm_precisions.csv", index=False)
            pd.concat(curves, ignore_index=True).to_csv(out / "optim_lm_curves.csv", index=False)
    runs, curves = pd.DataFrame(runs), pd.concat(curves, ignore_index=True)
    plot(curves, out / "optim_lm_precisions.png")

    print(f"final validation loss after {base.steps} steps ({len(seeds)} seeds, {base.optimizer}):")
    print(summary(runs).to_string(float_format=lambda v: f"{v:.4f}"))
    return runs


if __name__ == "__main__":
    main()
