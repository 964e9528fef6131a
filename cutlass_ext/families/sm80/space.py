"""The sm80 family's sweep spaces: KernelConfig fields, one sub-space per mode.

family: sm80
modes: [halfhalf, tf32tf32]  # one sub-space per mode
space:                       # every value is a list; the sweep takes their Cartesian product
  threadblock: {m: [64, 128], n: [64, 128], k: [32]}   # tuple fields as {m, n, k}
  warp: {m: [32, 64], n: [32, 64], k: [32]}
  stages: [3, 4]
  alignment: [4]
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

from ..spaces import SpaceError, positive_ints
from .config import DEFAULT_OPERANDS, INSTRUCTION_SHAPES, LAYOUTS, OPERANDS, KernelConfig

_TUPLE_FIELDS = ("threadblock", "warp")
_CHOICE_FIELDS = {"layout_a": LAYOUTS, "layout_b": LAYOUTS, "operands": OPERANDS}
_SCALAR_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(KernelConfig)
    if f.name not in _TUPLE_FIELDS + ("mode", "family") + tuple(_CHOICE_FIELDS)
)


def load_space(path: Path, document: dict) -> list[KernelConfig]:
    """Every KernelConfig of the space's Cartesian product, mode by mode, in a stable order."""
    family = document["family"]
    modes = document.get("modes")
    if not isinstance(modes, list) or not modes:
        raise SpaceError(f"{path}: modes: expected a non-empty list, got {modes!r}")
    for mode in modes:
        if mode not in INSTRUCTION_SHAPES:
            raise SpaceError(f"{path}: modes: {mode!r} is not one of {sorted(INSTRUCTION_SHAPES)}")
    space = document.get("space")
    if not isinstance(space, dict):
        raise SpaceError(f"{path}: space: expected a mapping of KernelConfig fields to lists, got {space!r}")

    axes: dict[str, list] = {}
    for key, values in space.items():
        if key in _TUPLE_FIELDS:
            if not isinstance(values, dict) or set(values) != {"m", "n", "k"}:
                raise SpaceError(f"{path}: space.{key}: expected {{m: [...], n: [...], k: [...]}}, got {values!r}")
            dims = [positive_ints(path, f"space.{key}.{d}", values[d]) for d in "mnk"]
            axes[key] = list(itertools.product(*dims))
        elif key in _SCALAR_FIELDS:
            axes[key] = positive_ints(path, f"space.{key}", values)
        elif key in _CHOICE_FIELDS:
            if not isinstance(values, list) or not values or any(v not in _CHOICE_FIELDS[key] for v in values):
                raise SpaceError(f"{path}: space.{key}: expected a non-empty list of {list(_CHOICE_FIELDS[key])}")
            axes[key] = values
        else:
            fields = sorted(_TUPLE_FIELDS + _SCALAR_FIELDS + tuple(_CHOICE_FIELDS))
            raise SpaceError(f"{path}: space.{key}: not a KernelConfig field; expected one of {fields}")

    names = list(axes)
    configs = []
    for mode in modes:
        # a mode's dispatch default (halfhalf: packed operands) unless the space sweeps the field
        defaults = {} if "operands" in axes else {"operands": DEFAULT_OPERANDS.get(mode, "fp32")}
        for values in itertools.product(*(axes[name] for name in names)):
            try:
                configs.append(KernelConfig(mode=mode, family=family, **defaults, **dict(zip(names, values))))
            except ValueError as error:
                raise SpaceError(f"{path}: {error}") from error
    return configs
