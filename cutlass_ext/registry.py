"""Per-process state: the loaded torch binding and which kernel variants it has loaded."""

from __future__ import annotations

import threading

import torch

from . import toolchain
from .config import KernelConfig

_lock = threading.Lock()
_binding = None
_registered: set[str] = set()


def binding():
    global _binding
    with _lock:
        if _binding is None:
            from .build import load_binding  # imported late: `python -m cutlass_ext.build` must not find it loaded

            _binding = load_binding()
        return _binding


def ensure_registered(configs: list[KernelConfig], device: torch.device) -> None:
    """Build what the cache lacks and load every variant in `configs` for `device`'s arch (cheap once done)."""
    if all(c.name in _registered for c in configs):
        return
    module = binding()
    with _lock:
        missing = [c for c in configs if c.name not in _registered]
        if not missing:
            return
        from .build import build_libraries

        arch = toolchain.device_arch(device)
        for result in build_libraries([(c,) for c in missing], arch):
            name = result.configs[0].name
            if result.library is None:
                raise RuntimeError(f"building kernel {name} for sm_{arch} failed:\n{result.error}")
            module.register_variant(name, str(result.library))
            _registered.add(name)
