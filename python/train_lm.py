"""A small character-level transformer language model trained on the Python standard library's own source.

    python python/train_lm.py --precision bf16-stochastic [--optimizer adamw] [--steps 1500] [--seed 0]
                              [--device cuda] [--out sweeps/results/h200/]
    torchrun --nproc_per_node 2 python/train_lm.py --distributed ddp|fsdp ...   # one process per GPU

Nothing is downloaded: the corpus is the top-level `*.py` files of this interpreter's standard library
(`sysconfig.get_paths()["stdlib"]`), sorted by name, read as bytes (a 256-symbol vocabulary); every tenth file
(by that order) is validation, the rest training. Runs on the same Python version therefore read the same text.

Precisions (seed 004 Table 4 and the mixed-precision baseline):
  fp32             FP32 weights, compute and optimizer (torch.optim);
  mixed            FP32 master weights and states, forward/backward under BF16 autocast (torch.optim, fused on
                   CUDA);
  bf16-nearest     BF16 weights and states, BF16 forward/backward, cutlass_ext.optim with nearest updates;
  bf16-stochastic  the same with stochastically rounded updates (reproducible for a given --seed);
  bf16-kahan       the same with Kahan-compensated updates;
  tf32, tf32tf32,  the FP32 model and optimizer with every linear layer's and matmul's product (forward and
  halfhalf         backward) run by cutlass_ext.gemm in that mode, through `cutlass_ext.precision` (attention
                   keeps its fused kernel). They need a CUDA device; `--quick` runs them on the CPU, where
                   nothing is routed, its rows' `products` column saying so.
`--arithmetic bf16` makes the BF16 precisions' optimizer round every operation to BF16 (the seed's 16-bit FPU).
`--distributed ddp` (DistributedDataParallel) or `fsdp` (FSDP2's fully_shard per block, then the rest) under
torchrun splits each step's global batch of `--batch` windows across the ranks, so the curve follows one
process's; cutlass_ext.optim steps FSDP2's shards with the stochastic rounding of the whole tensors.
The model is GPT-like (pre-norm blocks, causal attention, GELU MLP, learned positions); the learning rate warms up
linearly and decays by a cosine to a tenth. Writes lm_<precision>_seed<seed>.csv (train and validation loss over
steps); `train` returns the run's summary for other scripts (optim_lm_precisions.py).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import os
import sysconfig
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from script_device import default_device, device_name, refuse, require_device
from torch import nn

from cutlass_ext import optim, precision, tuned

PRECISIONS = ("fp32", "mixed", "bf16-nearest", "bf16-stochastic", "bf16-kahan")  # the BF16-training study's
SWITCHED = ("tf32", "tf32tf32", "halfhalf")  # FP32 precisions whose products run under ext.precision(<name>)
UNROUTED = "torch fp32 (cpu: ext.precision routes nothing)"  # the products column of a switched precision off CUDA
OPTIMIZERS = ("adamw", "sgd")
ARITHMETICS = ("fp32", "bf16")
DISTRIBUTED = ("none", "ddp", "fsdp")
VOCABULARY = 256  # bytes
VALIDATION_EVERY_NTH_FILE = 10


@dataclass(frozen=True)
class TrainConfig:
    precision: str = "bf16-stochastic"
    optimizer: str = "adamw"
    arithmetic: str = "fp32"  # how cutlass_ext.optim computes the BF16 precisions' updates
    steps: int = 1500
    seed: int = 0
    device: str = "cuda"
    layers: int = 4
    width: int = 256
    heads: int = 4
    context: int = 128
    batch: int = 64
    lr: float = 1e-3
    warmup: int = 100
    weight_decay: float = 0.1
    eval_every: int = 100
    eval_batches: int = 8
    final_eval_batches: int = 64
    max_files: int = 0  # 0: every file; a few for smoke tests
    distributed: str = "none"  # "ddp" or "fsdp" under torchrun: the global batch split across the ranks


def default_out(device: torch.device) -> Path:
    gpu = tuned.gpu_key(torch.cuda.get_device_name(device)) if device.type == "cuda" else "cpu"
    return Path("sweeps") / "results" / gpu


def corpus_files(max_files: int = 0) -> list[Path]:
    """The standard library's top-level modules, sorted by name (the fixed file list)."""
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"), key=lambda path: path.name)
    if not files:
        raise FileNotFoundError(f"no *.py files in the standard library folder {sysconfig.get_paths()['stdlib']}")
    return files[:max_files] if max_files else files


