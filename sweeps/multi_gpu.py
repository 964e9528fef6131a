"""`python -m sweeps.run SPACE --gpus N`: one sweep process per GPU, each measuring a disjoint part of the space,
their tables merged into the one a single GPU writes.

Parts are whole build groups (build_stage's translation units of --group-size variants, dealt round-robin): each
process builds and loads exactly the libraries a one-GPU run of the same space builds, so a kernel cache filled by
either serves the other. Each part runs `python -m sweeps.run` with CUDA_VISIBLE_DEVICES set to its GPU and
`--part I/N`, in `<out>/parts/<I>of<N>/` (its table, tuned table and log). A part's table is given the rows of
the merged table that are its own and the peers', so a rerun with any N measures only what is missing, and an
interrupted part resumes where it stopped. The peers' rows are dealt by shape (part I measures the peers of
shapes I, I + N, …). Each part re-times its own fastest rows per (mode, shape) less those the other parts' rows
(read from their tables as they stand) already beat --finalists times over: one GPU's finalists (up to rows
within an other part's re-timing of the cut, `among_fastest`), and, the parts screening each shape at about the
same time, not the N-fold re-timing that each part taking its own fastest would be. Power rows are each part's
own.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from cutlass_ext import tuned

from . import build_stage
from .paths import results_folder, tuned_table_path
from .table import KEY


def _parse_part(spec: str) -> tuple[int, int]:
    try:
        index, count = (int(value) for value in spec.split("/"))
    except ValueError:
        raise ValueError(f"--part {spec!r} must be I/N (integers)") from None
    if not 0 <= index < count:
        raise ValueError(f"--part {spec!r}: I must be in [0, N)")
    return index, count


def group_size(survivors: list, args) -> int:
    """The variants per translation unit of a one-GPU run of `survivors` with these --group-size and --jobs."""
    return args.group_size or build_stage.auto_group_size(len(survivors), args.jobs or os.cpu_count() or 1)


def part(survivors: list, args) -> list:
    """The survivors a `--part I/N` process measures (all of them without --part): every N-th build group from
    the I-th, groups of --group-size variants formed as build_stage forms them, in the survivors' order."""
    if args.part is None:
        return survivors
    index, count = _parse_part(args.part)
    groups = build_stage._groups(survivors, group_size(survivors, args))
    return [config for group in groups[index::count] for config in group]


def measures_peers(args, shape_index: int) -> bool:
    """Whether this process measures the peers of the shape at `shape_index` (every one without --part)."""
    if getattr(args, "part", None) is None:
        return True
    index, count = _parse_part(args.part)
    return shape_index % count == index


def sibling_tables(args, table: Path) -> list[Path]:
    """The tables of the other parts of this `--part I/N` run (none without --part): their folders sit beside
    this part's."""
    if getattr(args, "part", None) is None:
        return []
    index, count = _parse_part(args.part)
    out = Path(table).parent.parent.parent
    return [part_folder(out, j, count) / Path(table).name for j in range(count) if j != index]


def sibling_rows(tables: list[Path]) -> pd.DataFrame | None:
    """The other parts' rows as they stand, or None when there are none yet. They are still appending: the text
    after the last line break is left out, and a table that does not parse (a quoted field cut short) is skipped,
    which only keeps this part's finalists as they are."""
    frames = []
    for path in tables:
        text = path.read_text() if path.is_file() else ""
        try:
            frame = pd.read_csv(io.StringIO(text[: text.rfind("\n") + 1]), on_bad_lines="skip")
        except (pd.errors.ParserError, pd.errors.EmptyDataError):
            continue
        frame["tflops"] = pd.to_numeric(frame["tflops"], errors="coerce")  # a row skipped as bad counts for none
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else None


def among_fastest(chosen: pd.DataFrame, others: pd.DataFrame, count: int) -> pd.DataFrame:
    """The rows of `chosen` (this part's `count` fastest per mode of one shape) that fewer than `count` rows of
    `chosen` and `others` (the other parts' rows of that shape, as far as measured) beat in their mode, by the
    times the tables hold. Rows not yet measured could only remove rows, so with screening times alone these are
    every finalist a one-GPU run has; an other part's finalist may already hold its re-timed time, which can move a
    row within that re-timing's change of the cut out of them. The parts together re-time about as many rows as
    one GPU would, not N times as many."""
    if others.empty or chosen.empty:
        return chosen
    rows = pd.concat([chosen[["mode", "tflops"]], others[["mode", "tflops"]]], ignore_index=True)
    # rank "min": one more than the rows strictly faster in the mode
    ranks = rows.groupby("mode")["tflops"].rank(method="min", ascending=False).iloc[: len(chosen)]
    return chosen[(ranks <= count).to_numpy()]


def visible_devices() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [device.strip() for device in visible.split(",") if device.strip()]
    import torch

    return [str(index) for index in range(torch.cuda.device_count())]


