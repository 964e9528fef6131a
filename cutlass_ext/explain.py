"""python -m cutlass_ext.explain --gpu "NVIDIA H200" --op gemm|gemm_fp8|lowbit [--mode MODE] --shape MxNxK

gemm's modes: the corrected and plain Tensor Core modes, `fp32` (cuBLAS SGEMM) and `int8x<moduli>` (Ozaki II).
gemm_fp8's modes: `fast` and `promoted` (per-tensor or per-row scales), `block` (DeepSeek-V3's 1x128 / 128x128
block scales), `grouped` (`grouped_gemm_fp8` with those scales; M is the tokens per expert), `k_grouped`
(`k_grouped_gemm_fp8`, the weight gradients: MxNxTOKENSxEXPERTS, K the tokens per expert; FP32 output).
lowbit: `lowbit.matmul`'s kernel (one variant serves every format, chunk and STE; no --mode).

Prints the kernel variant dispatch would run for one product on a GPU, and where the choice came from (a tuned
table and its entry, an architecture fallback table, or the architecture's built-in default). Needs no GPU: the
GPU is named (its architecture is read from the name, or given with --arch).
"""

from __future__ import annotations

import argparse
import re
import sys

from . import device, ozaki
from .families.sm90_fp8.config import ACCUMULATIONS
from .gemm import KERNEL_MODES

_SHAPE = re.compile(r"(\d+)x(\d+)x(\d+)(?:x(\d+))?")
BLOCK_MODE = "block"  # gemm_fp8 with 1x128 activation and 128x128 weight scales
GROUPED_MODE = "grouped"  # grouped_gemm_fp8 (block scales as above), M: tokens per expert
K_GROUPED_MODE = "k_grouped"  # k_grouped_gemm_fp8 (1x128 scales on both), K: tokens per expert, FP32 out
_WITH_EXPERTS = (GROUPED_MODE, K_GROUPED_MODE)
FP32_MODE = "fp32"  # gemm through cuBLAS SGEMM
LOWBIT_OP = "lowbit"  # lowbit.matmul: one mode, the variant serves every format


def explain(gpu: str, op: str, mode: str, shape: tuple, arch: str | None = None) -> list[str]:
    """The lines `main` prints: GPU and architecture, variants in order of preference, and their source. shape:
    (m, n, k), or (m, n, k, experts) for the grouped modes (m, or for k_grouped k, tokens per expert)."""
    info = device.named(gpu, arch)
    m, n, k = shape[:3]
    groups = shape[3] if len(shape) > 3 else None
    problem = " ".join(part for part in (op, mode, "x".join(map(str, shape))) if part)
    lines = [f"gpu: {info.name} (sm{info.arch or '?'})", f"problem: {problem}"]
    if op == LOWBIT_OP:
        from .lowbit.kernel import plan as lowbit_plan

        config, source = lowbit_plan(info, m, n, k)
        return lines + ["path: lowbit (SIMT)", f"runs: {config.name}", f"source: {source}"]
    if op == "gemm" and mode == FP32_MODE:
        return lines + [
            "path: cuBLAS",
            "runs: cublasGemmStridedBatchedEx_64, CUBLAS_COMPUTE_32F_PEDANTIC (IEEE SGEMM on the FP32 units)",
            "source: the fp32 mode (nothing to build or tune)",
        ]
    if op == "gemm" and ozaki.is_mode(mode):
        if not info.hopper:
            return lines + [f"{mode} runs on sm_90a GPUs only; {info.name} is sm{info.arch or '?'}"]
        config = ozaki.OzakiConfig(moduli=ozaki.mode_moduli(mode))
        return lines + ["path: ozaki", f"runs: {config.name}", "source: the Ozaki family's default (no tuned table)"]
    if op == "gemm":
        from .gemm import plan

        chosen = plan(info, mode, m, n, k)
        lines += [f"path: {chosen.path}", f"runs: {chosen.variants[0]}", f"source: {chosen.source}"]
        lines += [f"fallback: {name}" for name in chosen.variants[1:]]
    else:
        if not info.hopper:
            return lines + [f"gemm_fp8 runs on Hopper (sm90) GPUs only; {info.name} is sm{info.arch or '?'}"]
        if mode in (BLOCK_MODE, *_WITH_EXPERTS):
            from .fp8_block.api import dense_plan, grouped_plan, k_grouped_plan

            if mode == BLOCK_MODE:
                name, source = dense_plan(info, "e4m3", "e4m3", "bf16", 128, m, n, k)
            elif mode == GROUPED_MODE:
                name, source = grouped_plan(info, "e4m3", "e4m3", "bf16", 128, m, n, k, groups)
            else:
                name, source = k_grouped_plan(info, "e4m3", "e4m3", "fp32", m, n, k, groups or 1)
            return lines + [f"runs: {name}", f"source: {source}"]
        from .fp8 import plan

        names, source = plan(info, "e4m3", "e4m3", "bf16", mode, m, n, k)
        lines += [f"runs: {names[0]}", f"source: {source}"] + [f"fallback: {name}" for name in names[1:]]
    return lines