def load_corpus(max_files: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, validation) byte streams (uint8), files split by their index in `corpus_files`."""
    train, validation = [], []
    for index, path in enumerate(corpus_files(max_files)):
        (validation if index % VALIDATION_EVERY_NTH_FILE == 0 else train).append(path.read_bytes())
    return tuple(torch.frombuffer(bytearray(b"".join(parts)), dtype=torch.uint8) for parts in (train, validation))


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.attention_norm = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.projection = nn.Linear(width, width, bias=False)
        self.mlp_norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width, bias=False), nn.GELU(), nn.Linear(4 * width, width, bias=False)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.attention_norm(x)).split(width, dim=-1)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.projection(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.mlp_norm(x))


class CharTransformer(nn.Module):
    def __init__(self, layers: int, width: int, heads: int, context: int):
        super().__init__()
        self.token_embedding = nn.Embedding(VOCABULARY, width)
        self.position_embedding = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.final_norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, VOCABULARY, bias=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.final_norm(x))


def batch_at(stream: torch.Tensor, starts: torch.Tensor, context: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-byte targets of the windows starting at `starts`."""
    windows = torch.stack([stream[s : s + context + 1] for s in starts.tolist()]).to(device=device, dtype=torch.long)
    return windows[:, :-1], windows[:, 1:]


def init_distributed(config: TrainConfig) -> tuple[int, int, torch.device]:
    """(rank, world size, device) of this process: with --distributed, the process group from torchrun's
    environment (NCCL on CUDA, gloo on the CPU) and the GPU of the local rank; else (0, 1, --device)."""
    if config.distributed == "none":
        return 0, 1, torch.device(config.device)
    import torch.distributed as dist

    cuda = torch.device(config.device).type == "cuda"
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    return dist.get_rank(), dist.get_world_size(), device


def distribute(model: CharTransformer, mode: str, device: torch.device) -> nn.Module:
    """DDP: a replica per rank, gradients averaged; fsdp: FSDP2, each block's parameters and then the rest
    sharded along dim 0 across the ranks (gathered per block for its forward and backward)."""
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        return fully_shard(model)
    return model


def global_mean(value: torch.Tensor, world: int) -> torch.Tensor:
    """The mean of `value` over the ranks (itself in one process)."""
    if world == 1:
        return value
    import torch.distributed as dist

    value = value.detach().clone()
    dist.all_reduce(value)
    return value / world


def make_optimizer(config: TrainConfig, model: nn.Module, device: torch.device):
    params = list(model.parameters())
    if not config.precision.startswith("bf16"):
        if config.optimizer == "sgd":
            return torch.optim.SGD(params, lr=config.lr, momentum=0.9, weight_decay=config.weight_decay)
        return torch.optim.AdamW(
            params, lr=config.lr, betas=(0.9, 0.99), weight_decay=config.weight_decay, fused=device.type == "cuda"
        )
    update = config.precision.removeprefix("bf16-")
    if config.optimizer == "sgd":
        return optim.SGD(
            params,
            lr=config.lr,
            momentum=0.9,
            weight_decay=config.weight_decay,
            update=update,
            arithmetic=config.arithmetic,
            seed=config.seed,
        )
    return optim.AdamW(
        params,
        lr=config.lr,
        betas=(0.9, 0.99),
        weight_decay=config.weight_decay,
        update=update,
        arithmetic=config.arithmetic,
        seed=config.seed,
    )


