"""The lowbit family's sweep spaces: LowbitKernelConfig fields, the forward's tiles and the backward's window.

family: lowbit
modes: [lowbit]          # the family's one mode: forward + backward of the same variant, timed together
space:
  block: {m: [32, 64, 128], n: [32, 64, 128], k: [16, 32]}   # a CTA's output tile and k-tile (forward)
  thread: {m: [4, 8], n: [4]}   # outputs per thread, their chains run side by side
  window: [8, 16]               # k per gradient thread (backward)

Combinations that LowbitKernelConfig rejects (a thread tile that does not divide the block, more than 1024
threads, k-tiles the threads cannot load evenly) are left out of the product; the family's filters remove the ones
that would spill or overflow shared memory.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from ..families import spaces
from .kernel import MODE, LowbitKernelConfig


def load_space(path: Path, document: dict) -> list[LowbitKernelConfig]:
    spaces.modes(path, document, (MODE,))
    axes = spaces.axes(
        path, document.get("space"), {"block": "mnk", "thread": "mn"}, {}, ("window",), "LowbitKernelConfig"
    )
    names = list(axes)
    configs = []
    for values in itertools.product(*(axes[name] for name in names)):
        try:
            configs.append(LowbitKernelConfig(**dict(zip(names, values))))
        except ValueError:
            continue  # not a kernel: see the module docstring
    return configs
