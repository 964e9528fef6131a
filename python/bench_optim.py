"""Speed and memory of one AdamW step on a Llama-like list of parameters: ours beside the peers, in one run.

    python python/bench_optim.py [--params 1e9] [--graph] [--device cuda] [--out sweeps/results/h200/]
    python python/bench_optim.py --quick        # CPU, a tiny model (CI smoke test); --device cpu: the full one there

Parameters: Llama layers of width d = 2048 (q, k, v, o: d x d; gate, up: 5632 x d; down: d x 5632; two norms of d),
embedding and LM head of 32000 x d and a final norm, with as many layers as bring the total nearest `--params`.
Contenders, each on its own freshly allocated parameters and gradients (random; optimizer states as the first
step leaves them):
  ours nearest / stochastic / kahan   cutlass_ext.optim.AdamW on BF16 weights, gradients and states;
  torchao SR                          torchao.optim._AdamW(bf16_stochastic_round=True), BF16 weights and states;
  optimi Kahan                        optimi.AdamW(kahan_sum=True), BF16 (its default implementation: Triton if
                                      available);
  torch fused FP32 master             torch.optim.AdamW(fused=True) on FP32 weights and gradients: the optimizer
                                      step of mixed precision (and of FP32 training);
  torch fused BF16 (nearest)          torch.optim.AdamW(fused=True) on BF16 weights: for reference, not a peer.
A peer that cannot be imported is a row with the reason and no timing.

Columns: the median step time (CUDA events after warm-up; with --graph, steps replayed from a CUDA graph where the
optimizer can be captured); the bytes each step must move (every weight and state tensor read and written once,
every gradient read once: counted from the tensors), the GB/s that makes, and its fraction of the copy bandwidth
measured in the same run (a device-to-device copy of --copy-gib GiB, read + write); bytes per parameter of weights
+ states (counted from the tensors: SR 6, Kahan 8, FP32 12) and, for the FP32-master row, the BF16 working copy of
the weights that mixed precision keeps beside it (seed 004 appendix B.2: 14 in all). Writes optim_bench.csv and
.png (optim_bench_graph.* with --graph); prints each of ours against the fastest peer.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import shlex
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import torch
from script_device import device_name, require_device

from cutlass_ext import benchmark, optim, tuned

LR, BETAS, EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.999), 1e-8, 1e-2
PEER_FAMILIES = ("torchao", "optimi", "torch")


def default_out(device: torch.device) -> Path:
    gpu = tuned.gpu_key(torch.cuda.get_device_name(device)) if device.type == "cuda" else "cpu"
    return Path("sweeps") / "results" / gpu


def llama_shapes(target: float, width: int, intermediate: int, vocabulary: int) -> list[tuple[int, ...]]:
    """The parameter shapes of a Llama-like model with as many layers (at least one) as come nearest `target`."""
    layer = [(width, width)] * 4 + [(intermediate, width)] * 2 + [(width, intermediate), (width,), (width,)]
    per_layer = sum(torch.Size(s).numel() for s in layer)
    outer = [(vocabulary, width), (vocabulary, width), (width,)]
    layers = max(1, round((target - sum(torch.Size(s).numel() for s in outer)) / per_layer))
    return outer[:1] + layer * layers + outer[1:]


def count_text(count: int) -> str:
    return f"{count / 1e9:.3f} B" if count >= 1e9 else f"{count / 1e6:.2f} M"


def contenders(device: torch.device, graph: bool):
    """(name, family, dtype, make_optimizer(params) or an import error's text, capturable in a CUDA graph)."""
    for update in ("nearest", "stochastic", "kahan"):

        def ours(params, update=update):
            lr = torch.tensor(LR, device=device) if graph else LR
            return optim.AdamW(
                params, lr=lr, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, update=update, capturable=graph
            )

        yield f"ours {update}", "cutlass_ext", torch.bfloat16, ours, True
    try:
        torchao_optim = importlib.import_module("torchao.optim")

        def torchao(params):
            return torchao_optim._AdamW(
                params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, bf16_stochastic_round=True
            )
    except ImportError as error:
        torchao = f"skipped: torchao not importable ({error})"
    yield "torchao SR", "torchao", torch.bfloat16, torchao, False
    try:
        optimi_module = importlib.import_module("optimi")

        def optimi(params):
            return optimi_module.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, kahan_sum=True)
    except ImportError as error:
        optimi = f"skipped: torch-optimi not importable ({error})"
    yield "optimi Kahan", "optimi", torch.bfloat16, optimi, False
    fused = device.type == "cuda"

    def torch_adamw(params):
        return torch.optim.AdamW(
            params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, fused=fused, capturable=graph
        )

    yield "torch fused FP32 master", "torch", torch.float32, torch_adamw, True
    yield "torch fused BF16 (nearest)", "reference", torch.bfloat16, torch_adamw, True


