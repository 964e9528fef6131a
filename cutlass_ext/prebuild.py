"""python -m cutlass_ext.build --prebuild [--arch 90a] [--modes ...] [--names ...]: build what dispatch runs, ahead.

Builds the kernel libraries `gemm` and `gemm_fp8` may run (their defaults and the shipped tuned tables' winners)
or the variants named, for each arch their family builds for, and the torch binding. The command sits above the
public API (it asks it what dispatch runs); the compiler it drives is cutlass_ext/build.py.
"""

from __future__ import annotations

import argparse
import sys

from . import families, fp8, fp8_block, ozaki
from .build import build_libraries, load_binding
from .cli_types import positive_int, target_arch
from .gemm import KERNEL_MODES, dispatch_configs
from .lowbit.kernel import dispatch_configs as lowbit_dispatch_configs
from .toolchain import device_arch

PREBUILD_MODES = (*KERNEL_MODES, "fp8_fast", "fp8_promoted", "fp8_block", "lowbit")


def _mode(text: str) -> str:
    if text in PREBUILD_MODES:
        return text
    if ozaki.is_mode(text):
        try:
            ozaki.mode_moduli(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not one of {list(PREBUILD_MODES)} or int8x<moduli>")


def _parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m cutlass_ext.build", description=__doc__)
    parser.add_argument("--prebuild", action="store_true", help="build the default kernels (and the binding) now")
    parser.add_argument(
        "--arch", action="append", type=target_arch, help="target arch, e.g. 80 or 90a (repeatable); default: the GPU's"
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        default=list(KERNEL_MODES),
        type=_mode,
        metavar="{" + ",".join(PREBUILD_MODES) + ",int8x<N>}",
        help="modes whose defaults and tuned winners to build (FP8: e4m3 inputs, bf16 output; fp8_block: "
        "DeepSeek-V3's block scales, dense kernels; lowbit: the low-bit-accumulator GEMM; int8x<N>: Ozaki scheme "
        "II with N moduli, 3..14)",
    )
    parser.add_argument(
        "--names",
        nargs="+",
        metavar="NAME",
        help="build these variants instead of the modes' (e.g. the tuned table's names, to carry the cache to a GPU)",
    )
    parser.add_argument("--no-binding", action="store_true", help="build only the torch-free kernel libraries")
    parser.add_argument("--jobs", type=positive_int, default=None, help="parallel compiles (default: all cores)")
    return parser.parse_args(argv)


def prebuild_configs(modes: list[str]) -> list:
    """What `--prebuild` builds for these modes, each variant once: `gemm`'s dispatch variants (the tuned tables'
    FP8 winners among them), `gemm_fp8`'s defaults, the block-scaled and the low-bit GEMM's variants, and the
    Ozaki modes' default kernels."""
    accums = [mode.removeprefix("fp8_") for mode in modes if mode in ("fp8_fast", "fp8_promoted")]
    block = fp8_block.dispatch_configs() if "fp8_block" in modes else []
    low_bit = lowbit_dispatch_configs() if "lowbit" in modes else []
    fp8_configs = fp8.dispatch_configs(accums) if accums else []
    int8 = [ozaki.OzakiConfig(moduli=ozaki.mode_moduli(mode)) for mode in modes if ozaki.is_mode(mode)]
    return list(dict.fromkeys(dispatch_configs(modes) + fp8_configs + block + low_bit + int8))


def main(argv=None) -> int:
    args = _parse_args(argv)
    if not args.prebuild:
        print("error: nothing to do: pass --prebuild", file=sys.stderr)
        return 2
    archs = list(dict.fromkeys(args.arch or ()))
    if not archs:
        import torch

        if not torch.cuda.is_available():
            print("error: no CUDA device: name the target with --arch (e.g. --arch 90a)", file=sys.stderr)
            return 2
        archs = [device_arch()]
    if args.names:
        try:
            configs = list(dict.fromkeys(families.from_name(name) for name in args.names))
        except ValueError as error:
            print(f"error: --names: {error}", file=sys.stderr)
            return 2
        for config in configs:  # built for the archs its family builds for; one built for none is a mistake
            family = families.of(config)
            if not any(family.builds_for(arch) for arch in archs):
                only = ", ".join(f"sm_{arch}" for arch in family.archs)
                asked = ", ".join(f"sm_{arch}" for arch in archs)
                print(
                    f"error: --names {config.name}: the {family.name} family builds for {only} only, not {asked}",
                    file=sys.stderr,
                )
                return 2
    else:
        configs = prebuild_configs(args.modes)
        if not any(families.of(c).builds_for(arch) for c in configs for arch in archs):
            asked = ", ".join(f"sm_{arch}" for arch in archs)
            print(f"error: --modes {' '.join(args.modes)}: no variant of these builds for {asked}", file=sys.stderr)
            return 2
    failed = 0
    for arch in archs:
        arch_configs = [c for c in configs if families.of(c).builds_for(arch)]
        skipped = [c for c in configs if c not in arch_configs]
        if args.names and skipped:  # named variants another --arch builds
            print(f"sm_{arch}: skipped {', '.join(c.name for c in skipped)} (not built for sm_{arch})", file=sys.stderr)
        elif not arch_configs:
            print(f"sm_{arch}: no variant of --modes {' '.join(args.modes)} builds for it; skipped", file=sys.stderr)
        for result in build_libraries([(c,) for c in arch_configs], arch, jobs=args.jobs):
            state = "cached" if result.cached else ("built" if result.library else "FAILED")
            print(f"sm_{arch}  {result.configs[0].name:48s} {state}  {result.library or ''}")
            if result.error:
                failed += 1
                print(result.error, file=sys.stderr)
    if not args.no_binding:
        load_binding()
        print("binding ready")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
