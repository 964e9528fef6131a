"""compute-sanitizer over every kernel variant cutlass_ext can dispatch to, at shapes that cut every tile edge.

    python python/sanitize_kernels.py [--out DIR] [--tools memcheck,racecheck,synccheck,initcheck] [--jobs N]
    python python/sanitize_kernels.py --list          # what it would run (no GPU needed)

The variants: `gemm`'s defaults and the shipped tuned tables' winners (`gemm.dispatch_configs`), `gemm_fp8`'s
defaults and decode defaults (`fp8.dispatch_configs`), every other variant a shipped table names, the Hopper
variants' bias-epilogue twins, the block-scaled FP8 GEMM's dense defaults, the Ozaki-II default (int8x8), the
low-bit GEMM's default tiling (forward and every STE's gradient kernel) and the fused optimizer step of every
(optimizer, update, arithmetic) at the default launch shape. Each (tool, group of variants) runs in its own small
process under compute-sanitizer, several at once; each variant runs at odd shapes (partial tiles in m, n and k, a
batch) on operands that fill their allocations exactly, with the caching allocator off so that memcheck sees every
allocation's end. First each tool must find the error planted in a small kernel of its own (DIR/self_check.csv);
then the variants are built where the cache lacks them, and each group also runs once without a sanitizer (tool
`none`, beside the others). Writes DIR/summary.csv (variant, tool, shape, errors, warnings, status) and one log
per process; exits 1 on any error, any variant that did not run, a tool that missed its planted error, or a
missing compute-sanitizer.

    python python/sanitize_kernels.py --prebuild [--families ...] [--variants ...] [--shard K/N]   # build only
    python python/sanitize_kernels.py --cached-only ...   # no builds: what the cache lacks is rows 'not run'
    python python/sanitize_kernels.py --variants NAME --add NAME_be   # a tuned winner and a candidate twin
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import dataclasses
import importlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's cutlass_ext, installed or not

SANITIZER = "/usr/local/cuda/bin/compute-sanitizer"
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
_START_ORDER = ("initcheck", "racecheck", "synccheck", "memcheck", "none")  # slowest first (H100 logs)
GROUP_SIZE = 8  # variants per process: one process stays well under a minute under racecheck
MARKER = "cutlass_ext-sanitize:"
# ATen's own kernels (mangled `_ZN2at6native...`) are left unchecked, except by initcheck: it must see their
# writes to know the inputs they fill are initialised.
TORCH_KERNELS = "kns=2at6native"
# initcheck does not see writes made by TMA stores (cp.async.bulk.tensor): on the H100 an sm90 GEMM's output, read by
# an ATen kernel, is reported uninitialized at every element, an sm80 GEMM's (register stores) is not. A kernel whose
# input is another kernel's TMA-stored output is left to memcheck under initcheck: the Ozaki recombination reads the
# INT8 GEMM's residues (its results equal the reference bit for bit, so every residue was written).
INITCHECK_TMA_READERS = {"ozaki": "kns=recombine_kernel"}

# (m, n, k) or (batch, m, n, k) per family. 128-wide tiles: 129-133 leave a partial tile, k = 35-37 a partial k-tile;
# alignment-4 variants need n and k (and m for column-major A) multiples of 4.
SM80_SHAPES = {1: [(129, 67, 35), (3, 33, 131, 17)], 4: [(132, 68, 36), (2, 36, 132, 20)]}
SM90_SHAPES = [(133, 132, 37), (2, 65, 68, 19)]  # N a multiple of 4 (16-byte output rows)
FP8_SHAPES = [(7, 40, 272), (133, 264, 400)]  # K a multiple of 16, N of 8; the second with row scales and bias
LOWBIT_SHAPES = [(67, 45, 37), (2, 19, 70, 33)]
# 128x256x128 tiles: partial in m, n and k; K past one 1024-slice of the norm pass, its last chunk partial
OZAKI_SHAPES = [(67, 45, 37), (2, 133, 259, 130), (33, 70, 1067)]
OPTIM_SIZES = (1, 7, 1031, 4099, 40000)  # elements per tensor: partial vectors, chunks and a grid of several blocks


def _module(name: str):
    """A cutlass_ext module by path (`cutlass_ext.gemm` the module, not the function the package exports)."""
    return importlib.import_module(f"cutlass_ext.{name}")


def variant_names() -> list[str]:
    """Every variant the script checks, in a stable order, without duplicates."""
    names = [c.name for c in _module("gemm").dispatch_configs()]
    names += [c.name for c in _module("fp8").dispatch_configs()]
    names += [c.name for c in _module("tuned").shipped_configs()]
    # gemm runs each Hopper variant's bias-epilogue twin for a bias (gemm._with_bias_epilogue), built on first use
    names += [
        dataclasses.replace(config, epilogue="bias").name
        for config in map(config_of, list(names))
        if config.family == "sm90" and getattr(config, "epilogue", None) == "plain"
    ]
    # block-scaled FP8 (`gemm_fp8` with 1x128 / 128x128 block scales): the dense default per weight-scale block
    block = _module("fp8_block.api")
    bounds = [bound or 1 << 30 for bound, _ in block.DENSE_BY_M]  # one M of each bucket
    names += [block.dense_variant("e4m3", "e4m3", "bf16", scale_n, m) for scale_n in (1, 128) for m in bounds]
    # its grouped forms: mixture-of-experts (`grouped_gemm_fp8`) and weight gradients (`k_grouped_gemm_fp8`)
    names += [block.grouped_variant("e4m3", "e4m3", "bf16", 128), block.k_grouped_variant("e4m3", "e4m3", "fp32")]
    names.append(_module("ozaki.config").default_config().name)  # gemm's int8x8 mode
    names.append(_module("lowbit.kernel").DEFAULT_CONFIG.name)
    optim = _module("optim.config")
    names += [
        optim.OptimConfig(kind, update, arithmetic).name
        for kind in optim.KINDS
        for update in ("nearest", "stochastic", "kahan")
        for arithmetic in ("fp32", "bf16")
    ]
    return list(dict.fromkeys(names))


def config_of(name: str):
    OptimConfig = _module("optim.config").OptimConfig
    return OptimConfig.from_name(name) if OptimConfig.is_name(name) else _module("variants").from_name(name)


# config.family -> how the worker calls the variant
_CALLS = {
    "sm80": "sm80",
    "sm90": "sm90",
    "sm90_fp8": "fp8",
    "sm90_fp8_block": "fp8_block",
    "sm90_fp8_block_direct": "fp8_block",
    "ozaki": "ozaki",
    "lowbit": "lowbit",
    "optim": "optim",
}


def family_of(name: str) -> str:
    """`sm80`, `sm90` (corrected, split planes), `fp8`, `lowbit` or `optim`: how the worker calls the variant."""
    family = config_of(name).family
    if family not in _CALLS:
        raise ValueError(f"{name}: the sanitizer does not know how to call family {family!r}")
    return _CALLS[family]


def shapes_of(name: str) -> list[tuple]:
    family = family_of(name)
    if family == "sm80":
        return SM80_SHAPES[1 if config_of(name).alignment == 1 else 4]
    if family == "optim":
        return [OPTIM_SIZES]
    shapes = {"sm90": SM90_SHAPES, "fp8": FP8_SHAPES, "fp8_block": FP8_SHAPES, "ozaki": OZAKI_SHAPES}
    return shapes.get(family, LOWBIT_SHAPES)


def groups(names: list[str]) -> list[list[str]]:
    """Variants of one family in processes of at most GROUP_SIZE."""
    by_family: dict[str, list[str]] = {}
    for name in names:
        by_family.setdefault(family_of(name), []).append(name)
    return [members[i : i + GROUP_SIZE] for members in by_family.values() for i in range(0, len(members), GROUP_SIZE)]


def sanitizer_command(sanitizer: str | None, tool: str, group: list[str]) -> list[str]:
    worker = [sys.executable, str(Path(__file__).resolve()), "--worker", ",".join(group)]
    if tool == "none":
        return worker
    # no attach timeout of its own (10 s by default: a worker slow to import torch on a busy machine went unchecked);
    # the run's per-process timeout still ends a hung one
    command = [
        sanitizer,
        "--tool",
        tool,
        "--target-processes",
        "application-only",
        "--print-limit",
        "0",
        "--launch-timeout",
        "0",
    ]
    if tool != "initcheck":
        command += ["--kernel-name-exclude", TORCH_KERNELS]
    elif tma_readers := INITCHECK_TMA_READERS.get(family_of(group[0])):
        command += ["--kernel-name-exclude", tma_readers]
    return command + worker


# ---- the worker: runs each variant of its group at its shapes, a marker line before each run


def _operand(rows: int, columns: int, column_major: bool, batch: int | None, generator):
    import torch

    shape = (columns, rows) if column_major else (rows, columns)
    if batch is not None:
        shape = (batch, *shape)
    x = torch.randn(shape, device=generator.device, generator=generator)
    return x.mT if column_major else x


def _run_sm80(name: str, shape: tuple, generator) -> None:
    import torch

    from cutlass_ext import ops

    config = config_of(name)
    batch, (m, n, k) = (shape[0], shape[1:]) if len(shape) == 4 else (None, shape)
    a = _operand(m, k, config.layout_a == "col", batch, generator)
    b = _operand(k, n, config.layout_b == "col", batch, generator)
    run = ops.halfhalf_gemm if config.operands == "packed" else ops.gemm
    run(a, b, [name])
    # the epilogue's source operand C, read by the kernel: alpha·A·B + beta·C
    c = torch.randn((*a.shape[:-1], n), device=generator.device, generator=generator)
    run(a, b, [name], c=c, alpha=2.0, beta=0.5)


def _run_sm90(name: str, shape: tuple, generator) -> None:
    import torch

    from cutlass_ext import corrected_sm90

    config = config_of(name)
    batch, (m, n, k) = (shape[0], shape[1:]) if len(shape) == 4 else (None, shape)
    a = _operand(m, k, False, batch, generator)
    b = _operand(k, n, False, batch, generator)
    if getattr(config, "epilogue", "plain") == "bias":
        bias = torch.randn(n, device=generator.device, generator=generator)
        corrected_sm90.product(a, b, config.mode, [name], bias, 0.75)
    else:
        corrected_sm90.product(a, b, config.mode, [name])


def _run_fp8(name: str, shape: tuple, generator) -> None:
    import torch

    from cutlass_ext import ops

    config = config_of(name)
    m, n, k = shape
    dtypes = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    out_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[config.out_dtype]
    a = torch.randn(m, k, device=generator.device, generator=generator).to(dtypes[config.a_dtype])
    b = torch.randn(n, k, device=generator.device, generator=generator).to(dtypes[config.b_dtype])
    if m > 64:
        scale_a = torch.rand(m, 1, device=generator.device, generator=generator)
        scale_b = torch.rand(n, device=generator.device, generator=generator)
        bias = torch.randn(n, device=generator.device, generator=generator).to(out_dtype)
    else:
        scale_a = torch.full((1,), 0.5, device=generator.device)
        scale_b = torch.full((1,), 2.0, device=generator.device)
        bias = None
    ops.gemm_fp8(a, b, scale_a, scale_b, bias, out_dtype, [name])


def _run_fp8_block(name: str, shape: tuple, generator) -> None:
    import torch

    from cutlass_ext.fp8_block import api

    config = config_of(name)
    m, n, k = shape
    blocks = -(-k // 128)
    a = torch.randn(m, k, device=generator.device, generator=generator).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device=generator.device, generator=generator).to(torch.float8_e4m3fn)
    if config.k_grouped:  # groups along K: a full block, an empty group, a partial last block, one refused (NaN)
        ends = torch.tensor([128, 128, k, 256], dtype=torch.int32, device=generator.device)
        scale_a = torch.rand(m, blocks, device=generator.device, generator=generator) + 0.5
        scale_b = torch.rand(n, blocks, device=generator.device, generator=generator) + 0.5
        out = torch.randn(4, m, n, device=generator.device, generator=generator)
        api.k_grouped_gemm_fp8(a, b, scale_a, scale_b, ends, out=out, accumulate=True, variant=name)
        return
    if config.grouped:  # three experts over the rows: empty, then two uneven ones
        ends = torch.tensor([0, m // 2, m], dtype=torch.int32, device=generator.device)
        experts = torch.randn(3, n, k, device=generator.device, generator=generator).to(torch.float8_e4m3fn)
        scale_a = torch.rand(m, blocks, device=generator.device, generator=generator) + 0.5
        scale_b = torch.rand(3, -(-n // 128), blocks, device=generator.device, generator=generator) + 0.5
        api.grouped_gemm_fp8(a, experts, scale_a, scale_b, offsets=ends, variant=name)
        return
    scale_a = torch.rand(m, blocks, device=generator.device, generator=generator) + 0.5  # 1x128 blocks
    rows = n if config.scale_n == 1 else -(-n // 128)  # 1x128 or 128x128 blocks of the weights
    scale_b = torch.rand(rows, blocks, device=generator.device, generator=generator) + 0.5
    bias = torch.randn(n, device=generator.device, generator=generator).to(torch.bfloat16) if m > 64 else None
    api.gemm_fp8_block(a, b, scale_a, scale_b, torch.bfloat16, bias, variant=name)


def _run_ozaki(name: str, shape: tuple, generator) -> None:
    from cutlass_ext import ozaki

    config = config_of(name)
    batch, (m, n, k) = (shape[0], shape[1:]) if len(shape) == 4 else (None, shape)
    a = _operand(m, k, False, batch, generator)
    b = _operand(k, n, True, batch, generator)
    ozaki.gemm(a, b, config.moduli, config)


def _run_lowbit(name: str, shape: tuple, generator) -> None:
    import torch

    from cutlass_ext import lowbit
    from cutlass_ext.lowbit import kernel

    batch, (m, n, k) = (shape[0], shape[1:]) if len(shape) == 4 else (None, shape)
    for ste, chunk in (("identity", 16), ("recursive-of", 5), ("immediate-of", 32), ("immediate-diff", 7)):
        fmt = lowbit.LowbitFormat.make(7, 4, chunk=chunk)
        a = _operand(m, k, False, batch, generator).requires_grad_()
        b = _operand(k, n, True, None, generator).requires_grad_()  # column-major and broadcast over the batch
        out = kernel.matmul(a, b, fmt, ste, config=kernel.LowbitKernelConfig.from_name(name))
        out.backward(torch.randn(out.shape, device=generator.device, generator=generator))


def _run_optim(name: str, shape: tuple, generator) -> None:
    import torch

    from cutlass_ext import optim

    config = config_of(name)
    params = [torch.randn(size, device=generator.device, generator=generator).bfloat16() for size in shape]
    params = [torch.nn.Parameter(p) for p in params]
    options = {"update": config.update, "arithmetic": config.arithmetic, "seed": 7}
    if config.kind == "sgd":
        optimizer = optim.SGD(params, lr=0.01, momentum=0.9, nesterov=True, weight_decay=0.01, **options)
    else:
        optimizer = optim.AdamW(params, lr=0.01, **options)
    for _ in range(2):
        for p in params:
            p.grad = torch.randn(p.shape, device=generator.device, generator=generator).bfloat16()
        optimizer.step()


_RUNNERS = {
    "sm80": _run_sm80,
    "sm90": _run_sm90,
    "fp8": _run_fp8,
    "fp8_block": _run_fp8_block,
    "ozaki": _run_ozaki,
    "lowbit": _run_lowbit,
    "optim": _run_optim,
}


def build_all(names: list[str]) -> int:
    """Build every variant the cache lacks for this GPU, in parallel (first use would build them one at a time),
    and the torch binding (else every worker that starts at once would wait on its one build)."""
    from cutlass_ext import build, toolchain

    results = build.build_libraries([(config_of(name),) for name in names], toolchain.device_arch())
    failed = [result for result in results if result.library is None]
    for result in failed:
        print(f"building {result.configs[0].name} failed:\n{result.error}", file=sys.stderr)
    build.load_binding()
    return 1 if failed else 0


# Families whose variants the torch binding's ops run: an op finds only the variants loaded into the binding.
_BINDING_FAMILIES = ("sm80", "sm90", "fp8")


def uncached(names: list[str]) -> list[str]:
    """The variants whose library the kernel cache lacks for this GPU (what build_all would compile)."""
    from cutlass_ext import build, cache, toolchain

    arch = toolchain.device_arch()
    missing = []
    for name in names:
        configs = (config_of(name),)
        key = build.library_key(configs, arch)
        if cache.read_manifest(build.library_entry(configs, arch, key), key) is None:
            missing.append(name)
    return missing


def worker(names: list[str], device: str = "cuda") -> int:
    import torch

    from cutlass_ext import registry

    generator = torch.Generator(device=device).manual_seed(0)
    failures = 0
    for name in names:
        family = family_of(name)
        for shape in shapes_of(name):
            print(f"{MARKER} run {name} {'x'.join(map(str, shape))}", flush=True)
            try:
                if family in _BINDING_FAMILIES:
                    registry.ensure_names_registered([name], torch.device(device))
                _RUNNERS[family](name, shape, generator)
                torch.cuda.synchronize()
            except Exception as error:  # the next variants still run; the row says why this one did not
                failures += 1
                reason = " ".join(str(error).split())[:300]
                print(f"{MARKER} failed {type(error).__name__}: {reason}", flush=True)
                continue
            print(f"{MARKER} done", flush=True)
    return 1 if failures else 0


# ---- the driver


_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)")
# A report's first line: `========= ` and no indent (its detail lines are indented), not a summary or banner.
_REPORT = re.compile(
    r"^========= (?!ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY|COMPUTE-SANITIZER|Target application)\S"
)
_WARNING = re.compile(r"^========= Warning")


def parse_log(text: str, tool: str, group: list[str]) -> list[dict]:
    """One row per (variant, shape) of `group`: the reports printed while it ran, and whether it finished."""
    rows: dict[tuple[str, str], dict] = {}
    order = [(name, "x".join(map(str, shape))) for name in group for shape in shapes_of(name)]
    for key in order:
        rows[key] = {"variant": key[0], "tool": tool, "shape": key[1], "errors": 0, "warnings": 0, "status": "not run"}
    current = None
    for line in text.splitlines():
        if line.startswith(MARKER):
            words = line.split()
            if words[1] == "run":
                current = (words[2], words[3])
                rows[current]["status"] = "started"
            elif current is not None:
                rows[current]["status"] = "ok" if words[1] == "done" else " ".join(words[1:])
        elif _REPORT.match(line):
            row = rows.get(current) if current is not None else None
            if row is None:  # before the first run: the process itself
                row = rows.setdefault(
                    ("(process)", ""),
                    {"variant": "(process)", "tool": tool, "shape": "", "errors": 0, "warnings": 0, "status": "ok"},
                )
            row["warnings" if _WARNING.match(line) else "errors"] += 1
    summary = _ERROR_SUMMARY.search(text) or _RACE_SUMMARY.search(text)
    counted = sum(row["errors"] for row in rows.values())
    total = int(summary[1]) if summary else None
    if tool != "none" and (total is None or total > counted):  # the process died, or reports not recognised
        rows[("(unattributed)", "")] = {
            "variant": "(unattributed)",
            "tool": tool,
            "shape": "",
            "errors": (total or 0) - counted,
            "warnings": 0,
            "status": "ok" if total is not None else "no sanitizer summary",
        }
    return list(rows.values())


def run_one(sanitizer: str | None, tool: str, group: list[str], log: Path, timeout: float) -> list[dict]:
    """The group's worker under `tool` (no sanitizer for tool `none`), its log written, its rows read."""
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1", PYTHONUNBUFFERED="1")
    command = sanitizer_command(sanitizer, tool, group)
    start = time.perf_counter()
    # a new process group (setsid): a timeout ends compute-sanitizer and the process it runs, not only the former
    options = {"env": env, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    with subprocess.Popen(command, start_new_session=True, **options) as process:
        try:
            text, _ = process.communicate(timeout=timeout)
            note = f"exit {process.returncode}"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            text, _ = process.communicate()
            note = f"timed out after {timeout:.0f} s"
    seconds = time.perf_counter() - start
    log.write_text(f"$ {' '.join(command)}\n# {note}, {seconds:.1f} s\n{text}")
    rows = parse_log(text, tool, group)
    for row in rows:
        row["log"] = log.name
        if row["status"] != "ok":
            row["status"] += f" ({note})"
    return rows


# One kernel per tool with the error that tool exists to find: a run in which a tool reports none of them means the
# tool (or this script's reading of its output) sees nothing, and its "0 errors" elsewhere would mean nothing.
SELF_CHECK_SOURCE = r"""
#include <cuda_runtime.h>
__global__ void write_past_the_end(float* x) { x[threadIdx.x] = 1.0f; }  // 65 threads, 64 floats
__global__ void race_in_shared(float* out) {
  __shared__ float s[64];
  s[threadIdx.x] = float(threadIdx.x);
  out[threadIdx.x] = s[(threadIdx.x + 32) % 64];  // no __syncthreads: the other warp's write races this read
}
__global__ void invalid_warp_barrier(float* out) {
  __syncwarp(0x0000FFFFu);  // lanes 16-31 reach a warp barrier whose mask leaves them out
  out[threadIdx.x] = 0.0f;
}
__global__ void read_uninitialised(const float* x, float* out) { out[threadIdx.x] = x[threadIdx.x]; }
extern "C" int sanitize_self_check(int tool) {
  float *x = nullptr, *out = nullptr;
  cudaMalloc(&x, 64 * sizeof(float));
  cudaMalloc(&out, 64 * sizeof(float));
  cudaMemset(out, 0, 64 * sizeof(float));
  if (tool == 0) write_past_the_end<<<1, 65>>>(x);
  if (tool == 1) race_in_shared<<<1, 64>>>(out);
  if (tool == 2) invalid_warp_barrier<<<1, 32>>>(out);
  if (tool == 3) read_uninitialised<<<1, 64>>>(x, out);
  int status = int(cudaDeviceSynchronize());
  cudaFree(x);
  cudaFree(out);
  return status;
}
"""


def build_self_check(folder: Path) -> Path:
    """The self-check kernels as a library for this GPU (nvcc and flags of the build)."""
    from cutlass_ext import toolchain

    source, library = folder / "self_check.cu", folder / "self_check.so"
    source.write_text(SELF_CHECK_SOURCE)
    command = [toolchain.nvcc(), "-shared", "-Xcompiler=-fPIC", toolchain.gencode(toolchain.device_arch())]
    subprocess.run([*command, "-o", str(library), str(source)], check=True, capture_output=True, text=True)
    return library


def self_check_worker(library: str, tool: str) -> int:
    import ctypes

    return ctypes.CDLL(library).sanitize_self_check(TOOLS.index(tool))


def self_check(sanitizer: str, tools: list[str], folder: Path, timeout: float) -> list[dict]:
    """Per tool: the errors it found in the kernel made to have one (the row's status says whether it found any)."""
    library = build_self_check(folder)

    def check(tool):
        command = [sanitizer, "--tool", tool, "--print-limit", "0", sys.executable, str(Path(__file__).resolve())]
        command += ["--self-check-worker", f"{library},{tool}"]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=min(timeout, 60))
            text = result.stdout + result.stderr
        except subprocess.TimeoutExpired:
            text = "timed out"
        (folder / f"self_check_{tool}.log").write_text(f"$ {' '.join(command)}\n{text}")
        summary = _ERROR_SUMMARY.search(text) or _RACE_SUMMARY.search(text)
        found = int(summary[1]) if summary else 0
        status = "ok" if found else "missed: the tool reported no error in a kernel made to have one"
        return {"tool": tool, "errors": found, "status": status, "log": f"self_check_{tool}.log"}

    with concurrent.futures.ThreadPoolExecutor(len(tools)) as pool:  # one small process per tool, side by side
        return list(pool.map(check, tools))


