"""python -m sweeps.run SPACE.yaml [--shapes SHAPES.yaml] [--arch 90a] --dry-run

Enumerates the space, applies the named filter rules, and prints how many each rule removed and what survives.
Building, the accuracy gate, benchmarking and the CSV tables are the sweep's GPU stages (not in this version:
`--dry-run` is required).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from . import filters
from .space import SpaceError, load_shapes, load_space


def _limits(arch: str | None) -> filters.DeviceLimits:
    if arch:
        return filters.DeviceLimits.for_arch(arch)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: name the target with --arch (e.g. --arch 90a)")
    return filters.DeviceLimits.from_device()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sweeps.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("space", help="a sweep space YAML file (configs/*.yaml)")
    parser.add_argument("--shapes", help="a shape set YAML file (configs/shapes_*.yaml)")
    parser.add_argument("--arch", help="target arch when no GPU is present, e.g. 80 or 90a")
    parser.add_argument("--dry-run", action="store_true", help="list what would be built and measured")
    parser.add_argument("--list", action="store_true", help="with --dry-run: print every surviving variant name")
    args = parser.parse_args(argv)
    if not args.dry_run:
        parser.error("this version plans sweeps only: pass --dry-run (building and measuring are the GPU stages)")

    try:
        configs = load_space(args.space)
        shapes = load_shapes(args.shapes) if args.shapes else []
    except SpaceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    limits = _limits(args.arch)
    result = filters.apply_rules(configs, limits)

    print(
        f"{args.space}: {len(configs)} configs for sm_{limits.arch} "
        f"(opt-in shared memory {limits.shared_memory_bytes} B)"
    )
    for rule in filters.RULES:
        print(f"  {rule.name:34s} removed {result.counts[rule.name]:5d}   {rule.why}")
    per_mode = Counter(c.mode for c in result.survivors)
    print(f"  survivors: {len(result.survivors)} ({', '.join(f'{m} {n}' for m, n in sorted(per_mode.items()))})")
    if shapes:
        print(f"{args.shapes}: {len(shapes)} shapes -> {len(result.survivors) * len(shapes)} (variant, shape) rows")
    if args.list:
        for config in result.survivors:
            print(config.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
