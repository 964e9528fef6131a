"""Side-by-side FP8 GEMM benchmark over Llama-3-70B's shapes (seed 003), in one run:

    python python/bench_fp8.py --out sweeps/results/h100/gemm_fp8.csv

Rows per shape: `ext.gemm_fp8` and `torch._scaled_mm` (cuBLAS FP8) with per-tensor and row-wise scales, fast and
promoted accumulation; cuBLAS FP16 on the same (dequantized) operands; the TK-GEMM-style Triton split-K kernel
(per-tensor scales, fastest of its configs for the shape); and `weights read`, a plain streaming read of B's
bytes timed the same way, the DRAM floor of decode's weight-bound GEMMs (its TB/s is the achievable read
bandwidth; no TFLOP/s or relres). e4m3 inputs, bf16 output. Each row is timed per call with CUDA events
(`events_us`, host launch gaps included) and replayed from a CUDA graph (`graph_us`, the GPU's time alone; the best
of `--rounds` round-robin passes over the contenders, `graph_spread` how much slower the slowest pass was). At
M >= `--sustained-from-m` each GEMM row is also timed running back to back for `--sustained-seconds` after half a
second of the same (`sustained_us`): at these sizes the 700 W cap sets the clock within milliseconds, so a short
replay reads an idle-warm GPU and moves 5-15% between runs, while the sustained rate, the one training sees, moves
under 2% (docs/design-notes.md, timing method and the power limit). TFLOP/s and TB/s (bytes of A, B and D) come from
`graph_us`. relres is against an FP64 product of the dequantized
inputs over the first rows. A PNG of time against M per (N, K) is written beside the CSV.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import pandas as pd
import torch
import yaml

import cutlass_ext as ext
from cutlass_ext import benchmark, fp8, numerics, peers_fp8, registry

DEFAULT_SHAPES = Path(__file__).resolve().parents[1] / "configs" / "shapes_llama70b.yaml"
REFERENCE_ROWS = 64  # relres over the first rows: an FP64 product of all of M=16384 x N=57344 would take 7.5 GB


def shape_file(text: str) -> list[tuple[int, int, int]]:
    """argparse type for --shapes: the file's [m, n, k] rows, or one error line naming the file (read up front, so
    a bad path is refused before any GPU setup)."""
    try:
        rows = yaml.safe_load(Path(text).read_text())["shapes"]
        shapes = [tuple(int(v) for v in row[:3]) for row in rows]
    except OSError as error:
        raise argparse.ArgumentTypeError(f"cannot read shape file {text!r}: {error.strerror}") from None
    except (yaml.YAMLError, KeyError, TypeError, ValueError):
        shapes = []
    if not shapes or any(len(s) != 3 or min(s) < 1 for s in shapes):
        raise argparse.ArgumentTypeError(f"shape file {text!r} has no list of positive [m, n, k] under `shapes`")
    return shapes


def make_inputs(m: int, n: int, k: int, seed: int = 0):
    """Rotated input sets per scale granularity: (a, b, scale_a, scale_b), e4m3, from normal data."""
    generator = torch.Generator(device="cuda").manual_seed(seed * 7919 + m * 31 + n * 17 + k)
    bytes_per_set = m * k + n * k + 2 * m * n
    sets = {"tensor": [], "row": []}
    for _ in range(benchmark.rotation_count(bytes_per_set)):
        x = torch.randn(m, k, generator=generator, device="cuda")
        w = torch.randn(n, k, generator=generator, device="cuda") / k**0.5
        for granularity, granularity_sets in sets.items():
            a, scale_a = ext.quantize_fp8(x, granularity=granularity)
            b, scale_b = ext.quantize_fp8(w, granularity=granularity)
            granularity_sets.append((a, b, scale_a, scale_b))
        del x, w
    return sets


def contenders(sets, repeats: int):
    """(family, name, granularity, accum, run, input sets)."""
    for granularity, input_sets in sets.items():
        for accum in ("fast", "promoted"):

            def ours(a, b, scale_a, scale_b, accum=accum):
                return ext.gemm_fp8(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, accum=accum)

            yield "cutlass_ext", "ext.gemm_fp8", granularity, accum, ours, input_sets
            scaled_mm = peers_fp8.scaled_mm(torch.bfloat16, accum)
            yield "cublas", "torch._scaled_mm", granularity, accum, scaled_mm, input_sets
    name, triton_run = peers_fp8.triton_splitk(sets["tensor"], torch.bfloat16, repeats)
    yield "triton", name, "tensor", "fast", triton_run, sets["tensor"]
    fp16_sets = [
        ((a.float() * scale_a).half(), (b.float() * scale_b).half(), None, None)
        for a, b, scale_a, scale_b in sets["tensor"]
    ]
    yield "cublas", "torch.matmul fp16", "", "", lambda a, b, *_: peers_fp8.cublas_fp16(a, b), fp16_sets
    name, read_run = peers_fp8.weights_read(sets["tensor"], repeats)
    yield "floor", name, "", "", read_run, sets["tensor"]


def reference_relres(run, inputs) -> float:
    a, b, scale_a, scale_b = inputs
    rows = min(a.shape[0], REFERENCE_ROWS)
    if scale_a is None:  # FP16 operands, already dequantized
        reference = a[:rows].double() @ b.double().T
    else:
        row_scale = scale_a[:rows] if scale_a.numel() > 1 else scale_a
        reference = numerics.dequantized_product(a[:rows], b, row_scale, scale_b)
    return numerics.relative_residual(run(*inputs)[:rows], reference)


def measure_shape(m, n, k, repeats, environment, rounds: int = 2, sustained_seconds: float = 0.0) -> list[dict]:
    """Every contender first run (and checked against the reference), then timed: per call with events, and from
    graph replay in `rounds` round-robin passes over all contenders, the best pass kept. Round-robin so that no
    contender is the one timed while the clocks settle (the first timed used to read up to 15% slow at N=57344),
    every other pass in reverse (`benchmark.pass_order`) so that none always follows the same one.
    With `sustained_seconds`, then one sustained pass over the GEMMs."""
    sets = make_inputs(m, n, k)
    measured = []
    for family, name, granularity, accum, run, input_sets in contenders(sets, repeats):
        try:
            relres = float("nan") if family == "floor" else reference_relres(run, input_sets[0])
            events_us = benchmark.median_time_us(run, input_sets, warmup=3, repeats=repeats)
        except RuntimeError as error:  # a peer that cannot take this combination (cuBLAS row-wise limits)
            print(f"  {name} {granularity} {accum}: skipped ({str(error).splitlines()[0][:120]})", file=sys.stderr)
            continue
        measured.append(((family, name, granularity, accum, run, input_sets), relres, events_us, []))
    for round_index in range(rounds):
        for (_, _, _, _, run, input_sets), _, events_us, graph_times in benchmark.pass_order(measured, round_index):
            # ~20 ms of replay per timing, between 2 and 20 calls per graph
            calls = max(2, min(20, int(20_000 / events_us)))
            graph_times.append(benchmark.graph_time_us(run, input_sets, calls=calls, repeats=5 if calls < 20 else 10))
    sustained = {}
    for index, ((family, _, _, _, run, input_sets), *_) in enumerate(measured):
        if sustained_seconds and family != "floor":
            sustained[index] = benchmark.sustained_time_us(run, input_sets, sustained_seconds, warm_seconds=0.5)
    rows = []
    for index, ((family, name, granularity, accum, _, _), relres, events_us, graph_times) in enumerate(measured):
        graph_us = min(graph_times)
        element_bytes = 2 if family == "cublas" and "fp16" in name else 1
        moved = n * k if family == "floor" else element_bytes * (m * k + n * k) + 2 * m * n
        flops = float("nan") if family == "floor" else 2 * m * n * k
        rows.append(
            {
                "family": family,
                "name": name,
                "granularity": granularity,
                "accum": accum,
                "m": m,
                "n": n,
                "k": k,
                "events_us": round(events_us, 2),
                "graph_us": round(graph_us, 2),
                "graph_spread": round(max(graph_times) / graph_us - 1, 3),  # slowest round over the best
                "sustained_us": round(sustained.get(index, float("nan")), 2),
                "tflops": round(flops / graph_us / 1e6, 2),
                "tbps": round(moved / graph_us / 1e6, 3),
                "relres": relres,
                **environment,
            }
        )
    del sets, measured
    torch.cuda.empty_cache()
    return rows


def contender_labels(frame: pd.DataFrame) -> pd.Series:
    """One label per contender across shapes: the Triton and floor rows' names carry the config tuned per shape.
    The floor and FP16 rows have no scaling or accumulation: empty cells, NaN once the CSV is read back."""
    name = frame["family"].map({"triton": "triton splitk", "floor": "weights read"}).fillna(frame["name"])
    return (name + " " + frame["granularity"].fillna("") + " " + frame["accum"].fillna("")).str.strip()


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per shape: graph-replay µs of each contender side by side, ours against cuBLAS FP8 (by graph replay, and
    sustained where measured) and Triton, and how close ours comes to the weights' streaming read."""
    frame = frame.assign(column=contender_labels(frame))
    wide = frame.pivot_table(index=["n", "k", "m"], columns="column", values="graph_us").reset_index()
    sustained = pd.DataFrame()  # CSVs from before the sustained column have none
    if "sustained_us" in frame and frame["sustained_us"].notna().any():
        sustained = frame.pivot_table(index=["n", "k", "m"], columns="column", values="sustained_us")
        sustained = sustained.reindex(pd.MultiIndex.from_frame(wide[["n", "k", "m"]]))
    for granularity in ("tensor", "row"):
        for accum in ("fast", "promoted"):
            ours, cublas = f"ext.gemm_fp8 {granularity} {accum}", f"torch._scaled_mm {granularity} {accum}"
            if ours in wide and cublas in wide:
                wide[f"speedup vs cuBLAS {granularity} {accum}"] = (wide[cublas] / wide[ours]).round(2)
            if ours in sustained and cublas in sustained:
                ratio = (sustained[cublas] / sustained[ours]).round(2).to_numpy()
                wide[f"sustained speedup vs cuBLAS {granularity} {accum}"] = ratio
    floor, fastest_ours = "weights read", "ext.gemm_fp8 tensor fast"
    if floor in wide and fastest_ours in wide:
        wide["floor / ours tensor fast"] = (wide[floor] / wide[fastest_ours]).round(2)
    triton = "triton splitk tensor fast"
    if triton in wide and "ext.gemm_fp8 tensor fast" in wide:
        wide["speedup vs triton"] = (wide[triton] / wide["ext.gemm_fp8 tensor fast"]).round(2)
    # who wins where: the three FP8 contenders with the same scaling and accumulation (Triton's is per tensor, fast)
    rivals = {"ours": "ext.gemm_fp8 tensor fast", "cuBLAS": "torch._scaled_mm tensor fast", "triton": triton}
    if all(column in wide for column in rivals.values()):
        times = wide[list(rivals.values())].set_axis(list(rivals), axis=1)
        wide["fastest (tensor fast)"] = times.idxmin(axis=1)
    return wide


