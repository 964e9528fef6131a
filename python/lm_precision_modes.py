"""The character-level language model of train_lm.py trained in FP32 with its products in four precisions, unchanged
model code, one switch:

    python python/lm_precision_modes.py [--steps 1000] [--seed 0] [--out sweeps/results/<gpu>/]

`fp32` is torch as it comes (cuBLAS SGEMM on FP32 units; torch's default float32 matmul precision, IEEE); `tf32`,
`tf32tf32` and `halfhalf` run the same model under `ext.precision(mode)`, which routes every nn.Linear's product
(forward and both backward products) through `ext.gemm`: TF32 Tensor Cores without correction (~3e-4 relative
error per product), and the two corrected modes, FP32-accurate on TF32 and FP16 Tensor Cores. Same initial
weights, batches and optimizer (torch.optim.AdamW) in each. The kernels each mode dispatches to are built first,
in parallel, and one short warm-up run per precision loads them, so the timed runs see a warm cache.
Writes lm_precision_modes.csv (per precision: final train and validation loss, gap to fp32, step time without
validation), lm_precision_modes_curves.csv (validation curves) and lm_precision_modes.png (curves and step times).
The switched precisions need a CUDA device; `--quick` (the CPU smoke test) runs them there anyway, where
ext.precision routes nothing: their rows' `products` column says torch fp32, their curves are labelled so.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch
import train_lm

PRECISIONS = ("fp32", "tf32", "tf32tf32", "halfhalf")
DEFAULT_STEPS = 1000  # the four runs and the builds of a cold cache within 3 minutes on an H100


def build_kernels(precisions, device: torch.device) -> None:
    """Build the variants `ext.gemm` may dispatch to in these modes in one parallel run, `python -m
    cutlass_ext.build --prebuild` (each would otherwise be built at its first call, one at a time: 15-20 s each on
    a cold cache). What does not build here is built, or fallen back from, at first use as usual."""
    modes = [p for p in precisions if p in train_lm.SWITCHED]
    if device.type != "cuda" or not modes:
        return
    command = [sys.executable, "-m", "cutlass_ext.build", "--prebuild", "--modes", *modes]
    if subprocess.run(command, stdout=subprocess.DEVNULL).returncode:
        print(f"{shlex.join(command)} failed: kernels are built at their first use", file=sys.stderr)


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    table = runs.set_index("precision")[["final_train_loss", "final_val_loss", "step_ms", "seconds"]]
    if "fp32" in table.index:
        table.insert(2, "gap_to_fp32", table["final_val_loss"] - table.loc["fp32", "final_val_loss"])
    return table


def plot(curves: pd.DataFrame, runs: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (losses, times) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [2, 1]})
    for precision, rows in curves.groupby("precision", sort=False):
        unrouted = rows["products"].iloc[0] == train_lm.UNROUTED
        losses.plot(rows["step"], rows["val_loss"], label=f"{precision} (FP32 products)" if unrouted else precision)
    losses.set_xlabel("step")
    losses.set_ylabel("validation loss (nats per byte)")
    losses.set_title("validation loss")
    losses.legend()
    times.bar(runs["precision"], runs["step_ms"], color=[f"C{i}" for i in range(len(runs))])
    times.set_ylabel("ms per training step")
    times.set_title(f"step time ({runs['device_name'].iloc[0]})")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None) -> pd.DataFrame:
    parser = train_lm.build_parser()
    parser.description = __doc__.split("\n\n")[0]
    parser.set_defaults(steps=DEFAULT_STEPS)
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    args = train_lm.parse(parser, argv)
    if args.precision != parser.get_default("precision"):
        parser.error("--precision: this script runs each of --precisions")
    base = train_lm.config_from_args(args)
    try:
        train_lm.validate(base)
    except ValueError as error:
        parser.error(str(error))
    for precision in args.precisions:  # before any build or run: every precision's device, one line if missing
        train_lm.require_device_for(replace(base, precision=precision), args.quick, "lm_precision_modes")
    out = args.out or train_lm.default_out(torch.device(base.device))
    out.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "python/lm_precision_modes.py", *(argv if argv is not None else sys.argv[1:])])

    build_kernels(args.precisions, torch.device(base.device))
    warm_up = replace(base, steps=2, warmup=1, eval_every=1, eval_batches=1, final_eval_batches=1)
    for precision in args.precisions:
        train_lm.train(replace(warm_up, precision=precision), log=lambda message: None)
    runs, curves = [], []
    for precision in args.precisions:
        result = train_lm.train(replace(base, precision=precision))
        curves.append(result.pop("curve"))
        runs.append({**result, "command": command})
        pd.DataFrame(runs).to_csv(out / "lm_precision_modes.csv", index=False)
        pd.concat(curves, ignore_index=True).to_csv(out / "lm_precision_modes_curves.csv", index=False)
    runs, curves = pd.DataFrame(runs), pd.concat(curves, ignore_index=True)
    plot(curves, runs, out / "lm_precision_modes.png")
    print(f"after {base.steps} steps (seed {base.seed}):")
    print(summary(runs).to_string(float_format=lambda v: f"{v:.4f}"))
    unrouted = runs.loc[runs["products"] == train_lm.UNROUTED, "precision"].tolist()
    if unrouted:  # --quick on the CPU: the rows keep their precision's name, the products column says what ran
        print(f"on the CPU {', '.join(unrouted)} ran their products in torch's FP32 (ext.precision routes nothing)")
    return runs


if __name__ == "__main__":
    main()
