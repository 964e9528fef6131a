"""DeepGEMM (deepseek-ai/DeepGEMM) built from its repository, offline, as the block-scaled FP8 benchmark's peer.

    git clone --recursive https://github.com/deepseek-ai/DeepGEMM peers/deepgemm   # or copy one with its submodules
    python python/deepgemm_build.py [--source peers/deepgemm]                       # on the GPU machine (torch, CUDA)
    PYTHONPATH=peers/deepgemm python python/bench_fp8_block.py --deepgemm --out …

Builds its extension (`deep_gemm/_C.so`) in place with torch's C++ extension builder, without setup.py, git or
network: its JIT looks for CUTLASS and CuTe in `deep_gemm/include` (copied there from `third-party/cutlass` when
missing) and the build takes fmt from `third-party/fmt`. The compiler is the system g++ unless `--cxx` names
another: the extension must use the libstdc++ python loads (built by a newer g++ it crashed in `std::regex`, its
JIT's include scanner, at the first GEMM). About 70 s on 16 cores; its JIT then compiles each kernel in 3-5 s.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def install_headers(source: Path) -> Path:
    """CUTLASS and CuTe where DeepGEMM's JIT looks for them (`deep_gemm/include`), copied from its submodule: also
    needed beside an extension built elsewhere and carried in."""
    include = source / "deep_gemm" / "include"
    for library in ("cutlass", "cute"):
        if not (include / library).is_dir():
            shutil.copytree(source / "third-party" / "cutlass" / "include" / library, include / library)
    return include


def build(source: Path, cxx: str | None) -> Path:
    from torch.utils.cpp_extension import CUDA_HOME, load

    include = install_headers(source)
    if cxx:
        os.environ["CXX"] = cxx
    build_dir = source / "build_offline"
    build_dir.mkdir(exist_ok=True)
    load(
        name="_C",
        sources=[str(source / "csrc" / "python_api.cpp")],
        extra_cflags=["-std=c++17", "-O3", "-fPIC", "-Wno-psabi", "-Wno-deprecated-declarations"],
        extra_include_paths=[
            os.path.join(CUDA_HOME, "include"),
            os.path.join(CUDA_HOME, "include", "cccl"),
            str(include),
            str(source / "third-party" / "fmt" / "include"),
        ],
        extra_ldflags=[f"-L{os.path.join(CUDA_HOME, 'lib64')}", "-lcudart", "-lnvrtc", "-lcuda"],
        build_directory=str(build_dir),
        verbose=True,
        is_python_module=True,
    )
    (library,) = glob.glob(str(build_dir / "_C*.so"))
    target = source / "deep_gemm" / "_C.so"
    shutil.copy(library, target)
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=ROOT / "peers" / "deepgemm", help="a DeepGEMM checkout")
    system_gxx = shutil.which("g++", path="/usr/bin")
    parser.add_argument("--cxx", default=system_gxx, help="host compiler (default: /usr/bin/g++)")
    parser.add_argument(
        "--headers-only", action="store_true", help="only copy the JIT's headers (the extension was built elsewhere)"
    )
    args = parser.parse_args(argv)
    if not (args.source / "csrc" / "python_api.cpp").is_file():
        print(f"--source {args.source}: not a DeepGEMM checkout (no csrc/python_api.cpp)", file=sys.stderr)
        return 2
    cutlass = [args.source / "deep_gemm/include/cutlass", args.source / "third-party/cutlass/include"]
    if not any(path.is_dir() for path in cutlass) or not (args.source / "third-party/fmt/include").is_dir():
        print(f"--source {args.source}: its cutlass or fmt submodule is missing (clone --recursive)", file=sys.stderr)
        return 2
    if args.headers_only:
        print("headers in", install_headers(args.source))
        return 0
    print("built", build(args.source, args.cxx))
    return 0


if __name__ == "__main__":
    sys.exit(main())