def plot(frame: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = frame[["n", "k"]].drop_duplicates().itertuples(index=False)
    shapes = list(shapes)
    figure, axes = plt.subplots(1, len(shapes), figsize=(5 * len(shapes), 4), squeeze=False)
    for axis, (n, k) in zip(axes[0], shapes):
        here = frame[(frame["n"] == n) & (frame["k"] == k)]
        for label, rows in here.groupby(contender_labels(here)):
            axis.plot(rows["m"], rows["graph_us"], marker="o", markersize=3, label=label)
        axis.set(xscale="log", yscale="log", xlabel="M", ylabel="µs (CUDA graph replay)", title=f"N={n}, K={k}")
        axis.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=6)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def build_variants(shapes) -> None:
    """Build every variant the shapes dispatch to, in one parallel run before any timing: `gemm_fp8` builds a
    missing variant at its first call, one at a time (~100 s each for an FP8 kernel on a cold cache)."""
    device = torch.device("cuda", torch.cuda.current_device())
    names = {
        name
        for m, n, k in shapes
        for accum in ("fast", "promoted")
        for name in fp8.variant_names(device, "e4m3", "e4m3", "bf16", accum, m, n, k)
    }
    registry.ensure_names_registered(sorted(names), device)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--shapes", type=shape_file, default=str(DEFAULT_SHAPES), help="shape set YAML ([m, n, k] per shape)"
    )
    parser.add_argument("--m", type=int, nargs="+", help="only these M")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="round-robin graph-replay passes over the contenders, the best kept (more for the power-limited "
        "large shapes, whose clocks drift between contenders)",
    )
    parser.add_argument("--sustained-from-m", type=int, default=1024, help="time sustained rates from this M on")
    parser.add_argument(
        "--sustained-seconds", type=float, default=1.0, help="seconds of back-to-back calls per sustained row (0: none)"
    )
    parser.add_argument("--out", type=Path, default=Path("sweeps/results/local/gemm_fp8.csv"))
    args = parser.parse_args(argv)
    from script_device import require_cuda  # here: the tests load this file without python/ on sys.path

    require_cuda("bench_fp8")
    shapes = [s for s in args.shapes if not args.m or s[0] in args.m]
    environment = {**benchmark.environment(), "command": shlex.join(["python", "python/bench_fp8.py", *sys.argv[1:]])}
    build_variants(shapes)
    rows = []
    for m, n, k in shapes:
        print(f"{m}x{n}x{k}", file=sys.stderr, flush=True)
        sustained_seconds = args.sustained_seconds if m >= args.sustained_from_m else 0.0
        rows.extend(measure_shape(m, n, k, args.repeats, environment, args.rounds, sustained_seconds))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(args.out, index=False)  # every shape as it finishes
    frame = pd.DataFrame(rows)
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        print(summary(frame).to_string(index=False))
    try:
        plot(frame, args.out.with_suffix(".png"))
    except ImportError:
        print("matplotlib is not installed: no plot (pip install -e '.[report]')", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