def find_sanitizer() -> str:
    found = shutil.which("compute-sanitizer") or (SANITIZER if Path(SANITIZER).is_file() else None)
    if found is None:
        raise SystemExit(f"compute-sanitizer not found on PATH nor at {SANITIZER}: install the CUDA toolkit's")
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("OUT", "sanitize_logs")) / "sanitize",
        help="folder of summary.csv, self_check.csv and the logs (default: $OUT/sanitize)",
    )
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, of {', '.join(TOOLS)}")
    parser.add_argument("--jobs", type=int, default=12, help="sanitizer processes at once")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per process")
    parser.add_argument(
        "--deadline", type=float, help="seconds for the whole run: processes not started by then are rows 'not run'"
    )
    parser.add_argument("--variants", help="comma-separated names: only these (default: every one)")
    parser.add_argument("--families", help=f"comma-separated, of {', '.join(_CALLS.values())}: only these")
    parser.add_argument(
        "--add",
        help="comma-separated names of variants dispatch does not pick (yet), checked beside the chosen ones: "
        "candidates for a tuned table are sanitized before it names them",
    )
    parser.add_argument("--shard", help="K/N: only every N-th variant from the K-th (a run split over machines)")
    parser.add_argument("--prebuild", action="store_true", help="build the variants the cache lacks, and exit")
    parser.add_argument(
        "--cached-only",
        action="store_true",
        help="build nothing: the variants the kernel cache lacks for this GPU are rows 'not run'",
    )
    parser.add_argument("--list", action="store_true", help="print the (tool, group, variant, shape) runs and exit")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--self-check-worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker.split(","))
    if args.self_check_worker:
        return self_check_worker(*args.self_check_worker.split(","))

    tools = args.tools.split(",")
    unknown = [tool for tool in tools if tool not in TOOLS]
    if unknown:
        parser.error(f"--tools: {unknown} not among {list(TOOLS)}")
    names = variant_names()
    if args.variants:
        wanted = args.variants.split(",")
        missing = [name for name in wanted if name not in names]
        if missing:
            parser.error(f"--variants: {missing} are not variants cutlass_ext dispatches to")
        names = [name for name in names if name in wanted]
    if args.families:
        families = args.families.split(",")
        unknown = [family for family in families if family not in _CALLS.values()]
        if unknown:
            parser.error(f"--families: {unknown} not among {list(_CALLS.values())}")
        names = [name for name in names if family_of(name) in families]
    for name in args.add.split(",") if args.add else []:
        try:
            family_of(name)
        except ValueError as error:
            parser.error(f"--add: {error}")
        if name not in names:
            names.append(name)
    if args.shard:
        match = re.fullmatch(r"(\d+)/(\d+)", args.shard)
        if match is None or not 1 <= int(match[1]) <= int(match[2]):
            parser.error(f"--shard={args.shard!r} must be K/N with 1 <= K <= N")
        index, count = int(match[1]), int(match[2])
        names = names[index - 1 :: count]
    if args.prebuild:
        return build_all(names)
    runs = [(tool, index, group) for tool in tools for index, group in enumerate(groups(names))]
    if args.list:
        for tool, index, group in runs:
            for name in group:
                shapes = " ".join("x".join(map(str, shape)) for shape in shapes_of(name))
                print(f"{tool} group{index:02d} {family_of(name)} {name} {shapes}")
        print(f"{len(names)} variants, {len(runs)} sanitizer processes")
        return 0

    sanitizer = find_sanitizer()
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    checks = self_check(sanitizer, tools, args.out, args.timeout)
    with open(args.out / "self_check.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["tool", "errors", "status", "log"])
        writer.writeheader()
        writer.writerows(checks)
    missed = [check["tool"] for check in checks if check["status"] != "ok"]
    print(f"self-check: each tool finds its planted error: {'yes' if not missed else f'no, not {missed}'}")
    skipped = []
    if args.cached_only:
        from cutlass_ext import build

        skipped = uncached(names)
        print(f"{len(skipped)} of {len(names)} variants are not in the kernel cache: not run", flush=True)
        names = [name for name in names if name not in skipped]
        runs = [(tool, index, group) for tool in tools for index, group in enumerate(groups(names))]
        build.load_binding()
    else:
        print(f"building what the cache lacks of {len(names)} variants", flush=True)
        if build_all(names):
            return 1
    rows = [
        {"variant": name, "tool": tool, "shape": "x".join(map(str, shape)), "errors": 0, "warnings": 0}
        | {"status": "not run: not in the kernel cache (--cached-only)", "log": ""}
        for tool in ("none", *tools)
        for name in skipped
        for shape in shapes_of(name)
    ]
    # each group also runs once without a sanitizer (tool `none`), beside the others: does it run at all. The
    # slowest tools' processes start first, the largest groups first within a tool, so the run ends with short ones.
    runs = [("none", index, group) for index, group in enumerate(groups(names))] + runs
    runs.sort(key=lambda run: (_START_ORDER.index(run[0]), -len(run[2])))
    deadline = start + args.deadline if args.deadline else None

    def run_before_deadline(tool, index, group):
        """run_one, or rows saying it did not start, with its timeout cut to what is left before the deadline."""
        timeout = args.timeout if deadline is None else min(args.timeout, deadline - time.perf_counter())
        log = args.out / f"{tool}_group{index:02d}.log"
        if timeout <= 5:
            rows = [row for row in parse_log("", tool, group) if row["variant"] != "(unattributed)"]
            return [dict(row, status="not run: past --deadline", log=log.name) for row in rows]
        return run_one(None if tool == "none" else sanitizer, tool, group, log, timeout)

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(run_before_deadline, tool, index, group): (tool, index) for tool, index, group in runs}
        for future in concurrent.futures.as_completed(futures):
            tool, index = futures[future]
            found = future.result()
            rows += found
            errors = sum(row["errors"] for row in found)
            bad = sum(row["status"] != "ok" for row in found)
            print(f"{tool} group{index:02d}: {errors} errors, {bad} runs not finished", flush=True)
    rows.sort(key=lambda row: (row["tool"], row["variant"], row["shape"]))
    with open(args.out / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["variant", "tool", "shape", "errors", "warnings", "status", "log"])
        writer.writeheader()
        writer.writerows(rows)
    errors = sum(row["errors"] for row in rows)
    unfinished = [row for row in rows if row["status"] != "ok"]
    print(
        f"{len(names)} variants x {len(tools)} tools in {time.perf_counter() - start:.0f} s: {errors} errors, "
        f"{len(unfinished)} runs not finished; {args.out / 'summary.csv'}"
    )
    return 1 if errors or unfinished or missed else 0


if __name__ == "__main__":
    sys.exit(main())
