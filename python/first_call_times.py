"""Time of the first call on a fresh process, per mode and cache state: what a user waits for before the first result.

    python python/first_call_times.py --out sweeps/results/h100/first_call_times.csv
    python python/first_call_times.py --states warm prebuilt --modes tf32tf32 fp8_decode --out first_call_times.csv

Every measurement is a new Python process (this file with `--child MODE`) that imports torch, then cutlass_ext
(import_s), makes its inputs on the GPU with the CUDA context already up, and times its first call and its second
(wall time to a synchronised result). Modes: `ext.gemm`'s tf32tf32, halfhalf, markidis, tf32 and fp32 at 4096³;
`ext.gemm_fp8` with row-wise scales and promoted accumulation (the default) at a Llama-3-70B decode shape
(16 × 8192 × 8192) and a prefill shape (4096 × 8192 × 8192); `ext.gemm_fp8` with block scales (1x128 activations,
128x128 weights) at a DeepSeek-V3 shape (128 × 4096 × 7168); `ext.lowbit.matmul` with an M7E4 accumulator at 4096³.
Peers (`deepgemm_nvcc`, `deepgemm_nvrtc`): DeepGEMM's `fp8_gemm_nt` at the block mode's shape, its kernel compiled
at the first call by its JIT with NVCC (its default) or NVRTC; its cache folder is the state's (DG_JIT_CACHE_DIR),
its extension already built, `deep_gemm` importable (PYTHONPATH). Its activation scales are laid out in its own
layout before the clock runs, by its own transposition kernel (JIT-compiled then, so outside the timed call: its
users' quantizers write that layout and never build it). They take the cold and warm states only.

Cache states (the CUTLASS_EXT_CACHE folder the process sees):
  cold      an empty folder: the first call builds the torch binding and the kernels dispatch picks
  warm      the cold run's folder afterwards (without `cold`: the current cache, after one untimed call): it loads
  prebuilt  a new folder after `python -m cutlass_ext.build --prebuild` (FP8 modes: `--modes fp8_promoted`, the
            block mode `--modes fp8_block`), the package's ahead-of-time build; setup_s is that command's time, one
            build shared by the modes using it

binding_build_s and kernel_build_s: what a cold first call built and how long each took, from the build's own
log lines (the two build side by side; empty where nothing was built).

Rows are appended to --out as they are measured, so a run cut short keeps what it measured and a second run with
other modes or states adds to the same file.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GEMM_MODES = ("tf32tf32", "halfhalf", "markidis", "tf32", "fp32")
FP8_SHAPES = {"fp8_decode": (16, 8192, 8192), "fp8_prefill": (4096, 8192, 8192)}
BLOCK_SHAPE = (128, 4096, 7168)
PEER_MODES = {"deepgemm_nvcc": "0", "deepgemm_nvrtc": "1"}  # DG_JIT_USE_NVRTC
# The directly written block-scaled kernel at the block mode's shape (its own family: no CUTLASS collective).
DIRECT_VARIANT = "fp8direct_e4m3e4m3_bf16_64x64x128"
MODES = GEMM_MODES + tuple(FP8_SHAPES) + ("fp8_block", "fp8_block_direct", "lowbit") + tuple(PEER_MODES)
STATES = ("cold", "warm", "prebuilt")
SIZE = 4096
# What a user runs to build ahead: the plain command covers ext.gemm's modes; FP8 is named (it is not a default).
PREBUILD_ARGS = {
    "fp8_decode": ("--modes", "fp8_promoted"),
    "fp8_prefill": ("--modes", "fp8_promoted"),
    "fp8_block": ("--modes", "fp8_block"),
    "fp8_block_direct": ("--names", DIRECT_VARIANT),
}
COLUMNS = (
    "mode",
    "state",
    "first_call_s",
    "second_call_ms",
    "import_s",
    "setup_s",
    "gpu",
    "binding_build_s",
    "kernel_build_s",
)
# What a cold first call waited for, from the build's own log lines (the binding and the kernels build side by side).
_BUILD_TIMES = {
    "binding_build_s": re.compile(r"torch binding built in ([0-9.]+) s"),
    "kernel_build_s": re.compile(r"kernel build finished in ([0-9.]+) s"),
}


def child(mode: str) -> None:
    """Runs in the fresh process: one JSON line with the import time and the first and second calls' times."""
    import torch

    start = time.perf_counter()
    import cutlass_ext as ext

    if mode in PEER_MODES:
        import deep_gemm
    import_s = time.perf_counter() - start
    call = _peer_call(deep_gemm, ext, torch) if mode in PEER_MODES else _call(mode, ext, torch)
    torch.cuda.synchronize()
    times = []
    for _ in range(2):
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    gpu = torch.cuda.get_device_name()
    print(json.dumps({"import_s": import_s, "first_call_s": times[0], "second_call_s": times[1], "gpu": gpu}))


