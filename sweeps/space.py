"""Load sweep spaces and shape sets from YAML: a space into its family's configs (the family's `space` plug-in,
cutlass_ext/families/<family>/space.py, documents its fields), a shape file into (m, n, k, batch) tuples.

A space file:

    description: free text
    family: sm80                 # a registered kernel family (cutlass_ext.families)
    modes: [halfhalf, tf32tf32]  # one sub-space per mode
    space:                       # every value is a list; the sweep takes their Cartesian product
      threadblock: {m: [64, 128], n: [64, 128], k: [32]}
    shapes: shapes_square.yaml   # optional: the shape file beside it

A shape file: `shapes: [[m, n, k], [m, n, k, batch], ...]` (and an optional `description`), each value a positive
integer of at most 2**31 - 1. Errors name the file, the key and the bad value.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from cutlass_ext import families
from cutlass_ext.families.spaces import SpaceError, positive_ints

_TOP_LEVEL_KEYS = {"description", "family", "modes", "space", "shapes"}
_SHAPE_FILE_KEYS = {"description", "shapes"}
MAX_DIMENSION = 2**31 - 1  # the kernels index a dimension with a 32-bit int


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping (PyYAML keeps the last one silently: a space with
    `stages: [3]` and later `stages: [4]` would sweep only the second)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: merged keys may be overridden
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in seen
            except TypeError:  # a list or mapping as a key: the constructor's own error names it
                break
            if repeated:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def _read(path: Path) -> dict:
    try:
        document = yaml.load(Path(path).read_text(), Loader=_UniqueKeyLoader)
    except OSError as error:
        raise SpaceError(f"{path}: cannot read: {error.strerror}") from error
    except UnicodeDecodeError as error:
        raise SpaceError(f"{path}: cannot read: not UTF-8 text ({error.reason} at byte {error.start})") from error
    except yaml.YAMLError as error:
        raise SpaceError(f"{path}: not valid YAML: {error}") from error
    if not isinstance(document, dict):
        raise SpaceError(f"{path}: expected a mapping at the top level, got {type(document).__name__}")
    return document


def load_space(path: str | Path) -> list:
    """Every config of the space's Cartesian product, mode by mode, in a stable order, each once."""
    path = Path(path)
    document = _read(path)
    unknown = set(document) - _TOP_LEVEL_KEYS
    if unknown:
        raise SpaceError(f"{path}: unknown key(s) {sorted(unknown)}; expected {sorted(_TOP_LEVEL_KEYS)}")
    family = document.get("family")
    with_spaces = [f.name for f in families.all_families() if f.space is not None]
    if family not in with_spaces:
        raise SpaceError(f"{path}: family: {family!r} is not one of {with_spaces}")
    # a value listed twice in a field gives the same variant twice: built and measured once
    configs = list(dict.fromkeys(families.get(family).plugin("space").load_space(path, document)))
    if not configs:
        raise SpaceError(f"{path}: space: no combination of its values is a {family} kernel (each was rejected)")
    return configs


def family_of(path: str | Path) -> str:
    """The `family` a space file names (checked by load_space)."""
    return _read(Path(path)).get("family")


def modes_of(path: str | Path) -> list:
    """The `modes` a space file names (checked by load_space)."""
    return list(_read(Path(path)).get("modes") or [])


def default_shapes(path: str | Path) -> Path | None:
    """The shape file a space names with `shapes: FILE` (relative to the space file), if it names one."""
    path = Path(path)
    named = _read(path).get("shapes")
    if named is None:
        return None
    if not isinstance(named, str) or not (path.parent / named).is_file():
        raise SpaceError(f"{path}: shapes: {named!r} is not a shape file beside the space file")
    return path.parent / named


def load_shapes(path: str | Path) -> list[tuple[int, int, int, int]]:
    """The (m, n, k, batch) problems of a shape file, each once; batch defaults to 1."""
    path = Path(path)
    document = _read(path)
    unknown = set(document) - _SHAPE_FILE_KEYS
    if unknown:
        raise SpaceError(f"{path}: unknown key(s) {sorted(unknown)}; expected {sorted(_SHAPE_FILE_KEYS)}")
    shapes = document.get("shapes")
    if not isinstance(shapes, list) or not shapes:
        raise SpaceError(f"{path}: shapes: expected a non-empty list of [m, n, k] or [m, n, k, batch]")
    problems = []
    for index, shape in enumerate(shapes):
        if not isinstance(shape, list) or len(shape) not in (3, 4):
            raise SpaceError(f"{path}: shapes[{index}]: expected [m, n, k] or [m, n, k, batch], got {shape!r}")
        values = positive_ints(path, f"shapes[{index}]", shape)
        for value in values:
            if value > MAX_DIMENSION:
                raise SpaceError(f"{path}: shapes[{index}]: {value} is over the largest dimension, 2**31 - 1")
        problems.append(tuple(values) if len(values) == 4 else (*values, 1))
    return list(dict.fromkeys(problems))  # a shape listed twice is measured once