def median_step_us(step, device: torch.device, warmup: int, repeats: int) -> float:
    """Median time of one `step()`: CUDA events on a GPU, the wall clock on the CPU."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000.0)
        else:
            begin = time.perf_counter()
            step()
            times.append((time.perf_counter() - begin) * 1e6)
    return statistics.median(times)


def copy_gbps(device: torch.device, gib: float, repeats: int) -> float:
    """Bandwidth of a large device-to-device copy, counting its read and its write."""
    source = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    us = median_step_us(lambda: target.copy_(source), device, warmup=3, repeats=repeats)
    return 2 * source.numel() / us / 1e3


def tensor_bytes(optimizer: torch.optim.Optimizer) -> tuple[int, int, int]:
    """(weights, gradients, states) in bytes; one-element states (step counters) are left out."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    weights = sum(p.numel() * p.element_size() for p in params)
    grads = sum(p.grad.numel() * p.grad.element_size() for p in params)
    states = sum(
        t.numel() * t.element_size()
        for state in optimizer.state.values()
        for t in state.values()
        if isinstance(t, torch.Tensor) and t.numel() > 1
    )
    return weights, grads, states


def measure(name, family, dtype, make, graphable, shapes, device, args, copy_bandwidth) -> dict:
    row = {"contender": name, "family": family, "dtype": str(dtype).removeprefix("torch.")}
    if isinstance(make, str):
        return {**row, "note": make}
    generator = torch.Generator(device=device).manual_seed(0)
    params = [torch.nn.Parameter(0.02 * torch.randn(s, generator=generator, device=device).to(dtype)) for s in shapes]
    for p in params:
        p.grad = 1e-3 * torch.randn(p.shape, generator=generator, device=device).to(dtype)
    optimizer = make(params)
    timed_in_graph = args.graph and graphable and device.type == "cuda"
    if timed_in_graph:
        us = benchmark.graph_time_us(optimizer.step, [()] * 2, calls=5, repeats=args.repeats)  # 2 warm-up steps
    else:
        us = median_step_us(optimizer.step, device, args.warmup, args.repeats)
    weights, grads, states = tensor_bytes(optimizer)
    count = sum(p.numel() for p in params)
    moved = 2 * weights + grads + 2 * states
    gbps = moved / us / 1e3
    model_copy = 2 if family == "torch" and dtype == torch.float32 else 0
    return {
        **row,
        "parameters": count,
        "tensors": len(params),
        "step_us": us,
        "graph": timed_in_graph,
        "moved_bytes_per_param": moved / count,
        "gbps": gbps,
        "copy_gbps": copy_bandwidth,
        "fraction_of_copy": gbps / copy_bandwidth,
        "bytes_per_param": (weights + states) / count,
        "model_copy_bytes_per_param": model_copy,
        "total_bytes_per_param": (weights + states) / count + model_copy,
        "note": "mixed precision also keeps a BF16 copy of the weights (seed 004 B.2)" if model_copy else "",
    }


def comparison(frame: pd.DataFrame) -> pd.DataFrame:
    """Each of our rows against the fastest peer that ran: time ratio (ours / peer) and memory."""
    peers = frame[frame["family"].isin(PEER_FAMILIES) & frame["step_us"].notna()]
    if peers.empty:
        return pd.DataFrame()
    fastest = peers.loc[peers["step_us"].idxmin()]
    ours = frame[frame["family"] == "cutlass_ext"]
    return pd.DataFrame(
        {
            "contender": ours["contender"],
            "step_us": ours["step_us"],
            "fastest_peer": fastest["contender"],
            "peer_step_us": fastest["step_us"],
            "time_ratio": ours["step_us"] / fastest["step_us"],
            "speedup": fastest["step_us"] / ours["step_us"],
            "bytes_per_param": ours["total_bytes_per_param"],
            "peer_bytes_per_param": fastest["total_bytes_per_param"],
        }
    )


