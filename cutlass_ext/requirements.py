"""The versions cutlass_ext needs, each checked where it is first needed, with a message naming what was found.

- torch >= 2.9: `torch.backends.cuda.matmul.fp32_precision`, which the peers (`cutlass_ext.peers`: cuBLAS at TF32
  or IEEE precision beside our kernels) set, appeared in 2.9; checked at import (a string comparison).
- nvcc >= 12.0: the kernels target sm_90a (wgmma, TMA) for Hopper, which the CUTLASS 4.2 headers enable from CUDA
  12.0 on (cutlass/arch/config.h); checked when the build first asks nvcc its version. Tested with 13.0.
- CUDA driver: the kernel libraries link the CUDA runtime of the nvcc that built them, and a runtime of major
  version X needs a driver of CUDA X or later (minor-version compatibility); never older than CUDA 12.0.
  Checked once, when the first kernel is built or loaded for a device (`registry.build_one`: at run time, never
  while torch.compile traces), not at import.
"""

from __future__ import annotations

import ctypes
import functools
import re

TORCH_MINIMUM = (2, 9)
NVCC_MINIMUM = (12, 0)
DRIVER_MINIMUM = (12, 0)


def _version_tuple(text: str, what: str) -> tuple[int, int]:
    """(major, minor) of a version string such as `2.13.0+cpu` or `13.0`."""
    match = re.match(r"\s*(\d+)\.(\d+)", text)
    if match is None:
        raise RuntimeError(f"cutlass_ext: cannot read a version from {what} {text!r}")
    return int(match[1]), int(match[2])


def _dotted(version: tuple[int, int]) -> str:
    return ".".join(map(str, version))


def check_torch(version: str | None = None) -> None:
    """Raise ImportError if torch (`version`, default the installed one) is older than TORCH_MINIMUM."""
    if version is None:
        import torch

        version = torch.__version__
    if _version_tuple(version, "torch version") < TORCH_MINIMUM:
        raise ImportError(
            f"cutlass_ext needs torch >= {_dotted(TORCH_MINIMUM)} (torch.backends.cuda.matmul.fp32_precision); "
            f"found torch {version}"
        )


def nvcc_release(version_output: str) -> tuple[int, int]:
    """(major, minor) from `nvcc --version`'s output: its `release 13.0, V13.0.48` line, or its build line
    `Build cuda_13.0.r13.0/compiler.36424714_0` alone."""
    match = re.search(r"release (\d+)\.(\d+)", version_output) or re.search(r"cuda_(\d+)\.(\d+)", version_output)
    if match is None:
        raise RuntimeError(f"cutlass_ext: cannot read the CUDA release from nvcc --version:\n{version_output}")
    return int(match[1]), int(match[2])


def check_nvcc(version_output: str, path: str = "nvcc") -> tuple[int, int]:
    """The release of the nvcc whose `--version` printed `version_output`; RuntimeError if below NVCC_MINIMUM."""
    release = nvcc_release(version_output)
    if release < NVCC_MINIMUM:
        raise RuntimeError(
            f"cutlass_ext builds its kernels with nvcc >= {_dotted(NVCC_MINIMUM)} (sm_90a for Hopper); {path} is "
            f"release {_dotted(release)}: install a newer CUDA toolkit or point CUDA_HOME at one"
        )
    return release


def driver_version(libcuda: str = "libcuda.so.1") -> tuple[int, int]:
    """The CUDA version the installed driver supports, from cuDriverGetVersion (e.g. 13000 -> (13, 0))."""
    try:
        library = ctypes.CDLL(libcuda)
    except OSError as error:
        raise RuntimeError(f"cutlass_ext: the CUDA driver library {libcuda} cannot be loaded: {error}") from None
    version = ctypes.c_int(0)
    status = library.cuDriverGetVersion(ctypes.byref(version))
    if status != 0:
        raise RuntimeError(f"cutlass_ext: cuDriverGetVersion failed with CUresult {status}")
    return version.value // 1000, version.value % 1000 // 10


def required_driver(toolkit: tuple[int, int] | None) -> tuple[int, int]:
    """The oldest driver (as the CUDA version it supports) that runs kernels built by nvcc of `toolkit`."""
    return max(DRIVER_MINIMUM, (toolkit[0], 0)) if toolkit is not None else DRIVER_MINIMUM


def check_driver_version(driver: tuple[int, int], toolkit: tuple[int, int] | None) -> None:
    """RuntimeError if a driver supporting CUDA `driver` cannot run kernels built by nvcc of release `toolkit`."""
    needed = required_driver(toolkit)
    if driver < needed:
        built = f"nvcc {_dotted(toolkit)}" if toolkit is not None else "this version of cutlass_ext"
        raise RuntimeError(
            f"cutlass_ext: the CUDA driver supports CUDA {_dotted(driver)}, but kernels built by {built} need a "
            f"driver for CUDA {_dotted(needed)} or later: update the NVIDIA driver"
        )


@functools.cache
def check_driver(nvcc_version) -> None:
    """check_driver_version for this machine's driver, once per process. nvcc_version: a callable returning nvcc's
    version text (toolchain.nvcc_version), raising FileNotFoundError where there is no nvcc (kernels built
    elsewhere and carried in the cache)."""
    try:
        toolkit = nvcc_release(nvcc_version())
    except FileNotFoundError:
        toolkit = None
    check_driver_version(driver_version(), toolkit)
