"""Torch-free kernel libraries called from Python through ctypes: no torch C++ binding to compile.

A family whose launchers take plain C arguments (pointers, sizes, a stream) loads its library here and wraps the
call in a `torch.library` op. Libraries are keyed by (variant name, arch) end to end, so a process with GPUs of
two architectures loads each binary for the device it runs on; the first use of a variant builds it (once, under
the build cache's lock) and later uses cost a dictionary look-up.
"""

from __future__ import annotations

import ctypes
import threading

import torch

from . import toolchain

_lock = threading.Lock()
_libraries: dict[tuple[str, str], ctypes.CDLL] = {}  # (variant name, arch) -> loaded library
_archs: dict[int, str] = {}  # device index -> arch string


def device_arch(device: torch.device) -> str:
    """The arch string (`80`, `90a`) of a CUDA device, cached per device index."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    arch = _archs.get(index)
    if arch is None:
        arch = _archs.setdefault(index, toolchain.device_arch(index))
    return arch


def library(config, device: torch.device) -> ctypes.CDLL:
    """The loaded library of `config` built for `device`'s arch; built on first use."""
    key = (config.name, device_arch(device))
    found = _libraries.get(key)
    if found is not None:
        return found
    with _lock:
        found = _libraries.get(key)
        if found is None:
            from .build import build_libraries

            (result,) = build_libraries([(config,)], key[1])
            if result.library is None:
                raise RuntimeError(f"building kernel {config.name} for sm_{key[1]} failed:\n{result.error}")
            found = _libraries[key] = ctypes.CDLL(str(result.library), mode=ctypes.RTLD_LOCAL)
        return found


def stream_handle(device: torch.device) -> ctypes.c_void_p:
    """The current CUDA stream of `device` as the `void*` our launchers take (captured by CUDA graphs)."""
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def check_status(status: int, what: str) -> None:
    """Launchers return 0 or a cudaError_t / cutlass::Status code."""
    if status != 0:
        raise RuntimeError(f"{what} failed with status {status}")
