"""What dispatch needs to know about a GPU, cached once per device; and the same facts for a GPU named by its
marketing name, so `python -m cutlass_ext.explain` answers on a machine without one."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

# Opt-in shared memory per block (bytes) by arch: sm86/sm89 have 99 KB where sm80 has 163 KB.
SHARED_MEMORY_BYTES = {"80": 166912, "86": 101376, "87": 166912, "89": 101376, "90": 232448, "90a": 232448}

# Marketing names -> arch, for GPUs named without being present (the first pattern that matches wins).
_KNOWN_ARCHS = (
    (r"\b(h100|h200|h800|h20|gh200)\b", "90a"),
    (r"\b(a100|a800|a30)\b", "80"),
    (r"\bjetson\b|\borin\b", "87"),
    (r"\b(l4|l40s?|l20)\b|rtx\s*40\d\d|rtx\s*\d+\s*ada", "89"),
    (r"\b(a10g?|a16|a2|a40)\b|rtx\s*30\d\d|rtx\s*a\d{4}", "86"),
)


@dataclass(frozen=True)
class DeviceInfo:
    """name: as the driver reports it (`NVIDIA H200`); arch: the build target (`80`, `86`, `89`, `90a`), or None
    for a named GPU this table does not know; shared_memory_bytes: opt-in shared memory per block.
    major: compute capability major (8 for Ampere and Ada, 9 for Hopper: tables are shared within one); hopper:
    whether it runs the sm_90a kernels. Both derived from arch, stored as fields: torch.compile reads fields of a
    constant, not properties."""

    name: str
    arch: str | None
    shared_memory_bytes: int | None
    major: int | None = field(init=False)
    hopper: bool = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "major", None if self.arch is None else int(self.arch[0]))
        object.__setattr__(self, "hopper", self.arch == "90a")


def arch_of_name(gpu_name: str) -> str | None:
    """`NVIDIA H200` -> `90a`, `NVIDIA A100-SXM4-80GB` -> `80`, `NVIDIA GeForce RTX 4090` -> `89`; None if unknown."""
    text = gpu_name.lower().replace("-", " ")
    for pattern, arch in _KNOWN_ARCHS:
        if re.search(pattern, text):
            return arch
    return None


def named(gpu_name: str, arch: str | None = None) -> DeviceInfo:
    """A GPU described by its name (and arch, if known better than the name tells)."""
    arch = arch or arch_of_name(gpu_name)
    return DeviceInfo(gpu_name, arch, SHARED_MEMORY_BYTES.get(arch) if arch else None)


@functools.cache
def info(index: int) -> DeviceInfo:
    """The CUDA device `index`, read once."""
    import torch

    properties = torch.cuda.get_device_properties(index)
    major, minor = properties.major, properties.minor
    arch = f"{major}{minor}a" if major >= 9 else f"{major}{minor}"
    return DeviceInfo(properties.name, arch, properties.shared_memory_per_block_optin)


def index_of(device) -> int:
    """The index of a torch CUDA device (`cuda` alone means the current one)."""
    import torch

    return device.index if device.index is not None else torch.cuda.current_device()
