"""python -m sweeps.run SPACE.yaml [SPACE.yaml ...] [--shapes SHAPES.yaml] [--out DIR] [--jobs N]
                       [--dry-run | --build-only]

Spaces are swept one after another, each into its own table; a space whose kernel family does not build for this
GPU (the Hopper families on an sm80-class GPU) is skipped with a line saying so. For each space: enumerates it,
applies the named filter rules (printing what each removed), builds the survivors in
parallel, gates them on accuracy against FP64, times them beside cuBLAS and Triton on the same inputs, samples
board power for each mode's fastest variants, and appends every row to a CSV as it finishes: a killed sweep
resumes where it stopped. The winners per shape go to the tuned table that `ext.gemm` dispatches from.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

from cutlass_ext import families
from cutlass_ext.cli_types import known_arch, non_negative_int, positive_int, seconds
from cutlass_ext.families.rules import DeviceLimits, apply_rules

from . import multi_gpu
from .paths import check_outputs
from .power import MIN_SECONDS
from .space import SpaceError, default_shapes, load_shapes, load_space

DEFAULT_SHAPES = Path(__file__).resolve().parents[1] / "configs" / "shapes_sweep.yaml"


def _limits(arch: str | None) -> DeviceLimits:
    if arch:
        return DeviceLimits.for_arch(arch)
    import torch

    if not torch.cuda.is_available():
        print(
            "error: no CUDA device: a sweep measures on the GPU it runs on; --dry-run and --build-only run without "
            "one, given the target with --arch (e.g. --arch 90a)",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return DeviceLimits.from_device()


power_seconds = seconds(MIN_SECONDS, " (the power sampling window)")


def part_spec(text: str) -> str:
    """argparse type: `I/N` with 0 <= I < N (kept as text: multi_gpu reads it)."""
    try:
        multi_gpu._parse_part(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--part ")) from None
    return text


def _first_per_mode(configs, limit: int) -> list:
    taken = Counter()
    kept = []
    for config in configs:
        taken[config.mode] += 1
        if taken[config.mode] <= limit:
            kept.append(config)
    return kept


def _build_only(survivors: list, arch: str, args) -> int:
    """Build every survivor (the GPU's run builds the ones it has not measured: on a fresh table, all of them,
    grouped alike when --group-size is the same) and report failures; exit status 1 if any failed."""
    from .build_stage import build_all

    built, seconds = build_all(survivors, arch, args.jobs or os.cpu_count() or 1, args.group_size)
    failed = [item for item in built if item.library is None]
    for item in failed:
        print(f"  build failed: {item.config.name}: {item.error}")
    print(f"built {len(built) - len(failed)} of {len(built)} variants for sm_{arch} in {seconds:.0f} s")
    return 1 if failed else 0


def _parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m sweeps.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("space", nargs="+", help="sweep space YAML files (configs/*.yaml), swept in turn")
    parser.add_argument(
        "--shapes",
        help="a shape set YAML file (configs/shapes_*.yaml); default: the one the space names, else shapes_sweep.yaml",
    )
    parser.add_argument("--arch", type=known_arch, help="target arch for --dry-run without a GPU, e.g. 80 or 90a")
    stops = parser.add_mutually_exclusive_group()
    stops.add_argument("--dry-run", action="store_true", help="list what would be built and measured, no GPU")
    parser.add_argument("--list", action="store_true", help="with --dry-run: print every surviving variant name")
    stops.add_argument(
        "--build-only",
        action="store_true",
        help="build every survivor into the kernel cache and stop (no GPU needed with --arch): compile on a "
        "machine without a GPU, carry the cache, and sweep on the GPU with the same --group-size",
    )
    parser.add_argument("--out", type=Path, help="results folder (default sweeps/results/<gpu>/)")
    parser.add_argument("--jobs", type=positive_int, default=None, help="parallel compiles (default: all cores)")
    parser.add_argument(
        "--group-size", type=positive_int, help="variants per translation unit (default: one unit per core, at most 32)"
    )
    parser.add_argument(
        "--screen-repeats", type=positive_int, default=3, help="timed calls per row in the screening pass"
    )
    parser.add_argument(
        "--finalists", type=non_negative_int, default=5, help="per mode and shape, how many get --repeats calls"
    )
    parser.add_argument(
        "--repeats", type=positive_int, default=15, help="timed calls per peer and finalist row (median)"
    )
    parser.add_argument(
        "--power-top",
        type=non_negative_int,
        default=1,
        help="per mode and shape, how many of the fastest get power (0: none)",
    )
    parser.add_argument(
        "--power-seconds",
        type=power_seconds,
        default=MIN_SECONDS,
        help=f"power sampling window (at least {MIN_SECONDS:g} s)",
    )
    parser.add_argument(
        "--tuned-out",
        type=Path,
        help="tuned table to merge the winners into (default: with --out DIR, DIR/tuned_<gpu>.csv; else "
        "cutlass_ext/tuned/<gpu>.csv); rows of other shapes and families are kept",
    )
    parser.add_argument("--limit", type=positive_int, help="measure only the first N survivors per mode (smoke runs)")
    parser.add_argument(
        "--mode",
        action="append",
        help="sweep only this mode of the space's (repeatable), e.g. to re-measure one after its kernel changed",
    )
    parser.add_argument("--no-report", action="store_true", help="skip the ranked table and plots at the end")
    parser.add_argument(
        "--gpus", type=positive_int, default=1, help="measure on N GPUs, one process each (multi_gpu.py)"
    )
    parser.add_argument("--part", type=part_spec, help=argparse.SUPPRESS)  # I/N: the part a --gpus process measures
    args = parser.parse_args(argv)
    if args.list and not args.dry_run:
        parser.error("--list lists what --dry-run would build: pass --dry-run too")
    return args


def main(argv=None) -> int:
    args = _parse_args(argv)
    if args.gpus > 1 and len(args.space) > 1:
        print("error: --gpus sweeps one space at a time", file=sys.stderr)
        return 2
    statuses = []
    for space in args.space:
        one = argparse.Namespace(**{**vars(args), "space": space})
        statuses.append(_sweep_space(one, argv))
    ran = [status for status in statuses if status is not None]
    if not ran:
        print("error: no space given builds for this GPU", file=sys.stderr)
        return 2
    return max(ran)


def _sweep_space(args, argv) -> int | None:
    """One space's run (args.space a single file); None where its family does not build for this GPU."""
    try:
        configs = load_space(args.space)
        args.shapes = args.shapes or str(default_shapes(args.space) or DEFAULT_SHAPES)
        shapes = load_shapes(args.shapes)
    except SpaceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    limits = _limits(args.arch if args.dry_run or args.build_only else None)
    if args.arch and limits.arch != args.arch and not (args.dry_run or args.build_only):
        print(
            f"error: --arch {args.arch}: this GPU is sm_{limits.arch}; a sweep measures the GPU it runs on",
            file=sys.stderr,
        )
        return 2
    family = families.get(configs[0].family)
    if not family.builds_for(limits.arch):
        only = ", ".join(f"sm_{arch}" for arch in family.archs)
        # stderr: --dry-run --list prints variant names on stdout
        print(
            f"{args.space}: the {family.name} family builds for {only} only; skipped on sm_{limits.arch}",
            file=sys.stderr,
        )
        return None
    rules = family.plugin("filters").RULES
    result = apply_rules(configs, limits, rules)

    print(
        f"{args.space}: {len(configs)} configs for sm_{limits.arch} "
        f"(opt-in shared memory {limits.shared_memory_bytes} B)"
    )
    for rule in rules:
        print(f"  {rule.name:34s} removed {result.counts[rule.name]:5d}   {rule.why}")
    survivors = result.survivors
    if args.mode:
        unknown = sorted(set(args.mode) - {c.mode for c in configs})
        if unknown:
            print(f"error: --mode {unknown[0]!r} is not a mode of {args.space}", file=sys.stderr)
            return 2
        survivors = [c for c in survivors if c.mode in args.mode]
    per_mode = Counter(c.mode for c in survivors)
    print(f"  survivors: {len(survivors)} ({', '.join(f'{m} {n}' for m, n in sorted(per_mode.items()))})")
    if not survivors:
        print(f"error: {args.space}: the filters removed every variant: nothing to build or measure", file=sys.stderr)
        return 2
    if args.limit:
        survivors = _first_per_mode(survivors, args.limit)
        print(f"  --limit {args.limit}: measuring {len(survivors)} of them")
    print(f"{args.shapes}: {len(shapes)} shapes -> {len(survivors) * len(shapes)} (variant, shape) rows")
    if not (args.dry_run or args.build_only):  # refused before anything is built (the parts write elsewhere)
        try:
            check_outputs(args.out, args.tuned_out)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.gpus > 1 and not (args.dry_run or args.build_only):
        return multi_gpu.run(sys.argv[1:] if argv is None else list(argv), args, survivors)
    survivors = multi_gpu.part(survivors, args)
    if args.dry_run:
        if args.list:
            for config in survivors:
                print(config.name)
        return 0
    if args.build_only:
        return _build_only(survivors, limits.arch, args)

    from .sweep import Sweep

    try:
        sweep = Sweep(args, limits)
    except ValueError as error:  # --out or --tuned-out that a sweep must not write into
        print(f"error: {error}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    build_seconds = sweep.build(survivors, shapes)
    measure_seconds = sweep.measure(shapes)
    tuned = sweep.write_tuned()
    total = time.perf_counter() - started
    print(
        f"build {build_seconds:.0f} s, measure {measure_seconds:.0f} s, total {total / 60:.1f} min "
        f"(goal: 15 min cold, 2 min warm); table {sweep.table.path}; tuned table {tuned}"
    )
    if args.no_report:
        sweep.print_summary()
    else:  # the report prints the same summary, after the ranked table
        from . import report

        report.main([str(sweep.table.path), "--top", "3"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
