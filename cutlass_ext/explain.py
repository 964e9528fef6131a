"""python -m cutlass_ext.explain --gpu "NVIDIA H200" --op gemm|gemm_fp8|lowbit [--mode MODE] --shape MxNxK

gemm's modes: the corrected and plain Tensor Core modes, `fp32` (cuBLAS SGEMM) and `int8x<moduli>` (Ozaki II).
gemm_fp8's modes: `fast` and `promoted` (per-tensor or per-row scales), `block` (DeepSeek-V3's 1x128 / 128x128
block scales), `grouped` (`grouped_gemm_fp8` with those scales; M is the tokens per expert), `k_grouped`
(`k_grouped_gemm_fp8`, the weight gradients: MxNxTOKENSxEXPERTS, K the tokens per expert; FP32 output).
lowbit: `lowbit.matmul`'s kernel (one variant serves every format, chunk and STE; no --mode).

Prints the kernel variant dispatch would run for one product on a GPU, and where the choice came from (a tuned
table and its entry, an architecture fallback table, or the architecture's built-in default). Needs no GPU: the
GPU is named (its architecture is read from the name, or given with --arch, which wins over the name's). Shapes
the call would refuse are refused with its message (gemm_fp8: K a multiple of 16, N of 8; int8x<moduli>: K at
most 2**17 - 1); an empty product (a dimension 0) runs no kernel where the call says so.
"""

from __future__ import annotations

import argparse
import re
import sys

from . import device, ozaki
from .cli_types import known_arch
from .families.sm90_fp8.config import ACCUMULATIONS
from .gemm import KERNEL_MODES

_SHAPE = re.compile(r"(\d+)x(\d+)x(\d+)(?:x(\d+))?")
BLOCK_MODE = "block"  # gemm_fp8 with 1x128 activation and 128x128 weight scales
GROUPED_MODE = "grouped"  # grouped_gemm_fp8 (block scales as above), M: tokens per expert
K_GROUPED_MODE = "k_grouped"  # k_grouped_gemm_fp8 (1x128 scales on both), K: tokens per expert, FP32 out
_WITH_EXPERTS = (GROUPED_MODE, K_GROUPED_MODE)
FP32_MODE = "fp32"  # gemm through cuBLAS SGEMM
LOWBIT_OP = "lowbit"  # lowbit.matmul: one mode, the variant serves every format


_NO_KERNEL = "runs: none (an empty product: no kernel runs)"


def _runs_no_kernel(op: str, mode: str | None, m: int, n: int, k: int, groups: int | None = None) -> bool:
    """Whether the call returns without launching a kernel: gemm's empty products in every mode (its
    dispatched_variant's `none`; the Ozaki modes before their sm_90a check), gemm_fp8's (K = 0 fills zeros or the
    bias), grouped products of no experts, rows or columns, and lowbit's empty outputs."""
    if op == "gemm":
        return 0 in (m, n, k)
    if op == LOWBIT_OP:
        return 0 in (m, n)
    if mode in _WITH_EXPERTS:
        return groups == 0 or 0 in (m, n) or (mode == GROUPED_MODE and k == 0)
    return 0 in (m, n, k)


