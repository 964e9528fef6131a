"""What the families' sweep-space loaders share: a space file's errors and its value lists.

A family's `space` plug-in has `load_space(path, document) -> list[config]`: `document` is the space file's YAML
mapping (sweeps/space.py reads it and checks its top-level keys); errors are `SpaceError`s naming the file, the
key and the bad value.
"""

from __future__ import annotations

import itertools
from pathlib import Path


class SpaceError(ValueError):
    """A sweep or shape file that cannot be used; the message names the file, key and value."""


def positive_ints(path, key, values) -> list[int]:
    if not isinstance(values, list) or not values:
        raise SpaceError(f"{path}: {key}: expected a non-empty list of positive integers, got {values!r}")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SpaceError(f"{path}: {key}: {value!r} is not a positive integer")
    return values


def axes(path: Path, space, tuples: dict, choices: dict, integers: tuple, what: str) -> dict[str, list]:
    """The value lists of a space's fields: `tuples` ({field: dims}, as {m: [...], ...}), `choices`
    ({field: allowed}) and positive `integers`; errors name the file, key and value."""
    if not isinstance(space, dict):
        raise SpaceError(f"{path}: space: expected a mapping of {what} fields to lists, got {space!r}")
    axes: dict[str, list] = {}
    for key, values in space.items():
        if key in tuples:
            dims = tuples[key]
            if not isinstance(values, dict) or set(values) != set(dims):
                raise SpaceError(f"{path}: space.{key}: expected {{{', '.join(f'{d}: [...]' for d in dims)}}}")
            axes[key] = list(itertools.product(*(positive_ints(path, f"space.{key}.{d}", values[d]) for d in dims)))
        elif key in choices:
            if not isinstance(values, list) or not values or any(v not in choices[key] for v in values):
                raise SpaceError(f"{path}: space.{key}: expected a non-empty list of {choices[key]}, got {values!r}")
            axes[key] = values
        elif key in integers:
            axes[key] = positive_ints(path, f"space.{key}", values)
        else:
            fields = sorted([*tuples, *choices, *integers])
            raise SpaceError(f"{path}: space.{key}: not a field of {what}; expected one of {fields}")
    return axes


def modes(path: Path, document: dict, allowed) -> list:
    modes = document.get("modes")
    if not isinstance(modes, list) or not modes or any(mode not in allowed for mode in modes):
        raise SpaceError(f"{path}: modes: expected a non-empty list of {list(allowed)}, got {modes!r}")
    return modes
