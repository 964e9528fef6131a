"""Load sweep spaces and shape sets from YAML into `KernelConfig`s and (m, n, k, batch) tuples.

A space file:

    description: free text
    family: sm80                 # KernelConfig.family
    modes: [halfhalf, tf32tf32]  # one sub-space per mode
    space:                       # every value is a list; the sweep takes their Cartesian product
      threadblock: {m: [64, 128], n: [64, 128], k: [32]}   # tuple fields as {m, n, k}
      warp: {m: [32, 64], n: [32, 64], k: [32]}
      stages: [3, 4]
      alignment: [4]

A Hopper corrected-SGEMM space (family sm90, SplitConfig fields):

    family: sm90
    modes: [tf32tf32, halfhalf]
    space:
      tile: {m: [128], n: [128], k: [16, 32, 64]}
      cluster: {m: [1, 2], n: [1, 2]}
      schedule: [cooperative, pingpong]
      promotion: [1, 2, 4]    # k-tiles between promotions of hi·hi into FP32 registers
      swizzle: [1, 4]

An FP8 space (family sm90_fp8, Fp8Config fields; modes fp8_fast / fp8_promoted set `accum`):

    family: sm90_fp8
    modes: [fp8_fast, fp8_promoted]
    space:
      tile: {m: [64, 128], n: [128, 256], k: [128]}
      cluster: {m: [1, 2], n: [1]}
      schedule: [cooperative, pingpong]
      scheduler: [persistent, streamk, splitk]
      splits: [2, 4]          # taken by scheduler splitk only (the others run unsplit)
      swizzle: [1, 4]
      promotion: [1, 2]       # taken by fp8_promoted only
      stage_epilogue: [false, true]  # taken by the kernels whose D fits a mainloop stage (Fp8Config)
      weights_first: [false, true]   # taken by unswapped kernels (swapped, the weights already load first)
      out_dtype: [bf16]       # a_dtype, b_dtype, out_dtype default to e4m3, e4m3, bf16

A shape file: `shapes: [[m, n, k], [m, n, k, batch], ...]`. Errors name the file, the key and the bad value.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import yaml

from cutlass_ext.families.sm80.config import (
    DEFAULT_OPERANDS,
    FAMILIES,
    INSTRUCTION_SHAPES,
    LAYOUTS,
    OPERANDS,
    KernelConfig,
)
from cutlass_ext.families.sm90 import config as split_config
from cutlass_ext.families.sm90_fp8 import config as fp8_config

_TUPLE_FIELDS = ("threadblock", "warp")
_CHOICE_FIELDS = {"layout_a": LAYOUTS, "layout_b": LAYOUTS, "operands": OPERANDS}
_SCALAR_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(KernelConfig)
    if f.name not in _TUPLE_FIELDS + ("mode", "family") + tuple(_CHOICE_FIELDS)
)
_TOP_LEVEL_KEYS = {"description", "family", "modes", "space", "shapes"}


class SpaceError(ValueError):
    """A sweep or shape file that cannot be used; the message names the file, key and value."""


def _read(path: Path) -> dict:
    try:
        document = yaml.safe_load(Path(path).read_text())
    except OSError as error:
        raise SpaceError(f"{path}: cannot read: {error.strerror}") from error
    except yaml.YAMLError as error:
        raise SpaceError(f"{path}: not valid YAML: {error}") from error
    if not isinstance(document, dict):
        raise SpaceError(f"{path}: expected a mapping at the top level, got {type(document).__name__}")
    return document


def _positive_ints(path, key, values) -> list[int]:
    if not isinstance(values, list) or not values:
        raise SpaceError(f"{path}: {key}: expected a non-empty list of positive integers, got {values!r}")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SpaceError(f"{path}: {key}: {value!r} is not a positive integer")
    return values


def load_space(path: str | Path) -> list[KernelConfig]:
    """Every KernelConfig of the space's Cartesian product, mode by mode, in a stable order."""
    path = Path(path)
    document = _read(path)
    unknown = set(document) - _TOP_LEVEL_KEYS
    if unknown:
        raise SpaceError(f"{path}: unknown key(s) {sorted(unknown)}; expected {sorted(_TOP_LEVEL_KEYS)}")
    family = document.get("family")
    if family == fp8_config.FAMILY:
        return _load_fp8_space(path, document)
    if family == split_config.FAMILY:
        return _load_split_space(path, document)
    if family not in FAMILIES:
        known = list(FAMILIES) + [fp8_config.FAMILY, split_config.FAMILY]
        raise SpaceError(f"{path}: family: {family!r} is not one of {known}")
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
            dims = [_positive_ints(path, f"space.{key}.{d}", values[d]) for d in "mnk"]
            axes[key] = list(itertools.product(*dims))
        elif key in _SCALAR_FIELDS:
            axes[key] = _positive_ints(path, f"space.{key}", values)
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


_FP8_CHOICES = {
    "a_dtype": list(fp8_config.FP8_DTYPES),
    "b_dtype": list(fp8_config.FP8_DTYPES),
    "out_dtype": list(fp8_config.OUT_DTYPES),
    "schedule": list(fp8_config.SCHEDULES),
    "scheduler": list(fp8_config.SCHEDULERS),
    "swap_ab": [False, True],
    "turns": [False, True],
    "stage_epilogue": [False, True],
    "raster": list(fp8_config.RASTERS),
    "l2_prefetch": list(fp8_config.L2_PREFETCHES),
    "weights_first": [False, True],
}
_FP8_TUPLES = {"tile": "mnk", "cluster": "mn"}
_FP8_MODES = {f"fp8_{accum}": accum for accum in fp8_config.ACCUMULATIONS}


