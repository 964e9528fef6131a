"""Step time of the character-level language model (train_lm.py) on one GPU and under DDP and FSDP2 on N GPUs.

    python python/scaling_lm.py [--gpus 2] [--precision bf16-stochastic] [--out sweeps/results/h200x2/]

One process per GPU (spawned, NCCL). Every run takes the same global batch (--batch windows of --context bytes),
split across its ranks: the speedup is strong scaling, t(1 GPU) / t(N GPUs) for the same work. The one-GPU
baseline is the plain model (no wrapper). A step is train_lm's: forward, cross-entropy, backward, gradient
clipping, the optimizer (cutlass_ext.optim for the BF16 precisions, on FSDP2's shards there). The default model
(12 blocks of width 1536, ~340 M parameters, 128 x 512 tokens a step) keeps each GPU's share of a step long
beside the gradient all-reduce (DDP) or the per-block gathers and reduce-scatters (FSDP2), which overlap it.
Writes scaling_lm.csv: per (mode, GPUs) the median step time of --steps timed steps after --warmup, tokens per
second and the speedup over the one-GPU row.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from train_lm import PRECISIONS, SWITCHED, VOCABULARY, CharTransformer, TrainConfig, distribute, make_optimizer

from cutlass_ext import precision, tuned

DEFAULT_MODEL = {"layers": 12, "width": 1536, "heads": 12, "context": 512, "batch": 128}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _worker(rank: int, world: int, port: int, mode: str, config: TrainConfig, steps: int, warmup: int, path: str):
    """Times `warmup + steps` steps on this rank's share of the global batch; rank 0 writes the slowest rank's
    median step time to `path`."""
    cuda = config.device == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if mode != "none":
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    torch.manual_seed(config.seed)
    with device:
        model = CharTransformer(config.layers, config.width, config.heads, config.context)
    if config.precision.startswith("bf16"):
        model = model.to(torch.bfloat16)
    parameters = sum(p.numel() for p in model.parameters())
    model = distribute(model, mode, device)
    optimizer = make_optimizer(config, model, device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.precision == "mixed")
    switch = precision(config.precision) if config.precision in SWITCHED else contextlib.nullcontext()
    generator = torch.Generator(device).manual_seed(config.seed + rank)
    windows = torch.randint(VOCABULARY, (config.batch // world, config.context + 1), device=device, generator=generator)
    inputs, targets = windows[:, :-1], windows[:, 1:]

    def synchronize():
        if cuda:
            torch.cuda.synchronize(device)

    seconds = []
    for _ in range(warmup + steps):
        synchronize()
        start = time.perf_counter()
        with autocast, switch:
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().view(-1, VOCABULARY), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        synchronize()
        seconds.append(time.perf_counter() - start)
    step_ms = torch.tensor(statistics.median(seconds[warmup:]) * 1e3, dtype=torch.float64, device=device)
    if mode != "none":
        dist.all_reduce(step_ms, op=dist.ReduceOp.MAX)
        dist.destroy_process_group()
    if rank == 0:
        memory = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else 0.0
        Path(path).write_text(json.dumps({"step_ms": step_ms.item(), "parameters": parameters, "memory_gib": memory}))


def measure(mode: str, world: int, config: TrainConfig, steps: int, warmup: int) -> dict:
    """One run: `world` spawned ranks (one for the plain model, mode "none")."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "result.json")
        mp.spawn(_worker, args=(world, _free_port(), mode, config, steps, warmup, path), nprocs=world, join=True)
        return json.loads(Path(path).read_text())


def run(config: TrainConfig, gpus: int, modes, steps: int, warmup: int, log=print) -> pd.DataFrame:
    """The one-GPU baseline, then each mode on `gpus` ranks; the table of scaling_lm.csv."""
    rows = []
    for mode, world in [("none", 1)] + [(mode, gpus) for mode in modes]:
        result = measure(mode, world, config, steps, warmup)
        tokens = config.batch * config.context
        rows.append(
            {
                "mode": mode,
                "gpus": world,
                "precision": config.precision,
                "optimizer": config.optimizer,
                **{name: getattr(config, name) for name in ("layers", "width", "heads", "context")},
                "global_batch": config.batch,
                "parameters": result["parameters"],
                "step_ms": round(result["step_ms"], 2),
                "tokens_per_s": round(tokens / result["step_ms"] * 1e3),
                "speedup": round(rows[0]["step_ms"] / result["step_ms"], 3) if rows else 1.0,
                "memory_gib": round(result["memory_gib"], 2),
            }
        )
        where = "the plain model on 1 GPU" if mode == "none" else f"{mode} on {world} GPUs"
        log(f"{where}: {result['step_ms']:.1f} ms a step, speedup {rows[-1]['speedup']:.2f}x")
    device_name = torch.cuda.get_device_name(0) if config.device == "cuda" else "cpu"
    return pd.DataFrame(rows).assign(
        gpu=device_name,
        torch=torch.__version__,
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=2, help="ranks of the DDP and FSDP2 runs")
    parser.add_argument("--modes", nargs="+", choices=("ddp", "fsdp"), default=["ddp", "fsdp"])
    parser.add_argument("--precision", choices=PRECISIONS, default="bf16-stochastic")
    parser.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    for name, value in DEFAULT_MODEL.items():
        parser.add_argument(f"--{name}", type=int, default=value)
    parser.add_argument("--steps", type=int, default=10, help="timed steps (median)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: gloo ranks (smoke test)")
    parser.add_argument("--out", type=Path, help="results folder (default sweeps/results/<gpu>x<gpus>/)")
    return parser


def main(argv=None) -> pd.DataFrame:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.device == "cuda" and torch.cuda.device_count() < args.gpus:
        parser.error(f"--gpus {args.gpus}: this machine has {torch.cuda.device_count()} CUDA GPUs")
    if args.gpus < 2 or args.batch % args.gpus:
        parser.error(f"--gpus {args.gpus} must be at least 2 and divide --batch {args.batch}")
    if args.width % args.heads:
        parser.error(f"--width {args.width} must be a multiple of --heads {args.heads}")
    config = TrainConfig(
        precision=args.precision,
        optimizer=args.optimizer,
        device=args.device,
        **{name: getattr(args, name) for name in DEFAULT_MODEL},
    )
    table = run(config, args.gpus, args.modes, args.steps, args.warmup)
    if args.out is None:
        gpu = tuned.gpu_key(torch.cuda.get_device_name(0)) if args.device == "cuda" else "cpu"
        args.out = Path("sweeps") / "results" / f"{gpu}x{args.gpus}"
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "scaling_lm.csv", index=False)
    with pd.option_context("display.width", 200):
        print(table.drop(columns=["torch", "date"]).to_string(index=False))
    return table


if __name__ == "__main__":
    main()
