"""What the low-bit-accumulator experiments share: arguments, the digits data, training loops, CSV with provenance."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from cutlass_ext import benchmark, lowbit
from cutlass_ext.cli_types import positive_int
from cutlass_ext.tuned import gpu_key


def parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="folder for CSV + PNG (default sweeps/results/<gpu>/)")
    parser.add_argument("--quick", action="store_true", help="a few seconds on CPU with the reference (smoke test)")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def count(parser: argparse.ArgumentParser, flag: str, help: str, default=None) -> None:
    """A positive count (epochs, widths, batch sizes): 0 is refused, not read as "the default" by `or`."""
    parser.add_argument(flag, type=positive_int, default=default, help=help)


def lowbit_format(parser: argparse.ArgumentParser, *args, **kwargs):
    """LowbitFormat.make(*args, **kwargs), a bad bit count or bias an argparse error rather than a traceback."""
    try:
        return lowbit.LowbitFormat.make(*args, **kwargs)
    except ValueError as error:
        parser.error(str(error))


def device_for(quick: bool) -> torch.device:
    """--quick: the CPU reference, a smoke run; else the GPU kernels (the full experiment on the CPU reference
    would take hours, so without a GPU it stops here with one line)."""
    if quick:
        return torch.device("cpu")
    from script_device import require_cuda  # python/ is on sys.path when a script here runs

    require_cuda(Path(sys.argv[0]).stem or "this experiment")
    return torch.device("cuda")


def out_folder(out: Path | None, device: torch.device) -> Path:
    if out is None:
        key = gpu_key(torch.cuda.get_device_name(device)) if device.type == "cuda" else "cpu"
        out = Path("sweeps/results") / key
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_csv(rows: list[dict], path: Path, device: torch.device) -> pd.DataFrame:
    """The rows plus provenance columns (device, torch, date, command); prints where it went."""
    table = pd.DataFrame(rows)
    where = benchmark.environment(device) if device.type == "cuda" else {"gpu": "cpu", "torch": torch.__version__}
    for column, value in where.items():
        table[column] = value
    table["command"] = shlex.join(["python"] + sys.argv)
    table.to_csv(path, index=False)
    print(f"wrote {path} ({len(table)} rows)")
    return table


def digits(device: torch.device, seed: int, limit: int | None = None, images: bool = False):
    """scikit-learn's bundled 8×8 digits (1797 images, nothing downloaded), normalized like MNIST's usual
    transform: one mean and one standard deviation over the training pixels.

    Returns (x_train, y_train, x_test, y_test): a fixed 80/20 split by `seed`; `limit` keeps that many of each;
    `images` gives (N, 1, 8, 8) instead of (N, 64).
    """
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    x, y = x[order], y[order]
    cut = int(0.8 * len(x))
    x = (x - x[:cut].mean()) / x[:cut].std()
    if images:
        x = x.reshape(-1, 1, 8, 8)
    parts = [x[:cut], y[:cut], x[cut:], y[cut:]]
    if limit is not None:
        parts = [part[:limit] for part in parts]
    return [part.to(device) for part in parts]


def train_epoch(model, optimizer, x, y, batch: int, generator: torch.Generator) -> float:
    """One pass in shuffled mini-batches; returns the mean loss (NaN if the loss diverged)."""
    model.train()
    order = torch.randperm(len(x), generator=generator).to(x.device)
    total = torch.zeros((), device=x.device)
    for start in range(0, len(x), batch):
        index = order[start : start + batch]
        loss = torch.nn.functional.cross_entropy(model(x[index]), y[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += loss.detach() * len(index)
    return float(total) / len(x)


@torch.no_grad()
def accuracy(model, x, y, batch: int = 512) -> float:
    model.eval()
    correct = sum(int((model(x[s : s + batch]).argmax(-1) == y[s : s + batch]).sum()) for s in range(0, len(x), batch))
    return correct / len(x)


class Stopwatch:
    def __init__(self):
        self.start = time.perf_counter()

    def __call__(self) -> float:
        return time.perf_counter() - self.start
