"""python -m sweeps.confirm --shapes SHAPES.yaml [--modes MODE ...] [--top N] [--add NAME ...] [--rounds R]
                          [--seconds S] [--out DIR] [--sweeps DIR [--any-gpu]] [--incumbents TABLE]

Re-times each shape's leading variants side by side and lets that run pick the tuned winner. The sweep tables are
a union of many runs taken at different clocks, and their fastest row per shape is partly the luck of its run: at
decode a call takes ~24 µs and the leaders differ by 0.1-0.5 µs; at the power-limited prefill shapes whole runs
move by 5%. Here the candidates of a shape are the `--top` fastest variants at every shape of its (mode, N, K)
(a tile that leads at M = 4 may be the best at M = 8, where no sweep ran it), each checked by the accuracy gate
and timed by CUDA-graph replay in `--rounds` round-robin passes; a row's time is the median of its passes. `--add`
names variants to time at every shape of their mode beside the leaders. With `--seconds`, each pass runs a
candidate back to back for that long (after a second of the same) with board power sampled: the power-capped rate
that large shapes keep in training, where a short replay reads the clock of an idle-warm GPU and moves 5-15%
between runs while the sustained rate moves under 1% (docs/design-notes.md, timing method). Rows go
to `<out>/confirm_<shapes>.csv` (the sweep tables' columns); the tuned table is then re-derived: where a
confirmation run measured a (mode, shape), its latest run picks the winner (tuned.confirmed_winners). A GPU without
tables of its own re-times a sibling's leaders and winners: `--sweeps sweeps/results/h100 --any-gpu --incumbents
cutlass_ext/tuned/h100.csv` on an H200.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import pandas as pd
import torch
from tqdm import tqdm

from cutlass_ext import benchmark, families, registry, tuned
from cutlass_ext.cli_types import positive_int, seconds

from . import measure
from .paths import check_outputs, results_folder, tuned_table_path
from .power import Sampler
from .space import SpaceError, load_shapes
from .sweep import write_tuned
from .table import ResumableTable, config_columns, config_fields


def candidates(
    sweeps: pd.DataFrame, shapes, modes, top: int, latest: tuple = (), added: tuple = (), incumbents=None
) -> dict:
    """{(mode, shape): [variant names]}: the `top` fastest gated variants in the sweep tables at this shape (and in
    each table of `latest` on its own: a new kernel measured once beside old rows of luckier runs), then those at
    the other shapes of `shapes` with the same (n, k, batch) that this one's do not include, then the `added`
    variants of the mode, then the shape's row of the tuned table this run merges into (`incumbents`): the run
    picks the winner, so it re-times the one it would replace."""
    held = {} if incumbents is None else incumbents.groupby(tuned.KEY)["name"].apply(list).to_dict()

    def ranked(table):
        ours = table[~table["family"].isin(tuned.PEER_FAMILIES) & (table["status"] == "ok")]
        return ours.sort_values("tflops", ascending=False).drop_duplicates(["mode", "m", "n", "k", "batch", "name"])

    rankings = [ranked(sweeps)] + [ranked(table) for table in latest]

    def leaders_at(mode, shape) -> list:
        m, n, k, batch = shape
        leaders = []
        for best in rankings:
            here = (best["mode"] == mode) & (best["m"] == m) & (best["n"] == n) & (best["k"] == k)
            leaders += [name for name in best[here & (best["batch"] == batch)]["name"].head(top) if name not in leaders]
        return leaders

    chosen = {}
    for mode in modes:
        for shape in shapes:
            leaders = leaders_at(mode, shape)
            for other in shapes:
                if other != shape and other[1:] == shape[1:]:
                    leaders += [name for name in leaders_at(mode, other) if name not in leaders]
            leaders += [name for name in added if families.from_name(name).mode == mode and name not in leaders]
            leaders += [name for name in held.get((mode, *shape), ()) if name not in leaders]
            if leaders:
                chosen[mode, shape] = leaders
    return chosen


def confirm(problem, mode: str, names: list, rounds: int, repeats: int, seconds: float = 0.0) -> dict:
    """{name: measured columns} for one shape: the gate once, then `rounds` round-robin passes of graph replay
    (`repeats` replays of a few calls, or `seconds` of back-to-back calls with board power sampled)."""
    runs, rows = {}, {}
    for name in names:
        config = families.from_name(name)
        run, prepare = families.of(config).plugin("measure").kernel_runner(config)
        sets = problem.operands(prepare)
        try:
            relres = problem.relres(run(*sets[0]))
        except RuntimeError as error:
            rows[name] = {"status": "cannot_run", "detail": str(error).splitlines()[0][:200]}
            continue
        status, detail = problem.gate(mode, relres)
        rows[name] = {"relres": relres, "status": status, "detail": detail}
        if status == "ok":
            runs[name] = (run, sets)
    times, watts = {name: [] for name in runs}, {name: [] for name in runs}
    for round_index in range(rounds):
        for name, (run, sets) in benchmark.pass_order(runs.items(), round_index):
            if seconds:
                sampler = Sampler()
                times[name].append(benchmark.sustained_time_us(run, sets, seconds, during=sampler))
                watts[name].append(sampler.summary()["watts"])
            else:
                times[name].append(benchmark.graph_time_us(run, sets, calls=problem.graph_calls, repeats=repeats))
    kind = f"sustained ({seconds:g} s)" if seconds else "round-robin"
    for name, passes in times.items():
        time_us = statistics.median(passes)
        rows[name].update(
            time_us=round(time_us, 2),
            tflops=round(problem.flops / time_us / 1e6, 2),
            repeats=None if seconds else rounds * repeats,  # sustained passes time however many calls fit
            detail=f"median of {rounds} {kind} passes, {min(passes):.2f}-{max(passes):.2f} us",
        )
        if seconds:
            rows[name]["watts"] = round(statistics.median(watts[name]), 1)
            rows[name]["gflops_per_watt"] = round(rows[name]["tflops"] * 1e3 / rows[name]["watts"], 2)
    return rows


def existing_file(text: str) -> Path:
    """argparse type: the path of a file that exists."""
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"{text!r}: no such file")
    return Path(text)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sweeps.confirm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shapes", required=True, help="a shape set YAML file (configs/shapes_*.yaml)")
    parser.add_argument("--modes", nargs="+", default=["fp8_fast", "fp8_promoted"], help="modes to confirm")
    parser.add_argument("--top", type=positive_int, default=3, help="leaders per shape of the (mode, N, K) group")
    parser.add_argument(
        "--latest",
        type=existing_file,
        action="append",
        default=[],
        help="a sweep table whose own leaders join (repeatable)",
    )
    parser.add_argument(
        "--add",
        action="extend",
        nargs="+",
        default=[],
        metavar="NAME",
        help="variants timed at every shape of their mode (repeatable)",
    )
    parser.add_argument("--rounds", type=positive_int, default=5, help="round-robin passes")
    parser.add_argument(
        "--seconds",
        type=seconds(0, " (0: graph replay, no sustained timing)"),
        default=0.0,
        help="sustained timing: seconds of back-to-back calls per pass",
    )
    parser.add_argument("--repeats", type=positive_int, default=10, help="graph replays per pass")
    parser.add_argument("--out", type=Path, help="results folder (default sweeps/results/<gpu>/)")
    parser.add_argument(
        "--sweeps",
        type=Path,
        help="folder of the sweep tables whose leaders are re-timed (default: the results folder, --out)",
    )
    parser.add_argument(
        "--any-gpu",
        action="store_true",
        help="take leaders from sweep rows of any GPU (another GPU's leaders re-timed on this one: --sweeps of a "
        "sibling's results folder); default: this GPU's rows only",
    )
    parser.add_argument(
        "--incumbents",
        type=Path,
        help="a tuned table whose rows at these shapes are re-timed beside the leaders (e.g. a sibling GPU's "
        "shipped table); default: the table the winners are merged into",
    )
    parser.add_argument(
        "--tuned-out",
        type=Path,
        help="tuned table to merge the winners into (default: with --out DIR, DIR/tuned_<gpu>.csv; else "
        "cutlass_ext/tuned/<gpu>.csv); rows of other shapes and families are kept",
    )
    args = parser.parse_args(argv)
    for name in args.add:
        try:
            families.from_name(name)
        except ValueError as error:
            parser.error(f"--add {name}: {error}")
    return args


def read_sweeps(folder: Path, option: str = "--sweeps") -> pd.DataFrame:
    """Every sweep table in a folder, or an error naming it (confirm re-times their leaders)."""
    tables = [_read_table(path, option) for path in sorted(folder.glob("sweep_*.csv")) if path.stat().st_size]
    # a table of the pattern that holds no kernels' rows (the multi-GPU run's sweep_gpus.csv) has no leaders
    tables = [table for table in tables if {"gpu", "family", "name", "status"} <= set(table.columns)]
    if not tables:
        raise SystemExit(f"{option} {folder}: no sweep_*.csv tables there to take the leaders from")
    return pd.concat(tables, ignore_index=True)


def _read_table(path: Path, option: str, columns=()) -> pd.DataFrame:
    """A CSV table, or a SystemExit naming the option and the file: unreadable, or without `columns`."""
    try:
        table = pd.read_csv(path)
    except (OSError, UnicodeDecodeError, pd.errors.EmptyDataError, pd.errors.ParserError) as error:
        raise SystemExit(f"{option} {path}: cannot be read as a CSV table: {error}".splitlines()[0]) from None
    missing = [column for column in columns if column not in table.columns]
    if missing:
        raise SystemExit(f"{option} {path}: not a table of this kind (it lacks {missing})")
    return tuned.with_batch(table) if {"m", "n", "k"} <= set(columns) else table  # older tables: no batch column


def sources(args, gpu: str, out: Path) -> tuple:
    """(the sweep rows whose leaders are re-timed, the --latest tables, the incumbents' table or None, the tuned
    table the winners are merged into): this GPU's rows unless --any-gpu; the incumbents from --incumbents, else
    from the table merged into (else the one shipped for this GPU)."""
    sweeps = read_sweeps(args.sweeps or out, "--sweeps" if args.sweeps else "the results folder")
    row_columns = ["gpu", "family", "mode", "name", "m", "n", "k", "tflops", "status"]
    latest = [_read_table(path, "--latest", row_columns) for path in args.latest]
    if not args.any_gpu:
        sweeps = sweeps[sweeps["gpu"] == gpu]
        latest = [table[table["gpu"] == gpu] for table in latest]
    tuned_path = tuned_table_path(gpu, args.out, args.tuned_out)
    try:
        check_outputs(args.out, args.tuned_out, gpu)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    if args.incumbents is not None:
        if not args.incumbents.is_file():
            raise SystemExit(f"--incumbents {args.incumbents}: no such table")
        held = args.incumbents
    else:
        held = tuned_path if tuned_path.is_file() else tuned.TUNED_DIR / f"{tuned.gpu_key(gpu)}.csv"
    option = "--incumbents" if args.incumbents is not None else "the tuned table"
    # a default tuned table that is empty (a new one) holds no incumbents; an empty --incumbents is a mistake
    present = held.is_file() and (args.incumbents is not None or held.stat().st_size > 0)
    incumbents = _read_table(held, option, ["mode", "m", "n", "k", "name"]) if present else None
    return sweeps, latest, incumbents, tuned_path


def check_modes(modes, sweeps: pd.DataFrame, latest: list, added, incumbents) -> None:
    """Each of --modes must be a mode that some row re-timed here has (the sweep rows, the --latest tables', the
    --add variants' or the incumbents'): a SystemExit naming the first that is none of theirs."""
    tables = [sweeps, *latest] + ([] if incumbents is None else [incumbents])
    known = {mode for table in tables if "mode" in table for mode in table["mode"].dropna()}
    known |= {families.from_name(name).mode for name in added}
    for mode in modes:
        if mode not in known:
            raise SystemExit(f"--modes {mode!r}: no row to re-time has this mode; the rows' modes: {sorted(known)}")


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        return _confirm(args)
    except SpaceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except SystemExit as error:  # a message for the user (read_sweeps, sources, check_modes): one error line
        if not isinstance(error.code, str):
            raise
        print(f"error: {error.code}", file=sys.stderr)
        return 2


def _confirm(args) -> int:
    shapes = load_shapes(args.shapes)
    if not torch.cuda.is_available():
        raise SystemExit("sweeps.confirm times kernels: it needs a CUDA GPU")

    environment = benchmark.environment()
    gpu = environment["gpu"]
    out = results_folder(gpu, args.out)
    sweeps, latest, incumbents, tuned_path = sources(args, gpu, out)
    check_modes(args.modes, sweeps, latest, args.add, incumbents)
    chosen = candidates(sweeps, shapes, args.modes, args.top, latest, tuple(args.add), incumbents)
    names = sorted({name for leaders in chosen.values() for name in leaders})
    if not names:
        raise SystemExit(
            f"no candidates: no gated row of --modes {' '.join(args.modes)} at the shapes of {args.shapes}"
        )
    spanned = {families.from_name(name).family for name in names}
    if len(spanned) != 1:
        raise SystemExit(f"confirm one kernel family at a time; the candidates span {sorted(spanned)}")
    (family,) = spanned
    print(f"{len(chosen)} (mode, shape) pairs, {len(names)} candidates")
    registry.ensure_registered([families.from_name(name) for name in names], torch.device("cuda"))

    fields = config_fields(family)
    try:
        table = ResumableTable(out / f"confirm_{Path(args.shapes).stem.removeprefix('shapes_')}.csv", fields)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    for (mode, shape), leaders in tqdm(chosen.items(), desc="confirm", unit="shape"):
        m, n, k, batch = shape
        problem = measure.make_problem(families.get(family).plugin("measure"), shape, mode)
        for name, measured in confirm(problem, mode, leaders, args.rounds, args.repeats, args.seconds).items():
            row = {"family": family, "mode": mode, "name": name, "m": m, "n": n, "k": k, "batch": batch}
            row |= measured | {key: environment[key] for key in ("gpu", "nvcc", "torch", "date")}
            table.append(row | config_columns(families.from_name(name), fields))
        del problem
        torch.cuda.empty_cache()
    path = write_tuned(out, gpu, tuned_path)
    print(f"tuned table: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
