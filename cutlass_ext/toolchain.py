"""Where the compilers and headers are, and which flags target which GPU."""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import threading
from pathlib import Path

from . import requirements

CUTLASS_DIR_ENV = "CUTLASS_EXT_CUTLASS_DIR"

# Flags every kernel library is built with. -DNDEBUG: without it ptxas serialises wgmma and CUTLASS asserts stay.
NVCC_FLAGS = (
    "-O3",
    "-DNDEBUG",
    "-std=c++17",
    "--expt-relaxed-constexpr",
    "-Xcompiler=-fPIC",
    "-shared",
    "--resource-usage",
)


def kernels_dir() -> Path:
    """The CUDA sources: `cutlass_ext/kernels` in an installed wheel, the repository's `kernels/` otherwise."""
    package = Path(__file__).resolve().parent
    for candidate in (package / "kernels", package.parent / "kernels"):
        if (candidate / "launcher_abi.h").is_file():
            return candidate
    raise FileNotFoundError(f"kernel sources not found next to {package}; the installation is incomplete")


_FIND_SPEC_LOCK = threading.Lock()
_PACKAGE_DIR: list[Path] = []  # nvidia-cutlass's folder once found (not cached while missing: it may be installed)


def _cutlass_package() -> Path | None:
    """The `cutlass_library` package folder. Looked up under a lock, once, and again after invalidating the import
    caches if missed: a first call from eight threads once missed the package there (a finder's stale cache or
    sys.path changing under the lookup), and one thread reported the headers as not installed."""
    with _FIND_SPEC_LOCK:
        if not _PACKAGE_DIR:
            for _ in range(2):
                spec = importlib.util.find_spec("cutlass_library")
                if spec is not None and spec.submodule_search_locations:
                    _PACKAGE_DIR.append(Path(next(iter(spec.submodule_search_locations))))
                    break
                importlib.invalidate_caches()
        return _PACKAGE_DIR[0] if _PACKAGE_DIR else None


def cutlass_root() -> Path:
    """A CUTLASS source tree (with include/ and tools/util/include/): $CUTLASS_EXT_CUTLASS_DIR or nvidia-cutlass's."""
    override = os.environ.get(CUTLASS_DIR_ENV)
    if override:
        root = Path(override)
        if not (root / "include" / "cutlass" / "cutlass.h").is_file():
            raise FileNotFoundError(f"{CUTLASS_DIR_ENV}={override} holds no include/cutlass/cutlass.h")
        return root
    package = _cutlass_package()
    if package is None:
        raise FileNotFoundError(
            f"CUTLASS headers not found: `pip install nvidia-cutlass`, or set {CUTLASS_DIR_ENV} to a CUTLASS checkout"
        )
    root = package / "source"
    if not (root / "include" / "cutlass" / "cutlass.h").is_file():
        raise FileNotFoundError(f"the nvidia-cutlass package at {root.parent} carries no C++ headers")
    return root


def include_dirs() -> list[Path]:
    root = cutlass_root()
    return [kernels_dir(), root / "include", root / "tools" / "util" / "include"]


def nvcc() -> str:
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home and (Path(cuda_home) / "bin" / "nvcc").is_file():
        return str(Path(cuda_home) / "bin" / "nvcc")
    found = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").is_file() else None)
    if found is None:
        raise FileNotFoundError("nvcc not found: install the CUDA toolkit, or set CUDA_HOME")
    return found


@functools.cache
def version_text(executable: str) -> str:
    """What `EXECUTABLE --version` prints (a compiler's version is part of the cache keys)."""
    return subprocess.run([executable, "--version"], capture_output=True, text=True, check=True).stdout


@functools.cache
def nvcc_version_text() -> str:
    """What `nvcc --version` prints (checked against the supported releases)."""
    output = version_text(nvcc())
    requirements.check_nvcc(output, nvcc())
    return output


def nvcc_version() -> str:
    """nvcc's build line, e.g. `Build cuda_13.0.r13.0/compiler.36424714_0`: part of every cache key."""
    return nvcc_version_text().strip().splitlines()[-1]


def gencode(arch: str) -> str:
    """`90a` -> -gencode=arch=compute_90a,code=sm_90a (the form that assembles sm_90a-only instructions)."""
    if not arch.rstrip("a").isdigit():
        raise ValueError(f"arch={arch!r} must look like '80', '89' or '90a'")
    return f"-gencode=arch=compute_{arch},code=sm_{arch}"


def device_arch(device=None) -> str:
    """The arch string to build for the given CUDA device: Hopper and later get their `a` feature set."""
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return f"{major}{minor}a" if major >= 9 else f"{major}{minor}"