def lr_factor(config: TrainConfig, step: int) -> float:
    """Linear warm-up, then a cosine from 1 to 0.1."""
    if step < config.warmup:
        return (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


def routes_nothing(config: TrainConfig) -> bool:
    """A switched precision off CUDA: ext.precision routes CUDA tensors only, so its products run in torch's FP32."""
    return config.precision in SWITCHED and torch.device(config.device).type != "cuda"


def products(config: TrainConfig) -> str:
    """What computed the run's products, for its rows: a switched precision's label alone would claim ext.gemm."""
    if config.precision not in SWITCHED:
        return "torch"
    return UNROUTED if routes_nothing(config) else f"ext.gemm {config.precision}"


def require_device_for(config: TrainConfig, quick: bool, script: str) -> None:
    """One line and exit status 2 where the run cannot be what its precision says: a CUDA device that is not there,
    or a switched precision on the CPU outside --quick (whose smoke test runs it there, its rows saying so)."""
    require_device(config.device, script)
    if routes_nothing(config) and not quick:
        refuse(
            f"{script}: precision {config.precision} needs a CUDA device (on the CPU ext.precision routes nothing; "
            "--quick runs it there in FP32 as a smoke test)"
        )


def validate(config: TrainConfig) -> None:
    if config.precision not in PRECISIONS + SWITCHED:
        raise ValueError(f"precision={config.precision!r} is not one of {list(PRECISIONS + SWITCHED)}")
    if config.optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={config.optimizer!r} is not one of {list(OPTIMIZERS)}")
    if config.arithmetic not in ARITHMETICS:
        raise ValueError(f"arithmetic={config.arithmetic!r} is not one of {list(ARITHMETICS)}")
    for name in (
        "steps",
        "layers",
        "width",
        "heads",
        "context",
        "batch",
        "eval_every",
        "eval_batches",
        "final_eval_batches",
    ):
        if getattr(config, name) < 1:
            raise ValueError(f"{name}={getattr(config, name)} must be at least 1")
    if config.width % config.heads:
        raise ValueError(f"width={config.width} must be a multiple of heads={config.heads}")
    if config.distributed not in DISTRIBUTED:
        raise ValueError(f"distributed={config.distributed!r} is not one of {list(DISTRIBUTED)}")
    if config.distributed != "none" and "WORLD_SIZE" not in os.environ:
        raise ValueError(f"distributed={config.distributed!r} runs under torchrun (WORLD_SIZE is not set)")
    world = int(os.environ.get("WORLD_SIZE", 1)) if config.distributed != "none" else 1
    if config.batch % world:
        raise ValueError(f"batch={config.batch} must be a multiple of the {world} ranks")
    if config.lr <= 0:
        raise ValueError(f"lr={config.lr} must be positive")


def train(config: TrainConfig, out: Path | None = None, log=print) -> dict:
    """Train one model; returns the summary (final validation loss, time, ...) with the curve under "curve".
    Writes the curve to `out`/lm_<precision>_seed<seed>.csv when `out` is given."""
    validate(config)
    rank, world, device = init_distributed(config)
    if rank:
        out, log = None, lambda message: None  # rank 0 reports
    train_stream, validation_stream = load_corpus(config.max_files)
    for name, stream in (("training", train_stream), ("validation", validation_stream)):
        if stream.numel() <= config.context + 1:
            raise ValueError(f"the {name} text ({stream.numel()} bytes) is shorter than context={config.context}")

    torch.manual_seed(config.seed)
    model = CharTransformer(config.layers, config.width, config.heads, config.context).to(device)
    if config.precision.startswith("bf16"):
        model = model.to(torch.bfloat16)
    model = distribute(model, config.distributed, device)
    optimizer = make_optimizer(config, model, device)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(config, step))
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.precision == "mixed")
    switch = precision(config.precision) if config.precision in SWITCHED else contextlib.nullcontext()

    # the same batches for every precision of a seed; validation windows fixed across seeds too
    sampler = torch.Generator().manual_seed(config.seed)
    validation_batches = max(config.eval_batches, config.final_eval_batches)
    validation_starts = torch.randint(
        validation_stream.numel() - config.context - 1,
        (validation_batches, config.batch),
        generator=torch.Generator().manual_seed(0),
    )

    def loss_of(inputs, targets):
        with autocast, switch:
            logits = model(inputs)
        return F.cross_entropy(logits.float().view(-1, VOCABULARY), targets.reshape(-1))

    evaluation_seconds = []  # validation's share of the run's time (step_ms leaves it out)

    @torch.no_grad()
    def validation_loss(batches: int) -> float:
        started = time.perf_counter()
        model.eval()
        total = sum(
            loss_of(*batch_at(validation_stream, validation_starts[i], config.context, device)).item()
            for i in range(batches)
        )
        model.train()
        evaluation_seconds.append(time.perf_counter() - started)
        return total / batches

    curve = []
    start = time.perf_counter()
    for step in range(config.steps):
        starts = torch.randint(train_stream.numel() - config.context - 1, (config.batch,), generator=sampler)
        loss = loss_of(*batch_at(train_stream, starts.chunk(world)[rank], config.context, device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        lr = scheduler.get_last_lr()[0]  # the rate this step used
        scheduler.step()
        if (step + 1) % config.eval_every == 0 and step + 1 < config.steps:
            curve.append(
                {
                    "step": step + 1,
                    "lr": lr,
                    "train_loss": global_mean(loss, world).item(),
                    "val_loss": validation_loss(config.eval_batches),
                }
            )
            log(
                f"{config.precision} seed {config.seed} step {step + 1}: train {curve[-1]['train_loss']:.4f} "
                f"val {curve[-1]['val_loss']:.4f}"
            )
    final_validation = validation_loss(config.final_eval_batches)
    loss = global_mean(loss, world)  # the global batch's loss
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    curve.append(
        {
            "step": config.steps,
            "lr": lr if config.steps else scheduler.get_last_lr()[0],
            "train_loss": loss.item(),
            "val_loss": final_validation,
        }
    )
    log(f"{config.precision} seed {config.seed}: final validation loss {final_validation:.4f} ({seconds:.1f} s)")

    summary = {
        **asdict(config),
        "parameters": sum(p.numel() for p in model.parameters()),
        "world_size": world,
        "train_bytes": train_stream.numel(),
        "validation_bytes": validation_stream.numel(),
        "final_train_loss": loss.item(),
        "final_val_loss": final_validation,
        "seconds": seconds,
        "step_ms": 1000 * (seconds - sum(evaluation_seconds)) / config.steps,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "products": products(config),
        "python": sysconfig.get_python_version(),
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    frame = pd.DataFrame(curve).assign(
        precision=config.precision, optimizer=config.optimizer, seed=config.seed, products=products(config)
    )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        ranks = "" if config.distributed == "none" else f"_{config.distributed}{world}"
        frame.to_csv(out / f"lm_{config.precision}_seed{config.seed}{ranks}.csv", index=False)
    return {**summary, "curve": frame}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = TrainConfig()
    parser.add_argument("--precision", choices=PRECISIONS + SWITCHED, default=defaults.precision)
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default=defaults.optimizer)
    parser.add_argument(
        "--arithmetic",
        choices=ARITHMETICS,
        default=defaults.arithmetic,
        help="BF16 precisions: the update computed in FP32, or every operation in BF16 (16-bit FPU)",
    )
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument(
        "--device", type=device_name, default=default_device(), help="cpu or cuda (default: cuda where visible)"
    )
    for name in (
        "layers",
        "width",
        "heads",
        "context",
        "batch",
        "warmup",
        "eval_every",
        "eval_batches",
        "final_eval_batches",
    ):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    parser.add_argument("--lr", type=float, default=defaults.lr, help="peak learning rate (AdamW's; SGD wants ~0.1)")
    parser.add_argument(
        "--distributed",
        choices=DISTRIBUTED,
        default=defaults.distributed,
        help="under torchrun: DDP or FSDP2 over the ranks, each step's --batch split across them",
    )
    parser.add_argument("--weight-decay", type=float, default=defaults.weight_decay)
    parser.add_argument("--out", type=Path, help="results folder (default sweeps/results/<gpu>/)")
    parser.add_argument("--quick", action="store_true", help="CPU, a tiny model, 10 steps (CI smoke test)")
    return parser


QUICK = {
    "device": "cpu",
    "steps": 10,
    "layers": 1,
    "width": 32,
    "heads": 2,
    "context": 32,
    "batch": 8,
    "warmup": 3,
    "eval_every": 5,
    "eval_batches": 2,
    "final_eval_batches": 2,
    "max_files": 12,
}


def parse(parser: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """The arguments, with --quick's settings as the defaults: a flag given beside --quick still counts."""
    args = parser.parse_args(argv)
    if args.quick:
        parser.set_defaults(**QUICK)
        args = parser.parse_args(argv)
    return args


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    fields = {name: getattr(args, name) for name in TrainConfig.__dataclass_fields__ if hasattr(args, name)}
    return TrainConfig(**fields)


def main(argv=None) -> dict:
    args = parse(build_parser(), argv)
    config = config_from_args(args)
    try:
        validate(config)
    except ValueError as error:
        build_parser().error(str(error))
    require_device_for(config, args.quick, "train_lm")
    out = args.out or default_out(torch.device(config.device))
    summary = train(config, out)
    if config.distributed != "none":
        torch.distributed.destroy_process_group()
    return summary


if __name__ == "__main__":
    main()
