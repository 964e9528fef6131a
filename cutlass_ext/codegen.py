"""Render configs into a torch-free CUDA translation unit from their family's templates (`cutlass_ext.families`)."""

from __future__ import annotations

import re
from pathlib import Path
from string import Template

from . import families
from .toolchain import kernels_dir

_LOCAL_INCLUDE = re.compile(r'#include "([^"/]+)"')  # kernels/ headers, not CUTLASS's


def source_files(family: str) -> list[Path]:
    """The files a library of this family is made of: its two templates and every kernels/ header they include,
    transitively (what its cache key covers: editing one family's header rebuilds only that family)."""
    entry = families.get(family)
    pending = [entry.template, entry.instance_template]
    found = []
    while pending:
        path = pending.pop()
        if path in found or not path.is_file():
            continue
        found.append(path)
        pending.extend(kernels_dir() / name for name in _LOCAL_INCLUDE.findall(path.read_text()))
    return sorted(found, key=lambda p: (p.name, str(p)))


def translation_unit_key(config) -> tuple[str, str]:
    """Configs that can share a translation unit have equal keys: one family and one set of defines (FP8's
    programmatic launch, for one)."""
    return config.family, families.of(config).defines(config)


def render_parts(configs: list) -> list[str]:
    """The translation units of one library of `configs`: one, or the family's `parts`, each told which it is."""
    parts = families.of(configs[0]).parts if configs else 1
    source = render_library(configs)
    if parts == 1:
        return [source]
    return [
        f"#define CUTLASS_EXT_LIBRARY_PART {i}\n#define CUTLASS_EXT_LIBRARY_PARTS {parts}\n{source}"
        for i in range(parts)
    ]


def render_library(configs: list) -> str:
    """One translation unit exporting a launcher per config (several per unit amortise header parsing)."""
    if not configs:
        raise ValueError("configs must name at least one kernel config")
    keys = {translation_unit_key(c) for c in configs}
    if len({family for family, _ in keys}) != 1:
        raise ValueError(f"one translation unit holds one family; got {sorted({f for f, _ in keys})}")
    if len(keys) != 1:
        raise ValueError(
            "configs with different defines (FP8 with and without programmatic launch) need separate translation units"
        )
    ((family, defines),) = keys
    entry = families.get(family)
    return Template(entry.template.read_text()).substitute(
        names=", ".join(c.name for c in configs),
        instances="".join(entry.render_instance(c) for c in configs),
        defines=defines,
    )