def _call(mode: str, ext, torch):
    """The mode's call on fresh random inputs, made (and the CUDA context started) before any clock runs."""
    if mode in GEMM_MODES:
        a, b = (torch.randn(SIZE, SIZE, device="cuda") for _ in range(2))
        return lambda: ext.gemm(a, b, mode=mode)
    if mode in FP8_SHAPES:
        m, n, k = FP8_SHAPES[mode]
        a8 = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        w8 = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        scale_a, scale_w = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
        return lambda: ext.gemm_fp8(a8, w8, scale_a, scale_w, out_dtype=torch.bfloat16, accum="promoted")
    if mode == "fp8_block":
        a8, scale_a, w8, scale_w = _block_operands(ext, torch)
        return lambda: ext.gemm_fp8(a8, w8, scale_a, scale_w)
    if mode == "fp8_block_direct":
        a8, scale_a, w8, scale_w = _block_operands(ext, torch)
        return lambda: ext.fp8_block.gemm_fp8_block(a8, w8, scale_a, scale_w, variant=DIRECT_VARIANT)
    a, b = (torch.randn(SIZE, SIZE, device="cuda") for _ in range(2))
    config = ext.lowbit.LowbitConfig(ext.lowbit.LowbitFormat.make(7, 4, chunk=16))
    return lambda: ext.lowbit.matmul(a, b, config)


def _block_operands(ext, torch):
    m, n, k = BLOCK_SHAPE
    a8, scale_a = ext.quantize_fp8(torch.randn(m, k, device="cuda"), granularity="block", block=(1, 128))
    w8, scale_w = ext.quantize_fp8(torch.randn(n, k, device="cuda"), granularity="block", block=(128, 128))
    return a8, scale_a, w8, scale_w


def _peer_call(deep_gemm, ext, torch):
    """DeepGEMM's dense block-scaled GEMM on the block mode's operands, its activation scales laid out as it reads
    them before the clock runs."""
    a8, scale_a, w8, scale_w = _block_operands(ext, torch)
    scale_a = deep_gemm.get_mn_major_tma_aligned_tensor(scale_a)
    out = torch.empty(a8.shape[0], w8.shape[0], dtype=torch.bfloat16, device="cuda")
    return lambda: deep_gemm.fp8_gemm_nt((a8, scale_a), (w8, scale_w), out, disable_ue8m0_cast=True)


def _environment(cache: Path | None, mode: str = "") -> dict:
    """The fresh process's environment: its cache folder (ours, or DeepGEMM's JIT cache for a peer mode)."""
    environment = dict(os.environ)
    if mode in PEER_MODES:
        environment["DG_JIT_USE_NVRTC"] = PEER_MODES[mode]
        if cache is not None:
            environment["DG_JIT_CACHE_DIR"] = str(cache)
    elif cache is not None:
        environment["CUTLASS_EXT_CACHE"] = str(cache)
    return environment


