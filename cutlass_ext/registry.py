"""Per-process state: the loaded torch binding and which kernel variants it has loaded."""

from __future__ import annotations

import threading

import torch

from . import toolchain, variants

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


def ensure_names_registered(names: list[str], device: torch.device) -> None:
    """ensure_registered by variant names (parsed only when one is missing)."""
    if not all(name in _registered for name in names):
        ensure_registered([variants.from_name(name) for name in names], device)


def ensure_registered(configs: list, device: torch.device) -> None:
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


def register_library(configs: list, library) -> None:
    """Load variants from a library built elsewhere (the sweep builds several variants per library)."""
    module = binding()
    with _lock:
        for config in configs:
            if config.name not in _registered:
                module.register_variant(config.name, str(library))
                _registered.add(config.name)
