"""The unit example of 16-bit weight updates: 1.0 + 1000 × 0.001 in BF16 (seed 004 section 3.1).

    python python/optim_unit_example.py [--device cuda] [--out sweeps/results/h200/]

Each element of a BF16 weight vector starts at 1.0 and takes 1000 SGD steps of lr 0.001 on a gradient of -1.
0.001 is under half of BF16's spacing at 1.0 (2^-7), so nearest rounding cancels every step and the weight stays at
1.0; stochastic rounding (unbiased in expectation) and Kahan summation (the cancelled part kept in a BF16
compensation buffer) reach about 2.0. Every operation runs on the 16-bit FPU (`arithmetic="bf16"`), so the step is
bf16(0.001) = 0.00099945, and the exact sum is 1.99945. Writes optim_unit_example.csv (the weights' mean, min and
max every 10 steps) and .png; prints the final values.
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

UPDATES = ("nearest", "stochastic", "kahan")
STEPS, LR = 1000, 0.001


def default_out(device: torch.device) -> Path:
    gpu = tuned.gpu_key(torch.cuda.get_device_name(device)) if device.type == "cuda" else "cpu"
    return Path("sweeps") / "results" / gpu


def run_update(update: str, elements: int, device: torch.device, seed: int, record_every: int) -> list[dict]:
    """Weights (mean, min, max over the elements) every `record_every` steps of SGD with this update rule."""
    weight = torch.nn.Parameter(torch.ones(elements, dtype=torch.bfloat16, device=device))
    optimizer = optim.SGD([weight], lr=LR, update=update, arithmetic="bf16", seed=seed)
    rows = []
    for step in range(STEPS + 1):
        if step % record_every == 0 or step == STEPS:
            values = weight.detach().double()
            rows.append(
                {
                    "update": update,
                    "step": step,
                    "mean": values.mean().item(),
                    "min": values.min().item(),
                    "max": values.max().item(),
                }
            )
        if step < STEPS:
            weight.grad = torch.full_like(weight, -1.0)
            optimizer.step()
    return rows


def exact_rows(record_every: int) -> list[dict]:
    """The same sum in FP64 with the step BF16 computes, bf16(0.001): the value the updates should reach."""
    step_value = torch.tensor(LR, dtype=torch.bfloat16).double().item()
    return [
        {
            "update": "exact",
            "step": s,
            "mean": 1.0 + s * step_value,
            "min": 1.0 + s * step_value,
            "max": 1.0 + s * step_value,
        }
        for s in range(0, STEPS + 1, record_every)
    ]


def plot(frame: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.4, 4.2))
    for update, rows in frame.groupby("update", sort=False):
        style = {"color": "black", "linestyle": "--", "zorder": 3} if update == "exact" else {}
        line = axis.plot(rows["step"], rows["mean"], label=update, **style)
        if (rows["max"] > rows["min"]).any():
            axis.fill_between(rows["step"], rows["min"], rows["max"], color=line[0].get_color(), alpha=0.2)
    axis.set_xlabel("step")
    axis.set_ylabel("weight (mean; band: min to max)")
    axis.set_title("1.0 + 1000 × 0.001 in BF16")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--device", type=device_name, default=default_device(), help="cpu or cuda (default: cuda where visible)"
    )
    parser.add_argument("--elements", type=int, default=4096, help="weights updated side by side")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="results folder (default sweeps/results/<gpu>/)")
    parser.add_argument("--quick", action="store_true", help="CPU, 256 elements (CI smoke test)")
    args = parser.parse_args(argv)
    if args.elements < 1:
        parser.error(f"--elements must be at least 1, got {args.elements}")
    device = torch.device("cpu" if args.quick else args.device)
    require_device(device, "optim_unit_example")
    elements = 256 if args.quick else args.elements
    out = args.out or default_out(device)
    out.mkdir(parents=True, exist_ok=True)

    record_every = 10
    rows = exact_rows(record_every)
    for update in UPDATES:
        rows.extend(run_update(update, elements, device, args.seed, record_every))
    frame = pd.DataFrame(rows).assign(
        elements=elements,
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        torch=torch.__version__,
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        command=shlex.join(["python", "python/optim_unit_example.py", *(argv if argv is not None else sys.argv[1:])]),
    )
    frame.to_csv(out / "optim_unit_example.csv", index=False)
    plot(frame, out / "optim_unit_example.png")

    final = frame[frame["step"] == STEPS].set_index("update")[["mean", "min", "max"]]
    print(f"1.0 + {STEPS} x {LR} in BF16 ({elements} weights, device {device}):")
    print(final.to_string(float_format=lambda v: f"{v:.6f}"))
    return frame


if __name__ == "__main__":
    main()