def run_child(mode: str, cache: Path | None, timeout: float) -> dict:
    """A fresh process's measurement of `mode` with `cache` as its cache folder (None: the environment's)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", mode]
    done = subprocess.run(command, env=_environment(cache, mode), capture_output=True, text=True, timeout=timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"{mode}: the measuring process exited {done.returncode}:\n{done.stderr[-3000:]}")
    result = json.loads(lines[-1])
    for line in done.stderr.splitlines():  # what the first call built, for the log and the build-time columns
        if line.startswith("cutlass_ext:"):
            print(f"  {mode}: {line}", file=sys.stderr)
            for column, pattern in _BUILD_TIMES.items():
                if match := pattern.search(line):
                    result[column] = result.get(column, 0.0) + float(match.group(1))
    return result


def require_cuda(timeout: float) -> None:
    """script_device's check in a fresh process (this one stays torch-free, as the measured ones start), before any
    process that builds: without a CUDA device, its one line on stderr and exit status 2."""
    probe = [sys.executable, str(Path(__file__).with_name("script_device.py")), "first_call_times"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        lines = done.stderr.strip().splitlines()
        print(lines[-1] if lines else f"the CUDA check exited {done.returncode}", file=sys.stderr)
        raise SystemExit(2)


def prebuild(args: tuple[str, ...], cache: Path, timeout: float) -> float:
    """Runs the package's ahead-of-time build into `cache`; its wall time in seconds."""
    start = time.perf_counter()
    command = [sys.executable, "-m", "cutlass_ext.build", "--prebuild", *args]
    done = subprocess.run(command, env=_environment(cache), capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - start
    built = sum(" built " in line for line in done.stdout.splitlines())
    print(f"prebuild {' '.join(args) or '(defaults)'}: {seconds:.1f} s, {built} libraries built", file=sys.stderr)
    if done.returncode:  # a variant that failed to build is reported; the first call shows what it costs
        print(f"prebuild {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}", file=sys.stderr)
    return seconds


class Caches:
    """The cache folder of each (mode, state), inside one temporary folder."""

    def __init__(self, root: Path, timeout: float, run):
        self.root, self.timeout, self.run = root, timeout, run
        self.cold: dict[str, Path] = {}
        self.prebuilt: dict[tuple[str, ...], tuple[Path, float]] = {}

    def folder(self, mode: str, state: str) -> tuple[Path | None, float | None]:
        """(cache folder, setup seconds) for a measurement; prepares the folder first (warm: one untimed call)."""
        if state == "cold":
            self.cold[mode] = Path(tempfile.mkdtemp(prefix=f"cold_{mode}_", dir=self.root))
            return self.cold[mode], None
        if state == "warm":
            cache = self.cold.get(mode)
            if cache is None:
                self.run(mode, None, self.timeout)
            return cache, None
        args = PREBUILD_ARGS.get(mode, ())
        if args not in self.prebuilt:
            built = Path(tempfile.mkdtemp(prefix="prebuilt_", dir=self.root))
            self.prebuilt[args] = built, prebuild(args, built, self.timeout)
        built, seconds = self.prebuilt[args]
        # A copy per mode: one mode's first call must not find what another's built.
        cache = Path(tempfile.mkdtemp(prefix=f"prebuilt_{mode}_", dir=self.root)) / "cache"
        shutil.copytree(built, cache, ignore=shutil.ignore_patterns("locks", "*.lock", "staging"))
        return cache, seconds


def measure(modes, states, out: Path, timeout: float, run=run_child) -> int:
    """Appends one row per (mode, state) to `out`; the number of measurements that failed."""
    new_file = not out.exists() or out.stat().st_size == 0
    if not new_file:
        with out.open() as file:
            header = next(csv.reader(file), [])
        if tuple(header) != COLUMNS:
            raise ValueError(f"--out {out} has the columns {header}, not {list(COLUMNS)}: write to a new file")
    if run is run_child:  # a stand-in `run` (the tests') spawns nothing
        require_cuda(timeout)
    out.parent.mkdir(parents=True, exist_ok=True)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="cutlass_ext_first_call_") as root, out.open("a", newline="") as file:
        writer = csv.writer(file)
        if new_file:
            writer.writerow(COLUMNS)
        caches = Caches(Path(root), timeout, run)
        for mode in modes:
            for state in states:
                if mode in PEER_MODES and state == "prebuilt":
                    print(f"{mode} {state}: a peer has no ahead-of-time build here; skipped", file=sys.stderr)
                    continue
                print(f"{mode} {state} ...", file=sys.stderr, flush=True)
                try:
                    cache, setup_s = caches.folder(mode, state)
                    result = run(mode, cache, timeout)
                except (RuntimeError, subprocess.TimeoutExpired) as error:
                    failed += 1
                    print(f"{mode} {state}: {error}", file=sys.stderr)
                    continue
                row = (
                    mode,
                    state,
                    f"{result['first_call_s']:.2f}",
                    f"{result['second_call_s'] * 1e3:.3f}",
                    f"{result['import_s']:.2f}",
                    "" if setup_s is None else f"{setup_s:.1f}",
                    result["gpu"],
                    *(f"{result[column]:.1f}" if column in result else "" for column in _BUILD_TIMES),
                )
                writer.writerow(row)
                file.flush()
                print(", ".join(f"{name}={value}" for name, value in zip(COLUMNS, row)), flush=True)
    return failed


def positive_seconds(text: str) -> float:
    """argparse type for --timeout: subprocess.run takes 0 or less as "time out at once"."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive finite number of seconds")
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, metavar="FILE.csv", help="CSV to append rows to (required)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--states", nargs="+", choices=STATES, default=list(STATES))
    parser.add_argument("--timeout", type=positive_seconds, default=900.0, help="seconds allowed to each process")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    if args.out is None:
        parser.error("--out is required")
    # Cold before warm: warm reuses the folder cold filled.
    states = [state for state in STATES if state in args.states]
    return 1 if measure(args.modes, states, args.out, args.timeout) else 0


if __name__ == "__main__":
    sys.exit(main())
