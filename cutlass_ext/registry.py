"""Dispatch's per-device state, in one place: device facts per device index, the torch binding, the kernel
variants loaded into it and the ctypes families' libraries, keyed by (variant, arch).

Every cache here is filled by the first call that needs an entry and is safe for concurrent first calls: each
entry is computed once (`once.OnceMap`), a variant is built once per arch (and the build cache's file locks keep
processes from building it twice), different variants build in parallel threads.
"""

from __future__ import annotations

import ctypes
import threading
import warnings

import torch

from . import device as device_facts
from . import families, requirements, toolchain
from .compiling import constant_result
from .once import OnceMap

_binding = OnceMap()
_registered = OnceMap()  # (variant, arch) -> library path the binding loaded it from
_libraries = OnceMap()  # (variant, arch) -> ctypes.CDLL of a torch-free family called through ctypes (native.py)
_failed: set[tuple[str, str]] = set()  # (variant, arch) whose build failed in this process
_failed_lock = threading.Lock()

UNLOADED_MARKER = "[cutlass_ext:unloaded]"  # kernels/torch_binding.cpp: a fallback variant it skipped, not loaded


def binding():
    """The torch binding, built (once per torch version) and loaded on first use."""

    def load():
        from .build import load_binding  # the compiler, imported when first needed

        return load_binding()

    return _binding.get("binding", load)


def device_index(device: torch.device) -> int:
    """The index of a CUDA device (`cuda` alone means the current one)."""
    return device.index if device.index is not None else torch.cuda.current_device()


@constant_result
def device_info(index: int) -> device_facts.DeviceInfo:
    """What dispatch knows about CUDA device `index` (name, arch, shared memory), read once (device.info's
    cache, the one per device); a constant to torch.compile, which reads it while tracing, never traces it."""
    return device_facts.info(index)


@constant_result
def device_arch(device: torch.device) -> str:
    """The arch string (`80`, `90a`) kernels are built for on `device` (a constant to torch.compile)."""
    return device_info(device_index(device)).arch


def is_registered(name: str, device: torch.device) -> bool:
    return (name, device_arch(device)) in _registered


def ensure_names_registered(names: list[str], device: torch.device) -> None:
    """ensure_registered by variant names (parsed only when one is missing)."""
    arch = device_arch(device)
    if not all((name, arch) in _registered for name in names):
        ensure_registered([families.from_name(name) for name in names], device)


def first_usable(names: list[str], device: torch.device) -> list[str]:
    """`names` from the first variant that builds and loads, which is then loaded (the fallbacks after it are
    loaded only if the binding asks for them). A variant that fails to build is dropped with a warning, once; the
    last one's failure is raised."""
    arch = device_arch(device)
    for index, name in enumerate(names):
        if (name, arch) in _registered:
            return names[index:]
        if (name, arch) in _failed and index < len(names) - 1:
            continue
        try:
            ensure_names_registered([name], device)
            return names[index:]
        except RuntimeError as error:
            if index == len(names) - 1:
                raise
            with _failed_lock:
                first = (name, arch) not in _failed
                _failed.add((name, arch))
            if first:
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


def loaded_library(config, device: torch.device, load):
    """The library of `config` loaded for `device`'s arch by `load(arch)` on first use (native.py's ctypes
    families), once whatever the threads."""
    arch = device_arch(device)
    return _libraries.get((config.name, arch), lambda: load(arch))


def build_one(config, arch: str):
    """The library file of `config` built for `arch` (from the cache if there); a RuntimeError with the
    compiler's log if it does not build."""
    requirements.check_driver(toolchain.nvcc_version)  # the first kernel for a device: an old driver fails here
    from .build import build_libraries

    (result,) = build_libraries([(config,)], arch)
    if result.library is None:
        raise RuntimeError(f"building kernel {config.name} for sm_{arch} failed:\n{result.error}")
    return result.library


def _load_into_binding(name: str, arch: str, library) -> None:
    """The binding keys its variants by (name, arch) too: a call runs the binary built for its device's arch."""
    torch.ops.cutlass_ext.register_variant(name, arch, str(library))


def ensure_registered(configs: list, device: torch.device) -> None:
    """Build what the cache lacks and load every variant in `configs` for `device`'s arch (cheap once done)."""
    arch = device_arch(device)
    missing = [c for c in configs if (c.name, arch) not in _registered]
    if not missing:
        return
    if "binding" not in _binding:  # a first call: the binding builds while nvcc builds the kernels
        threading.Thread(target=_load_binding_ahead, daemon=True).start()
    if len(missing) > 1:  # several at once (a test module's variants, a confirmation run): one parallel build
        _build_ahead(missing, arch)
    for config in missing:
        _registered.get((config.name, arch), lambda config=config: _build_and_load(config, arch))


def _build_ahead(configs: list, arch: str) -> None:
    """Fill the cache with `configs`' libraries in one parallel build; each is then loaded (and a failed one's
    error raised) by _build_and_load, which finds the others built."""
    requirements.check_driver(toolchain.nvcc_version)
    from .build import build_libraries

    build_libraries([(config,) for config in configs], arch)


def _load_binding_ahead() -> None:
    try:
        binding()
    except Exception:  # not remembered: the caller's own binding() call raises it again
        pass


def _build_and_load(config, arch: str):
    library = build_one(config, arch)
    binding()  # waits for the build started ahead
    _load_into_binding(config.name, arch, library)
    return library


def register_library(configs: list, library, device: torch.device) -> None:
    """Load variants from a library built elsewhere for `device`'s arch (the sweep builds several variants per
    library): into the torch binding for the families it calls, as the ctypes library `native.library` returns for
    the others."""
    arch = device_arch(device)
    for config in configs:
        if families.of(config).torch_binding:
            binding()
            _registered.get(
                (config.name, arch), lambda config=config: _load_into_binding(config.name, arch, library) or library
            )
        else:
            _libraries.get((config.name, arch), lambda: ctypes.CDLL(str(library), mode=ctypes.RTLD_LOCAL))