def _parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m cutlass_ext.explain", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpu", required=True, help="the GPU's name as the driver reports it, e.g. 'NVIDIA H200'")
    parser.add_argument("--arch", help="its architecture if the name does not tell (80, 86, 89, 90a)")
    parser.add_argument("--op", choices=["gemm", "gemm_fp8", LOWBIT_OP], default="gemm")
    parser.add_argument(
        "--mode",
        help="required for gemm and gemm_fp8 (lowbit has none); gemm: one of "
        f"{', '.join(KERNEL_MODES)}, {FP32_MODE} or int8x<moduli>; gemm_fp8: {', '.join(ACCUMULATIONS)}, "
        f"{BLOCK_MODE}, {GROUPED_MODE} (grouped_gemm_fp8, M tokens per expert; e4m3 inputs, bf16 output) or "
        f"{K_GROUPED_MODE} (k_grouped_gemm_fp8, K tokens per expert; FP32 output)",
    )
    parser.add_argument("--shape", required=True, help="MxNxK, e.g. 8192x8192x8192 (grouped, k_grouped: MxNxKxEXPERTS)")
    args = parser.parse_args(argv)
    modes = (
        (*KERNEL_MODES, FP32_MODE, "int8x<moduli>")
        if args.op == "gemm"
        else (*ACCUMULATIONS, BLOCK_MODE, *_WITH_EXPERTS)
    )
    if args.op == LOWBIT_OP:
        if args.mode not in (None, LOWBIT_OP):
            parser.error(f"--mode {args.mode!r}: --op lowbit takes no mode (one variant serves every format)")
        args.mode = None
    elif args.mode is None:
        parser.error(f"--mode is required for --op {args.op}")
    elif args.op == "gemm" and ozaki.is_mode(args.mode):
        try:
            ozaki.mode_moduli(args.mode)
        except ValueError as error:
            parser.error(f"--mode {args.mode!r}: {error}")
    elif args.mode not in modes:
        parser.error(f"--mode {args.mode!r} is not one of {list(modes)} for --op {args.op}")
    match = _SHAPE.fullmatch(args.shape)
    if match is None or (match.group(4) is not None and args.mode not in _WITH_EXPERTS):
        parser.error(
            f"--shape {args.shape!r} must look like 8192x8192x8192 (and 128x4096x7168x8 for --mode grouped or "
            "k_grouped)"
        )
    if args.arch and args.arch not in device.SHARED_MEMORY_BYTES:
        parser.error(f"--arch {args.arch!r} is not one of {sorted(device.SHARED_MEMORY_BYTES)}")
    return args, tuple(int(v) for v in match.groups() if v is not None)


def main(argv=None) -> int:
    args, shape = _parse_args(argv)
    print("\n".join(explain(args.gpu, args.op, args.mode, shape, args.arch)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
