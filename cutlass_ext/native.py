"""Torch-free kernel libraries called from Python through ctypes: no torch C++ binding to compile.

A family whose launchers take plain C arguments (pointers, sizes, a stream) loads its library here and wraps the
call in a `torch.library` op. Libraries are keyed by (variant name, arch) end to end (`registry`, with the other
per-device state), so a process with GPUs of two architectures loads each binary for the device it runs on; the
first use of a variant builds it (once, whatever the threads, and under the build cache's lock across processes)
and later uses cost a dictionary look-up.
"""

from __future__ import annotations

import ctypes

import torch

from . import registry


def library(config, device: torch.device) -> ctypes.CDLL:
    """The loaded library of `config` built for `device`'s arch; built on first use."""

    def load(arch: str) -> ctypes.CDLL:
        return ctypes.CDLL(str(registry.build_one(config, arch)), mode=ctypes.RTLD_LOCAL)

    return registry.loaded_library(config, device, load)


def stream_handle(device: torch.device) -> ctypes.c_void_p:
    """The current CUDA stream of `device` as the `void*` our launchers take (captured by CUDA graphs)."""
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def check_status(status: int, what: str) -> None:
    """Launchers return 0 or a cudaError_t / cutlass::Status code."""
    if status != 0:
        raise RuntimeError(f"{what} failed with status {status}")
