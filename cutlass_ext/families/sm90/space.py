"""The sm90 family's sweep spaces (Hopper corrected SGEMM): Sm90Config fields, one sub-space per mode.

family: sm90
modes: [tf32tf32, halfhalf]
space:
  tile: {m: [128], n: [128], k: [16, 32, 64]}
  cluster: {m: [1, 2], n: [1, 2]}
  schedule: [cooperative, pingpong]
  promotion: [1, 2, 4]    # k-tiles between promotions of hi·hi into FP32 registers
  swizzle: [1, 4]
"""

from __future__ import annotations

import itertools
from pathlib import Path

from .. import spaces
from ..spaces import SpaceError
from . import config as sm90_config


def load_space(path: Path, document: dict) -> list:
    modes = spaces.modes(path, document, sm90_config.MODES)
    axes = spaces.axes(
        path,
        document.get("space"),
        {"tile": "mnk", "cluster": "mn"},
        {"schedule": list(sm90_config.SCHEDULES)},
        ("promotion", "swizzle"),
        "Sm90Config",
    )
    names = list(axes)
    configs = []
    for mode in modes:
        for values in itertools.product(*(axes[name] for name in names)):
            try:
                configs.append(sm90_config.Sm90Config(mode=mode, **dict(zip(names, values))))
            except ValueError as error:
                raise SpaceError(f"{path}: {error}") from error
    return configs
