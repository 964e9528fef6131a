"""Training a fully connected network with an 8-bit (M4E3) accumulator and each STE (seed 002, section 4,
Table 6, appendix C.3), on scikit-learn's bundled 8×8 digits in place of MNIST (nothing is downloaded).

    python python/lowbit_mlp_digits.py            # on the GPU: the kernel through cutlass_ext.lowbit
    python python/lowbit_mlp_digits.py --quick    # CPU reference, narrow network, a few seconds

The seed's setup: 4 fully connected layers with ReLU, hidden layers 1024 wide, every layer low-bit (forward GEMMs
through the accumulator, backward through the chosen STE), Adam (lr 1e-3, betas (0.9, 0.999), eps 1e-8, no weight
decay), StepLR γ = 0.95 per epoch, mini-batch 16, no dropout or augmentation, a fixed exponent bias of 5 for product
and accumulator. Fewer epochs than the seed's 100 (the digits set is small). One run in FP32, one per STE with
underflow on, and, as Table 6 has them, identity and immediate-DIFF again with underflow off (the seed's DIFF
learns only without underflow: 11.35% with, 97.67% without; at bias 5, R_UF = 2^-5 flushes 98.6% of the nonzero
products x·w entering the second layer and all of those entering the third and fourth at initialization, so their
steps leave the sum unchanged and DIFF blocks their gradient). Writes lowbit_mlp_digits.csv (loss and test accuracy
per epoch) and lowbit_mlp_digits.png into --out.
"""

from __future__ import annotations

import lowbit_common as common
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from cutlass_ext import lowbit  # noqa: E402


def mlp(width: int, seed: int, device: torch.device) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    sizes = [64, width, width, width, 10]
    layers = []
    for index, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        layers.append(torch.nn.Linear(fan_in, fan_out))
        if index < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).to(device)


def run(name: str, config: lowbit.LowbitConfig | None, args, data, device) -> list[dict]:
    x_train, y_train, x_test, y_test = data
    model = mlp(args.width, args.seed, device)
    if config is not None:
        lowbit.convert(model, config, skip=())  # appendix C.3: all 4 layers low-bit
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.95)
    generator = torch.Generator().manual_seed(args.seed)
    clock = common.Stopwatch()
    rows = []
    for epoch in range(1, args.epochs + 1):
        loss = common.train_epoch(model, optimizer, x_train, y_train, args.batch, generator)
        schedule.step()
        rows.append(
            dict(
                run=name,
                epoch=epoch,
                train_loss=loss,
                test_accuracy=common.accuracy(model, x_test, y_test),
                seconds=clock(),
            )
        )
    print(f"{name}: test accuracy {rows[-1]['test_accuracy']:.4f}, loss {rows[-1]['train_loss']:.4f}, {clock():.1f} s")
    return rows


def plot(table, path) -> None:
    figure, (loss_axis, accuracy_axis) = plt.subplots(1, 2, figsize=(10, 4))
    for name, group in table.groupby("run", sort=False):
        loss_axis.semilogy(group.epoch, group.train_loss, label=name)
        accuracy_axis.plot(group.epoch, group.test_accuracy, label=name)
    loss_axis.set(xlabel="epoch", ylabel="train loss")
    accuracy_axis.set(xlabel="epoch", ylabel="test accuracy", ylim=(0, 1))
    accuracy_axis.legend(fontsize=8)
    figure.suptitle("4-layer MLP on digits, M4E3 accumulator, bias 5")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv=None) -> None:
    parser = common.parser(__doc__)
    common.count(parser, "--epochs", "default 15 (quick: 1)")
    common.count(parser, "--width", "hidden width, default 1024 (quick: 32)")
    common.count(parser, "--batch", "mini-batch size", default=16)
    parser.add_argument("--bias", type=int, default=5, help="exponent bias of product and accumulator")
    parser.add_argument("--chunk", type=int, default=16)
    parser.add_argument("--stes", nargs="+", default=list(lowbit.STES), choices=lowbit.STES)
    parser.add_argument(
        "--no-uf-stes",
        nargs="*",
        default=["identity", "immediate-diff"],
        choices=lowbit.STES,
        help="STEs also run with underflow off (Table 6's rows)",
    )
    parser.add_argument("--eps1", type=float, default=1e-12, help="DIFF STE ε1 (eq. 17)")
    parser.add_argument("--eps2", type=float, default=1e-3, help="DIFF STE ε2 (eq. 17)")
    args = parser.parse_args(argv)
    fmt = common.lowbit_format(parser, 4, 3, args.bias, args.bias, chunk=args.chunk)
    args.epochs = args.epochs or (1 if args.quick else 15)
    args.width = args.width or (32 if args.quick else 1024)
    device = common.device_for(args.quick)
    out = common.out_folder(args.out, device)
    data = common.digits(device, args.seed, limit=96 if args.quick else None)
    rows = run("fp32", None, args, data, device)
    for ste in args.stes:
        config = lowbit.LowbitConfig(fmt, ste=ste, eps1=args.eps1, eps2=args.eps2)
        rows += run(f"M4E3 {ste}", config, args, data, device)
    for ste in args.no_uf_stes:
        config = lowbit.LowbitConfig(fmt.with_underflow(False), ste=ste, eps1=args.eps1, eps2=args.eps2)
        rows += run(f"M4E3 {ste} no UF", config, args, data, device)
    table = common.write_csv(rows, out / "lowbit_mlp_digits.csv", device)
    plot(table, out / "lowbit_mlp_digits.png")


if __name__ == "__main__":
    main()
