"""The registry of kernel families: build, codegen, dispatch and the sweep ask it, never a family by name.

A family is a folder (here, or inside the package that owns it) holding its Python and its CUDA templates, and a
module that defines `FAMILY = Family(...)`. To add one:

1. write the config dataclass (deriving from `cutlass_ext.config.VariantFields`, its name grammar declared once
   as `NAME = NameGrammar(...)`, its `family` field defaulting to the family's name);
2. write `<template>.cu.in` (the translation unit: `$defines`, `$names`, `$instances`) and `<template>_instance.in`
   (one variant's launchers, rendered by the family's `render_instance(config) -> str`) beside the module; shared
   CUDA headers stay in `kernels/`;
3. optionally, sweep plug-ins named by module path: `filters` (a module with `RULES`, `cutlass_ext.families.rules`
   `Rule`s), `space` (a module with `load_space(path, document) -> list[config]` for its YAML spaces) and `measure`
   (a module with `make_problem(m, n, k, batch, seed)`, `kernel_runner(config) -> (run, prepare)`,
   `peers(problem, repeats)`; make_problem may take `mode=` too, which the sweep then passes: the space's one mode,
   for a family whose shapes mean different problems per mode);
4. add one line to `_REGISTERED` below: `"<family>": "<module defining FAMILY>"` (or call `register(family)`).

Entries are module paths, imported when first asked for: the registry imports no family, so a family may use
anything below dispatch (the build, the native loader) without an import cycle.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_REGISTERED: dict[str, str | Family] = {
    "sm80": "cutlass_ext.families.sm80",
    "sm90": "cutlass_ext.families.sm90",
    "sm90_fp8": "cutlass_ext.families.sm90_fp8",
    "sm90_fp8_block": "cutlass_ext.fp8_block.family",
    "sm90_fp8_block_direct": "cutlass_ext.fp8_block.direct",
    "lowbit": "cutlass_ext.lowbit.family",
    "optim": "cutlass_ext.optim.family",
    "ozaki": "cutlass_ext.ozaki.family",
}
_lock = threading.Lock()


@dataclass(frozen=True)
class Family:
    """What build, codegen, dispatch and the sweep need to know about one kernel family.

    name: the configs' `family` field. config: the config dataclass (`name`, `from_name`, `is_name`, `to_dict`,
    `fingerprint`). template: the translation unit's template, `<template>.cu.in`; the instance template
    `<template>_instance.in` lies beside it. render_instance: one config's launchers from the instance template.
    archs: the archs it builds for (None: every arch). defines: the preprocessor lines a config's translation
    unit starts with; configs with different defines never share a unit. parts: how many translation units a
    library is compiled from, side by side, and linked (each rendered with CUTLASS_EXT_LIBRARY_PART = 0…parts−1
    and CUTLASS_EXT_LIBRARY_PARTS defined; the template says what each holds). cubin: the library is built in two
    halves (cutlass_ext/cubin_build.py, kernels/cubin_launch.h): nvcc compiles its kernels alone into a cubin, the
    host compiler its launchers, which load them from the embedded cubin (kernels/cubin_library.h; CUTLASS
    kernels through cubin_launch.h's macros). cubin_nvcc_part: for a
    cubin library that also launches small kernels of its own (<<<>>>, which the host compiler cannot compile), the
    macro under which its unit holds only those: nvcc compiles it a third time, side by side with the halves, and
    the link takes that object too. torch_binding: its variants are
    called through the torch binding (kernels/torch_binding.cpp), which loads their libraries; otherwise through
    ctypes (native.py). filters, space, measure: module paths of the sweep plug-ins (None where the family has
    none).
    """

    name: str
    config: type
    template: Path
    render_instance: Callable
    archs: tuple[str, ...] | None = None
    defines: Callable = field(default=lambda config: "")
    parts: int = 1
    cubin: bool = False
    cubin_nvcc_part: str | None = None
    torch_binding: bool = False
    filters: str | None = None
    space: str | None = None
    measure: str | None = None

    def __post_init__(self):
        for path in (self.template, self.instance_template):
            if not Path(path).is_file():
                raise FileNotFoundError(f"family {self.name!r}: template {path} does not exist")
        if self.cubin_nvcc_part is not None and not (self.cubin and self.cubin_nvcc_part.isidentifier()):
            raise ValueError(f"family {self.name!r}: cubin_nvcc_part must be a macro name, for a cubin family")
        if self.cubin and self.parts != 1:
            raise ValueError(f"family {self.name!r}: a cubin library is one translation unit (parts=1)")

    @property
    def instance_template(self) -> Path:
        return self.template.with_name(self.template.name.replace(".cu.in", "_instance.in"))

    def builds_for(self, arch: str) -> bool:
        return self.archs is None or arch in self.archs

    def plugin(self, kind: str):
        """The imported sweep plug-in module `kind` (`filters`, `space`, `measure`); a clear error if it has none."""
        path = getattr(self, kind)
        if path is None:
            raise LookupError(f"kernel family {self.name!r} has no sweep {kind} plug-in")
        return importlib.import_module(path)


def register(family: Family | str, name: str | None = None) -> None:
    """Add a family: a `Family`, or the path of a module defining `FAMILY` (then `name` names it)."""
    key = family.name if isinstance(family, Family) else name
    if not key:
        raise ValueError("register(path) needs the family's name: register('module.path', name='family')")
    with _lock:
        _REGISTERED[key] = family


def unregister(name: str) -> None:
    with _lock:
        _REGISTERED.pop(name, None)


def names() -> list[str]:
    return list(_REGISTERED)


def get(name: str) -> Family:
    """The family called `name`, its module imported on first use."""
    entry = _REGISTERED.get(name)
    if entry is None:
        raise KeyError(f"kernel family {name!r} is not registered; known: {names()}")
    if isinstance(entry, str):
        family = importlib.import_module(entry).FAMILY
        if family.name != name:
            raise ValueError(f"{entry}.FAMILY is named {family.name!r}, registered as {name!r}")
        with _lock:
            _REGISTERED[name] = family
        return family
    return entry


def all_families() -> list[Family]:
    return [get(name) for name in names()]


def of(config) -> Family:
    """The family of a config."""
    return get(config.family)


def from_name(name: str):
    """The config whose variant name this is, whichever family's grammar it follows (names travel through op
    arguments, CSV tables and the build cache)."""
    for family in all_families():
        if family.config.is_name(name):
            return family.config.from_name(name)
    raise ValueError(f"{name!r} is not a variant name of any kernel family ({', '.join(names())})")
