"""python -m sweeps.report SWEEP.csv [--out DIR]: the ranked table, and PNG plots of a sweep table.

<table>_throughput.png: per shape, each mode's fastest variant against cuBLAS FP32 / TF32 and Triton (seed 000
Figure 14). <table>_power.png: GFLOP/s per W of the rows whose power was sampled (seed Figure 16). Needs matplotlib
(`pip install -e ".[report]"`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from cutlass_ext.cli_types import positive_int

PEERS = ("cublas", "triton")
COLUMNS = ("family", "mode", "name", "m", "n", "k", "tflops", "status", "relres", "watts", "gflops_per_watt", "gpu")
NUMERIC = ("m", "n", "k", "tflops", "relres", "watts", "gflops_per_watt")


def read_sweep_table(path: Path) -> pd.DataFrame:
    """A sweep table, or SystemExit(2) with one line saying why it is not one (unreadable, empty, not a sweep
    table's columns)."""
    try:
        frame = pd.read_csv(path)
    except (OSError, UnicodeDecodeError, pd.errors.EmptyDataError, pd.errors.ParserError) as error:
        print(f"error: {path}: cannot be read as a CSV table: {error}".splitlines()[0], file=sys.stderr)
        raise SystemExit(2) from None
    missing = [column for column in COLUMNS if column not in frame.columns]
    if missing:
        print(f"error: {path}: not a sweep table (it lacks {missing})", file=sys.stderr)
        raise SystemExit(2)
    for column in NUMERIC:
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = frame[column].notna() & values.isna()
        if bad.any():
            row = int(bad.idxmax()) + 2  # the file's line: a header, then rows from 1
            print(
                f"error: {path}: line {row}: {column} {frame[column][bad].iloc[0]!r} is not a number", file=sys.stderr
            )
            raise SystemExit(2)
        frame[column] = values
    # a row marked ok without a time was not measured (a run killed between the gate and the timing)
    return frame.assign(status=frame["status"].where((frame["status"] != "ok") | frame["tflops"].notna(), "untimed"))


def best_per_shape(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (shape, family, mode) the fastest row that passed the gate, with its ratios to cuBLAS FP32 and to
    cuBLAS in the same mode (FP8: torch._scaled_mm with the same accumulation). A shape names its batch (the
    experts of a grouped product) where that is not 1, and its GPU where the table holds several."""
    ok = frame[frame["status"] == "ok"].copy()
    ok["shape"] = ok["m"].astype(str) + "x" + ok["n"].astype(str) + "x" + ok["k"].astype(str)
    if "batch" in ok.columns:
        batch = ok["batch"].fillna(1).astype(int)
        ok["shape"] = ok["shape"] + batch.map(lambda b: "" if b == 1 else f"x{b}")
    if "gpu" in ok.columns and ok["gpu"].nunique() > 1:
        ok["shape"] = ok["shape"] + " (" + ok["gpu"].astype(str) + ")"
    best = ok.sort_values("tflops", ascending=False).groupby(["shape", "family", "mode"]).head(1)
    fp32 = best[(best["family"] == "cublas") & (best["mode"] == "fp32")].set_index("shape")["tflops"]
    best["vs_cublas_fp32"] = (best["tflops"] / best["shape"].map(fp32)).round(2)
    cublas = best[best["family"] == "cublas"].set_index(["shape", "mode"])["tflops"]
    same_mode = pd.Series(list(zip(best["shape"], best["mode"])), index=best.index).map(cublas)
    best["vs_cublas"] = (best["tflops"] / same_mode).round(2)
    best["size"] = (best["m"] * best["n"] * best["k"]) ** (1 / 3)
    return best.sort_values(["size", "tflops"], ascending=[True, False])


def ranked(frame: pd.DataFrame, top: int) -> pd.DataFrame:
    ok = frame[frame["status"] == "ok"]
    keys = ["m", "n", "k", "mode"] + [c for c in ("batch", "gpu") if c in ok.columns]
    return ok.sort_values("tflops", ascending=False).groupby(keys, dropna=False).head(top)


def _label(row) -> str:
    return f"{row['family']} {row['mode']}" if row["family"] in PEERS else f"ours {row['mode']}"


def plot(best: pd.DataFrame, out: Path, stem: str) -> list[Path]:
    """<stem>_throughput.png and <stem>_power.png in `out` (one pair per sweep table)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best = best.assign(label=best.apply(_label, axis=1))
    shapes = list(dict.fromkeys(best["shape"]))

    def line_plot(rows, column, ylabel, title, marker, path):
        figure, axis = plt.subplots(figsize=(8, 5))
        for label, group in rows.groupby("label"):
            axis.plot([shapes.index(s) for s in group["shape"]], group[column], marker=marker, label=label)
        axis.set_xticks(range(len(shapes)), shapes, rotation=20)
        axis.set_xlabel("m x n x k")
        axis.set_ylabel(ylabel)
        axis.set_title(title)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(path, dpi=120)
        plt.close(figure)
        return path

    title = f"Fastest variant per mode, {', '.join(dict.fromkeys(best['gpu'].astype(str)))}"
    written = [line_plot(best, "tflops", "TFLOP/s", title, "o", out / f"{stem}_throughput.png")]
    powered = best[best["watts"].notna()]
    if not powered.empty:
        title = "Energy efficiency (NVML board power, >= 2 s per point)"
        written.append(line_plot(powered, "gflops_per_watt", "GFLOP/s per W", title, "s", out / f"{stem}_power.png"))
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sweeps.report", description=__doc__)
    parser.add_argument("table", type=Path, help="a sweep CSV (sweeps/results/<gpu>/sweep_*.csv)")
    parser.add_argument("--out", type=Path, help="where the PNGs go (default: beside the table)")
    parser.add_argument("--top", type=positive_int, default=5, help="rows per (shape, mode) in the ranked table")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args(argv)
    frame = read_sweep_table(args.table)
    print(f"{args.table}: {len(frame)} rows; status counts: {frame['status'].value_counts().to_dict()}")
    if not (frame["status"] == "ok").any():
        print(f"error: {args.table}: no row passed the accuracy gate (status ok): nothing to rank", file=sys.stderr)
        return 2
    columns = ["m", "n", "k", "family", "mode", "name", "tflops", "relres", "watts", "gflops_per_watt"]
    columns += ["gpu"] if frame["gpu"].nunique() > 1 else []
    with pd.option_context("display.width", 220, "display.max_colwidth", 52):
        print(ranked(frame, args.top)[columns].to_string(index=False))
        best = best_per_shape(frame)
        print("\nfastest per shape and mode:")
        columns = ["shape", "family", "mode", "name", "tflops", "vs_cublas_fp32", "vs_cublas", "watts"]
        print(best[columns].to_string(index=False))
    if not args.no_plots:
        out = args.out or args.table.parent
        if out.exists() and not out.is_dir():
            print(f"error: --out {out} is a file, not a folder for the plots", file=sys.stderr)
            return 2
        try:
            out.mkdir(parents=True, exist_ok=True)
            written = plot(best, out, args.table.stem)
        except OSError as error:
            print(f"error: --out {out}: cannot write the plots: {error.strerror or error}", file=sys.stderr)
            return 2
        except ImportError:
            print("matplotlib is not installed: pip install -e '.[report]' for the plots", file=sys.stderr)
            return 1
        print("wrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