def _axes(path: Path, space, tuples: dict, choices: dict, integers: tuple, what: str) -> dict[str, list]:
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
            axes[key] = list(itertools.product(*(_positive_ints(path, f"space.{key}.{d}", values[d]) for d in dims)))
        elif key in choices:
            if not isinstance(values, list) or not values or any(v not in choices[key] for v in values):
                raise SpaceError(f"{path}: space.{key}: expected a non-empty list of {choices[key]}, got {values!r}")
            axes[key] = values
        elif key in integers:
            axes[key] = _positive_ints(path, f"space.{key}", values)
        else:
            fields = sorted([*tuples, *choices, *integers])
            raise SpaceError(f"{path}: space.{key}: not a field of {what}; expected one of {fields}")
    return axes


def _modes(path: Path, document: dict, allowed) -> list:
    modes = document.get("modes")
    if not isinstance(modes, list) or not modes or any(mode not in allowed for mode in modes):
        raise SpaceError(f"{path}: modes: expected a non-empty list of {list(allowed)}, got {modes!r}")
    return modes


def _load_fp8_space(path: Path, document: dict) -> list:
    modes = _modes(path, document, _FP8_MODES)
    axes = _axes(
        path, document.get("space"), _FP8_TUPLES, _FP8_CHOICES, ("splits", "swizzle", "promotion"), "Fp8Config"
    )
    splits, promotions = axes.pop("splits", [1]), axes.pop("promotion", [1])
    prefetches = axes.pop("l2_prefetch", [0])
    turn_taking = axes.pop("turns", [False])
    stage_epilogues = axes.pop("stage_epilogue", [False])
    weights_orders = axes.pop("weights_first", [False])
    names = list(axes)
    configs = []
    for mode in modes:
        for values in itertools.product(*(axes[name] for name in names)):
            fields = dict(zip(names, values), accum=_FP8_MODES[mode])
            # only split-K takes a number of splits, only promoted accumulation a promotion interval, only the
            # persistent scheduler (programmatic launch) an L2 prefetch, only promotion every k-block of a
            # cooperative tile turn-taking warpgroups, only the kernels whose D fits a stage the stage epilogue, only
            # unswapped kernels (whose weights are B) a weights-first load order
            persistent = fields.get("scheduler", "persistent") == "persistent"
            split_choices = [s for s in splits if s > 1] if fields.get("scheduler") == "splitk" else [1]
            promotion_choices = promotions if fields["accum"] == "promoted" else [1]
            prefetch_choices = prefetches if persistent else [0]
            order_choices = [False] if fields.get("swap_ab", False) else weights_orders
            for split, promotion, prefetch, weights_first in itertools.product(
                split_choices, promotion_choices, prefetch_choices, order_choices
            ):
                takes_turns = (fields["accum"], promotion, fields.get("schedule", "cooperative")) == (
                    "promoted",
                    1,
                    "cooperative",
                )
                turn_choices = turn_taking if takes_turns else [False]
                for turns, stage_epilogue in itertools.product(turn_choices, stage_epilogues):
                    try:
                        config = fp8_config.Fp8Config(
                            **fields,
                            splits=split,
                            promotion=promotion,
                            l2_prefetch=prefetch,
                            turns=turns,
                            weights_first=weights_first,
                        )
                    except ValueError as error:
                        raise SpaceError(f"{path}: {error}") from error
                    if not stage_epilogue:
                        configs.append(config)
                    elif config.stage_epilogue_fits:
                        configs.append(dataclasses.replace(config, stage_epilogue=True))
    return configs


def _load_split_space(path: Path, document: dict) -> list:
    modes = _modes(path, document, split_config.MODES)
    axes = _axes(
        path,
        document.get("space"),
        {"tile": "mnk", "cluster": "mn"},
        {"schedule": list(split_config.SCHEDULES)},
        ("promotion", "swizzle"),
        "SplitConfig",
    )
    names = list(axes)
    configs = []
    for mode in modes:
        for values in itertools.product(*(axes[name] for name in names)):
            try:
                configs.append(split_config.Sm90Config(mode=mode, **dict(zip(names, values))))
            except ValueError as error:
                raise SpaceError(f"{path}: {error}") from error
    return configs


def family_of(path: str | Path) -> str:
    """The `family` a space file names (checked by load_space)."""
    return _read(Path(path)).get("family")


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
    """The (m, n, k, batch) problems of a shape file; batch defaults to 1."""
    path = Path(path)
    document = _read(path)
    shapes = document.get("shapes")
    if not isinstance(shapes, list) or not shapes:
        raise SpaceError(f"{path}: shapes: expected a non-empty list of [m, n, k] or [m, n, k, batch]")
    problems = []
    for index, shape in enumerate(shapes):
        if not isinstance(shape, list) or len(shape) not in (3, 4):
            raise SpaceError(f"{path}: shapes[{index}]: expected [m, n, k] or [m, n, k, batch], got {shape!r}")
        values = _positive_ints(path, f"shapes[{index}]", shape)
        problems.append(tuple(values) if len(values) == 4 else (*values, 1))
    return problems