def part_folder(out: Path, index: int, count: int) -> Path:
    return Path(out) / "parts" / f"{index}of{count}"


def _read(path: Path) -> pd.DataFrame | None:
    """A table's rows as the text they hold (no float round trip), or None when there is none."""
    if not path.is_file() or not path.stat().st_size:
        return None
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _write(frame: pd.DataFrame, path: Path) -> None:
    """`frame` to `path` atomically: a crash keeps the old table or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".csv.tmp")
    frame.to_csv(staging, index=False)
    os.replace(staging, path)


def seed_part(merged: Path, part_table: Path, names: set[str]) -> None:
    """Add to a part's table the merged table's rows of its variants and of the peers that it lacks."""
    frame = _read(merged)
    if frame is None:
        return
    rows = frame[frame["name"].isin(names) | frame["family"].isin(tuned.PEER_FAMILIES)]
    existing = _read(part_table)
    if existing is not None:
        have = set(existing[KEY].itertuples(index=False))
        rows = pd.concat([existing, rows[[key not in have for key in rows[KEY].itertuples(index=False)]]])
    _write(rows, part_table)


def merge(part_tables: list[Path], merged: Path) -> pd.DataFrame:
    """The parts' rows (a row measured by several parts, a peer's, from the first) and the merged table's rows
    that no part has (other GPUs', other shapes'), written to `merged`."""
    frames = [frame for frame in map(_read, part_tables) if frame is not None]
    if not frames:
        return pd.DataFrame()
    rows = pd.concat(frames, ignore_index=True).drop_duplicates(KEY, keep="first")
    earlier = _read(merged)
    if earlier is not None:
        measured = set(rows[KEY].itertuples(index=False))
        kept = [key not in measured for key in earlier[KEY].itertuples(index=False)]
        rows = pd.concat([earlier[kept], rows], ignore_index=True)
    _write(rows[frames[0].columns], merged)
    return rows


def run(argv: list[str], args, survivors: list) -> int:
    """Measure `survivors` on --gpus GPUs, one `sweeps.run --part` process each; merge, then write the tuned table
    and the report as a one-GPU run does. Exit status 1 if a part failed (its finished rows are merged)."""
    import torch

    devices = visible_devices()
    if args.gpus > len(devices):
        print(f"error: --gpus {args.gpus}: {len(devices)} GPUs are visible", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out is not None else results_folder(torch.cuda.get_device_name(0), None)
    table_name = f"sweep_{Path(args.space).stem}.csv"
    size = group_size(survivors, args)
    jobs = args.jobs or max(1, (os.cpu_count() or 1) // args.gpus)  # the parts build at once: share the cores
    started = time.perf_counter()
    running = []
    for index in range(args.gpus):
        folder = part_folder(out, index, args.gpus)
        folder.mkdir(parents=True, exist_ok=True)
        spec = f"{index}/{args.gpus}"
        names = {config.name for config in part(survivors, _with_part(args, spec, size))}
        seed_part(out / table_name, folder / table_name, names)
        # later options override earlier ones: the user's arguments, then this part's
        command = [sys.executable, "-m", "sweeps.run", *argv, "--gpus", "1", "--part", spec]
        command += ["--group-size", str(size), "--jobs", str(jobs), "--out", str(folder)]
        command += ["--tuned-out", str(folder / "tuned.csv"), "--no-report"]
        log = (folder / "log.txt").open("w")
        environment = {**os.environ, "CUDA_VISIBLE_DEVICES": devices[index]}
        running.append((index, subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT), log))
        print(f"part {spec}: {len(names)} variants on GPU {devices[index]}, log {folder / 'log.txt'}")
    failed = []
    for index, process, log in running:
        status = process.wait()
        log.close()
        print(
            f"part {index}/{args.gpus} finished with exit status {status} after {time.perf_counter() - started:.0f} s"
        )
        if status:
            failed.append(index)
            print((part_folder(out, index, args.gpus) / "log.txt").read_text()[-3000:])  # the log's end
    rows = merge([part_folder(out, i, args.gpus) / table_name for i in range(args.gpus)], out / table_name)
    print(f"{args.gpus} GPUs: {len(rows)} rows in {out / table_name}, {(time.perf_counter() - started) / 60:.1f} min")
    if rows.empty:
        return 1
    from . import sweep

    gpu = rows["gpu"][rows["gpu"] != ""].iloc[0]
    tuned_path = sweep.write_tuned(out, gpu, tuned_table_path(gpu, args.out, args.tuned_out))
    print(f"tuned table {tuned_path}")
    if not args.no_report:
        from . import report

        report.main([str(out / table_name), "--top", "3"])
    return 1 if failed else 0


def _with_part(args, spec: str, size: int):
    """`args` as part `spec`'s process parses them (its --part and --group-size)."""
    copy = type(args)(**vars(args))
    copy.part, copy.group_size = spec, size
    return copy