def plot(frame: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = frame[frame["step_us"].notna()]
    colors = {
        "cutlass_ext": "tab:blue",
        "torchao": "tab:orange",
        "optimi": "tab:green",
        "torch": "tab:red",
        "reference": "tab:gray",
    }
    bar_colors = [colors.get(f, "tab:gray") for f in measured["family"]]
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    bars = axes[0].barh(measured["contender"], measured["step_us"] / 1000.0, color=bar_colors)
    for bar, fraction in zip(bars, measured["fraction_of_copy"]):
        axes[0].text(
            bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {fraction:.0%} of copy BW", va="center", fontsize=8
        )
    axes[0].set_xlabel("AdamW step (ms)")
    parameters, copy = count_text(measured["parameters"].iloc[0]), frame["copy_gbps"].iloc[0]
    axes[0].set_title(f"{parameters} parameters, copy {copy:.0f} GB/s")
    axes[1].barh(measured["contender"], measured["bytes_per_param"], color=bar_colors, label="weights + states")
    axes[1].barh(
        measured["contender"],
        measured["model_copy_bytes_per_param"],
        left=measured["bytes_per_param"],
        color="white",
        edgecolor="black",
        hatch="//",
        label="BF16 model copy",
    )
    axes[1].set_xlabel("bytes per parameter")
    axes[1].legend(loc="lower right")
    for axis in axes:
        axis.invert_yaxis()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=float, default=1e9, help="total parameters (nearest whole layer)")
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--intermediate", type=int, default=5632)
    parser.add_argument("--vocabulary", type=int, default=32000)
    # cuda even where none is visible: a GPU benchmark does not fall back to a 1e9-parameter run on the CPU unasked
    parser.add_argument("--device", type=device_name, default="cuda", help="cuda (default) or cpu, named explicitly")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--graph", action="store_true", help="time capturable optimizers by CUDA-graph replay")
    parser.add_argument("--copy-gib", type=float, default=4.0, help="size of the copy that sets the bandwidth")
    parser.add_argument("--out", type=Path, help="results folder (default sweeps/results/<gpu>/)")
    parser.add_argument("--quick", action="store_true", help="CPU, a tiny model, 3 repeats (CI smoke test)")
    args = parser.parse_args(argv)
    for name in ("params", "width", "intermediate", "vocabulary", "repeats", "copy_gib"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.warmup < 1:
        parser.error(f"--warmup must be at least 1 (the first step allocates the states), got {args.warmup}")
    if args.quick:
        args.device, args.params, args.width, args.intermediate, args.vocabulary = "cpu", 1e5, 64, 176, 256
        args.repeats, args.copy_gib, args.graph = 3, 0.01, False
    device = torch.device(args.device)
    require_device(device, "bench_optim")
    if args.graph and device.type != "cuda":
        parser.error("--graph needs a CUDA device")
    out = args.out or default_out(device)
    out.mkdir(parents=True, exist_ok=True)

    shapes = llama_shapes(args.params, args.width, args.intermediate, args.vocabulary)
    bandwidth = copy_gbps(device, args.copy_gib, args.repeats)
    print(
        f"{count_text(sum(torch.Size(s).numel() for s in shapes))} parameters in {len(shapes)} tensors; "
        f"copy bandwidth {bandwidth:.0f} GB/s"
    )
    environment = {
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": shlex.join(["python", "python/bench_optim.py", *(argv if argv is not None else sys.argv[1:])]),
    }
    rows = []
    for contender in contenders(device, args.graph):
        rows.append({**measure(*contender, shapes, device, args, bandwidth), **environment})
        row = rows[-1]
        if "step_us" in row:
            print(
                f"{row['contender']:28s} {row['step_us'] / 1000:8.3f} ms  {row['gbps']:7.0f} GB/s "
                f"({row['fraction_of_copy']:.0%} of copy)  {row['total_bytes_per_param']:.0f} B/param"
            )
        else:
            print(f"{row['contender']:28s} {row['note']}")
        if device.type == "cuda":
            torch.cuda.empty_cache()
    frame = pd.DataFrame(rows)
    stem = "optim_bench_graph" if args.graph else "optim_bench"
    frame.to_csv(out / f"{stem}.csv", index=False)
    plot(frame, out / f"{stem}.png")
    versus = comparison(frame)
    if not versus.empty:
        print(versus.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return frame


if __name__ == "__main__":
    main()