def explain(gpu: str, op: str, mode: str, shape: tuple, arch: str | None = None) -> list[str]:
    """The lines `main` prints: GPU and architecture, variants in order of preference, and their source. shape:
    (m, n, k), or (m, n, k, experts) for the grouped modes (m, or for k_grouped k, tokens per expert)."""
    if arch is not None and arch.isdigit() and int(arch) >= 90:
        arch += "a"  # as device.info names a Hopper GPU's arch: its kernels are built for sm_90a
    info = device.named(gpu, arch)
    m, n, k = shape[:3]
    groups = shape[3] if len(shape) > 3 else None
    problem = " ".join(part for part in (op, mode, "x".join(map(str, shape))) if part)
    lines = [f"gpu: {info.name} (sm{info.arch or '?'})", f"problem: {problem}"]
    if op != "gemm_fp8" and _runs_no_kernel(op, mode, m, n, k, groups):
        return lines + [_NO_KERNEL]
    if op == LOWBIT_OP:
        from .lowbit.kernel import plan as lowbit_plan

        config, source = lowbit_plan(info, m, n, k)
        return lines + ["path: lowbit (SIMT)", f"runs: {config.name}", f"source: {source}"]
    if op == "gemm" and mode == FP32_MODE:
        return lines + [
            "path: cuBLAS",
            "runs: torch.matmul's SGEMM (IEEE FP32) while torch's TF32 setting is off; with an epilogue, TF32 on, "
            "autocast, deterministic mode, compile or graph capture: cublasGemmStridedBatchedEx_64, "
            "CUBLAS_COMPUTE_32F_PEDANTIC (IEEE SGEMM on the FP32 units)",
            "source: the fp32 mode (nothing to build or tune)",
        ]
    if op == "gemm" and ozaki.is_mode(mode):
        if not info.hopper:
            return lines + [f"{mode} runs on sm_90a GPUs only; {info.name} is sm{info.arch or '?'}"]
        config = ozaki.OzakiConfig(moduli=ozaki.mode_moduli(mode))
        return lines + ["path: ozaki", f"runs: {config.name}", "source: the Ozaki family's default (no tuned table)"]
    if op == "gemm":
        from . import corrected_sm90
        from .gemm import plan

        # as an eager call of 2-D operands decides it: the sm90 kernels take N a multiple of 4 only
        chosen = plan(info, mode, m, n, k, hopper_ok=corrected_sm90.supports_shapes(2, 2, n))
        lines += [f"path: {chosen.path}", f"runs: {chosen.variants[0]}", f"source: {chosen.source}"]
        lines += [f"fallback: {name}" for name in chosen.variants[1:]]
    else:
        if not info.hopper:
            return lines + [f"gemm_fp8 runs on Hopper (sm90) GPUs only; {info.name} is sm{info.arch or '?'}"]
        if _runs_no_kernel(op, mode, m, n, k, groups):
            return lines + [_NO_KERNEL]
        if mode == BLOCK_MODE and not _block_scaled(m, n, k):
            lines.append("note: with one k-block and N <= 128 these block scales are row scales: the row-scaled kernel")
            mode = "promoted"
        if mode in (BLOCK_MODE, *_WITH_EXPERTS):
            from .fp8_block.api import dense_plan, grouped_plan, k_grouped_plan

            if mode == BLOCK_MODE:
                name, source = dense_plan(info, "e4m3", "e4m3", "bf16", 128, m, n, k)
            elif mode == GROUPED_MODE:
                name, source = grouped_plan(info, "e4m3", "e4m3", "bf16", 128, m, n, k, groups)
            else:
                name, source = k_grouped_plan(info, "e4m3", "e4m3", "fp32", m, n, k, groups)
            return lines + [f"runs: {name}", f"source: {source}"]
        from .fp8 import plan

        names, source = plan(info, "e4m3", "e4m3", "bf16", mode, m, n, k)
        lines += [f"runs: {names[0]}", f"source: {source}"] + [f"fallback: {name}" for name in names[1:]]
    return lines


def _block_scaled(m: int, n: int, k: int) -> bool:
    """Whether gemm_fp8 runs the block-scaled kernel for quantize_fp8's 1x128 / 128x128 block scales."""
    import torch

    from .fp8_block.api import is_block_scaled, k_blocks

    scale_a = torch.empty(m, k_blocks(k), device="meta")
    scale_b = torch.empty(-(-n // 128), k_blocks(k), device="meta")
    return is_block_scaled(m, n, k, scale_a, scale_b)


def check_shape(op: str, mode: str | None, shape: tuple) -> None:
    """The ValueError the call raises for operands of this shape, if it refuses them (as explain's problem: e4m3
    inputs, bf16 output; k_grouped FP32 output and K tokens per expert)."""
    m, n, k = shape[:3]
    if op == "gemm_fp8" and mode in _WITH_EXPERTS and len(shape) < 4:
        raise ValueError(f"--mode {mode} takes MxNxKxEXPERTS: the expert count picks the kernel")
    if op == "gemm" and ozaki.is_mode(mode) and k > ozaki.MAX_K:
        raise ValueError(f"K={k} exceeds {ozaki.MAX_K}: INT32 products of INT8 residues would overflow")
    if op == "gemm_fp8":
        import torch

        from .fp8_block.api import _check_shapes

        if mode == K_GROUPED_MODE:  # the experts' tokens side by side along K
            experts = shape[3]
            try:
                _check_shapes("a", k * experts, "b", k * experts, n, torch.float32)
            except ValueError as error:
                raise ValueError(f"{error}; K is {k} tokens x {experts} experts") from None
        else:
            _check_shapes("a", k, "b", k, n, torch.bfloat16)


def _parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m cutlass_ext.explain", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpu", required=True, help="the GPU's name as the driver reports it, e.g. 'NVIDIA H200'")
    parser.add_argument(
        "--arch",
        type=known_arch,
        help="its architecture (80, 86, 87, 89, 90 or 90a): give it where the name does not tell (else the answer is "
        "for a GPU of unknown architecture, with a note saying so); given, it is used over the name's",
    )
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
    if args.arch is None and device.arch_of_name(args.gpu) is None:  # answered as a GPU of no known arch
        print(
            f"note: --gpu {args.gpu!r}: the name does not tell its architecture; answering for an unknown one (the "
            f"sm80 kernels, no Hopper path): give --arch, one of {sorted(device.SHARED_MEMORY_BYTES)}",
            file=sys.stderr,
        )
    shape = tuple(int(v) for v in match.groups() if v is not None)
    try:
        check_shape(args.op, args.mode, shape)
    except ValueError as error:
        parser.error(f"--shape {args.shape}: {error}")
    return args, shape


def main(argv=None) -> int:
    args, shape = _parse_args(argv)
    try:
        lines = explain(args.gpu, args.op, args.mode, shape, args.arch)
    except (ValueError, FileNotFoundError) as error:  # a tuned table dispatch would refuse: its own message
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
