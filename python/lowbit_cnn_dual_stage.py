"""Zero-shot accuracy drop and dual-stage recovery of a small CNN with an M7E4 accumulator (seed 002, section 3.1,
Table 2, appendix C.1), trained in FP32 on scikit-learn's bundled 8×8 digits (nothing is downloaded).

    python python/lowbit_cnn_dual_stage.py            # on the GPU: the kernel through cutlass_ext.lowbit
    python python/lowbit_cnn_dual_stage.py --quick    # CPU reference, a few seconds

The network (conv 1→16, conv 16→32, 2×2 max-pool, fc 512→64, fc 64→10, ReLU between; --channels scales it) is
trained in FP32; then every GEMM (convolutions as unfold + GEMM, linear layers) runs with M7E4, b_acc = 10,
b_prod = 12, chunk 16, as in Table 2. Rows, each with test accuracy with and without underflow: the FP32 model;
zero-shot LBA; fine-tuned in FP32 (the baseline); one stage with underflow on (twice stage one's epochs, as the
seed's 10 against 5 + 1); stage one without underflow (Adam, cosine schedule, like the seed's 5 epochs at 1e-6)
then stage two with underflow on at a tenth of the learning rate for one epoch.
This network sums at most 512 products per output, against thousands in the seed's ResNets: M7E4 leaves its
accuracy unchanged (no zero-shot drop to recover), M3E4 with the same biases drops it by about 5 points
(--man 3 runs the stages there).
Writes lowbit_cnn_dual_stage.csv and lowbit_cnn_dual_stage.png into --out (…_m3e4.csv/png with --man 3).
"""

from __future__ import annotations

import copy

import lowbit_common as common
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from cutlass_ext import lowbit  # noqa: E402


def cnn(channels: int, seed: int, device: torch.device) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, channels, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(channels, 2 * channels, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(2 * channels * 4 * 4, 4 * channels),
        torch.nn.ReLU(),
        torch.nn.Linear(4 * channels, 10),
    ).to(device)


def fine_tune(model, data, epochs: int, lr: float, batch: int, seed: int) -> None:
    """Adam (appendix C.1: betas (0.9, 0.999), eps 1e-8, weight decay 1e-4) with a cosine schedule to lr/100."""
    x_train, y_train = data[0], data[1]
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, epochs), eta_min=lr / 100)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        common.train_epoch(model, optimizer, x_train, y_train, batch, generator)
        schedule.step()


def evaluate(name: str, model, data, rows: list[dict], clock) -> None:
    """Test accuracy with underflow off and on (an FP32 model gives the same number twice)."""
    x_test, y_test = data[2], data[3]
    accuracies = {}
    for underflow in (False, True):
        lowbit.set_underflow(model, underflow)
        accuracies[underflow] = common.accuracy(model, x_test, y_test)
    rows.append(dict(stage=name, accuracy_no_uf=accuracies[False], accuracy_uf=accuracies[True], seconds=clock()))
    print(f"{name:>28}: no UF {accuracies[False]:.4f}   UF {accuracies[True]:.4f}   ({clock():.1f} s)")


def plot(table, path, name: str) -> None:
    figure, axis = plt.subplots(figsize=(9, 4))
    positions = range(len(table))
    axis.bar([p - 0.2 for p in positions], table.accuracy_no_uf, width=0.4, label="evaluated without underflow")
    axis.bar([p + 0.2 for p in positions], table.accuracy_uf, width=0.4, label="evaluated with underflow")
    axis.set_xticks(list(positions), table.stage, rotation=20, ha="right", fontsize=8)
    low = min(table.accuracy_no_uf.min(), table.accuracy_uf.min())
    axis.set(ylabel="test accuracy", ylim=(max(0.0, low - 0.05), 1.0), title=f"CNN on digits, {name} accumulator")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv=None) -> None:
    parser = common.parser(__doc__)
    common.count(parser, "--pretrain-epochs", "FP32 training, default 30 (quick: 1)")
    common.count(parser, "--epochs", "fine-tuning stage one, default 5 (quick: 1)")
    parser.add_argument("--lr", type=float, default=1e-4, help="fine-tuning learning rate (stage two: lr/10)")
    common.count(parser, "--batch", "mini-batch size", default=64)
    common.count(parser, "--channels", "first conv's channels, default 16 (quick: 4)")
    parser.add_argument("--man", type=int, default=7, help="accumulator and product mantissa bits (Table 2: 7)")
    args = parser.parse_args(argv)
    fmt = common.lowbit_format(parser, args.man, 4, 10, 12, chunk=16)  # Table 2: M7E4
    args.channels = args.channels or (4 if args.quick else 16)
    args.pretrain_epochs = args.pretrain_epochs or (1 if args.quick else 30)
    args.epochs = args.epochs or (1 if args.quick else 5)
    device = common.device_for(args.quick)
    out = common.out_folder(args.out, device)
    data = common.digits(device, args.seed, limit=32 if args.quick else None, images=True)
    config = lowbit.LowbitConfig(fmt)
    clock = common.Stopwatch()
    rows: list[dict] = []

    fp32 = cnn(args.channels, args.seed, device)
    optimizer = torch.optim.Adam(fp32.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(args.seed)
    for _ in range(args.pretrain_epochs):
        common.train_epoch(fp32, optimizer, data[0], data[1], args.batch, generator)
    evaluate("FP32", fp32, data, rows, clock)

    def lba_copy():
        return lowbit.convert(copy.deepcopy(fp32), config, skip=())  # appendix C.1: every forward GEMM

    evaluate("LBA zero-shot", lba_copy(), data, rows, clock)

    baseline = copy.deepcopy(fp32)
    fine_tune(baseline, data, args.epochs * 2, args.lr, args.batch, args.seed)
    evaluate("FP32 fine-tuned (baseline)", baseline, data, rows, clock)

    one_stage = lba_copy()
    lowbit.set_underflow(one_stage, True)
    fine_tune(one_stage, data, args.epochs * 2, args.lr, args.batch, args.seed)  # the seed: 10 epochs vs 5 + 1
    evaluate("LBA 1-stage (UF)", one_stage, data, rows, clock)

    dual = lba_copy()
    lowbit.set_underflow(dual, False)
    fine_tune(dual, data, args.epochs, args.lr, args.batch, args.seed)
    evaluate("LBA stage 1 (no UF)", dual, data, rows, clock)
    lowbit.set_underflow(dual, True)
    fine_tune(dual, data, 1, args.lr / 10, args.batch, args.seed + 1)
    evaluate("LBA stage 2 (no UF -> UF)", dual, data, rows, clock)

    stem = "lowbit_cnn_dual_stage" + ("" if args.man == 7 else f"_m{args.man}e4")  # Table 2's format unsuffixed
    table = common.write_csv(rows, out / f"{stem}.csv", device)
    plot(table, out / f"{stem}.png", f"M{args.man}E4")


if __name__ == "__main__":
    main()
