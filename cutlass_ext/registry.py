"""Per-process state: the loaded torch binding and which kernel variants it has loaded."""

from __future__ import annotations

import threading
import warnings

import torch

from . import toolchain, variants

_lock = threading.Lock()
_binding = None
_registered: set[str] = set()


def binding():
    global _binding
    if _binding is not None:
        return _binding
    with _lock:
        if _binding is None:
            from .build import load_binding  # imported late: `python -m cutlass_ext.build` must not find it loaded

            _binding = load_binding()
        return _binding


UNLOADED_MARKER = "[cutlass_ext:unloaded]"  # kernels/torch_binding.cpp: a fallback variant it skipped, not loaded
_failed: set[tuple[str, str]] = set()  # (variant, arch) whose build failed in this process


def ensure_names_registered(names: list[str], device: torch.device) -> None:
    """ensure_registered by variant names (parsed only when one is missing)."""
    if not all(name in _registered for name in names):
        ensure_registered([variants.from_name(name) for name in names], device)


def first_usable(names: list[str], device: torch.device) -> list[str]:
    """`names` from the first variant that builds and loads, which is then loaded (the fallbacks after it are
    loaded only if the binding asks for them). A variant that fails to build is dropped with a warning, once; the
    last one's failure is raised."""
    arch = toolchain.device_arch(device)
    for index, name in enumerate(names):
        if name in _registered:
            return names[index:]
        if (name, arch) in _failed and index < len(names) - 1:
            continue
        try:
            ensure_names_registered([name], device)
            return names[index:]
        except RuntimeError as error:
            if index == len(names) - 1:
                raise
            _failed.add((name, arch))
            warnings.warn(f"cutlass_ext: {error}\nfalling back to {names[index + 1]}", RuntimeWarning, stacklevel=3)
    return names


def call_loading_fallbacks(op, variants: list[str], device: torch.device, *args):
    """op(*args, variants): where the binding skipped fallbacks that are not loaded and none loaded could run,
    load them and call again."""
    try:
        return op(*args, variants)
    except RuntimeError as error:
        if UNLOADED_MARKER not in str(error):
            raise
        ensure_names_registered(variants, device)
        return op(*args, variants)


def ensure_registered(configs: list, device: torch.device) -> None:
    """Build what the cache lacks and load every variant in `configs` for `device`'s arch (cheap once done)."""
    if all(c.name in _registered for c in configs):
        return
    binding()
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
            torch.ops.cutlass_ext.register_variant(name, str(result.library))
            _registered.add(name)


def register_library(configs: list, library) -> None:
    """Load variants from a library built elsewhere (the sweep builds several variants per library)."""
    binding()
    with _lock:
        for config in configs:
            if config.name not in _registered:
                torch.ops.cutlass_ext.register_variant(config.name, str(library))
                _registered.add(config.name)
