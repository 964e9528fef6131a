"""The sm90_fp8_block family's sweep spaces: Fp8BlockConfig fields of the dense kernels (mode fp8_block), of the
grouped mixture-of-experts kernel (mode fp8_grouped, `grouped: [true]`, shapes [tokens per expert, N, K, experts])
or of its weight-gradient form (mode fp8_k_grouped, `k_grouped: [true]`, shapes [M, N, tokens per expert,
experts]).

family: sm90_fp8_block
modes: [fp8_block]
space:
  tile: {m: [64, 128], n: [32, 64, 128], k: [128]}   # swapped kernels: (weights, tokens, k)
  cluster: {m: [1], n: [1]}
  scheduler: [persistent, streamk, splitk]
  splits: [2, 4]            # taken by scheduler splitk only (the others run unsplit)
  scale_a_major: [k, m]     # taken by unswapped kernels only
  swap_ab: [false, true]
  out_dtype: [bf16]         # a_dtype, b_dtype, out_dtype default to e4m3, e4m3, bf16; scale_n to 128
  overlapped: [false, true] # promotion overlapped with the next k-block's wgmmas (dense kernels only)
  programmatic: [false, true]  # programmatic dependent launch (dense, persistent)
  l2_prefetch: [0, 8]       # k-blocks of weights asked of L2 before the programmatic wait

The schedule follows the tile: m = 64 runs ping-pong warpgroups, m = 128 and 256 cooperative ones. Combinations that
Fp8BlockConfig rejects (a weights side that is not a multiple of 128, a ping-pong kernel under stream-K, a swapped
one with M-major scales) are left out of the product.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from ..families import spaces
from .config import FP8_DTYPES, L2_PREFETCHES, OUT_DTYPES, SCALE_A_MAJORS, SCHEDULERS, Fp8BlockConfig

MODES = ("fp8_block", "fp8_grouped", "fp8_k_grouped")
_KINDS = {"fp8_block": "dense", "fp8_grouped": "grouped", "fp8_k_grouped": "weight-gradient (k_grouped)"}
_CHOICES = {
    "a_dtype": list(FP8_DTYPES),
    "b_dtype": list(FP8_DTYPES),
    "out_dtype": list(OUT_DTYPES),
    "scheduler": list(SCHEDULERS),
    "scale_a_major": list(SCALE_A_MAJORS),
    "swap_ab": [False, True],
    "grouped": [False, True],
    "k_grouped": [False, True],
    "overlapped": [False, True],
    "programmatic": [False, True],
    "l2_prefetch": list(L2_PREFETCHES),
}


def load_space(path: Path, document: dict) -> list[Fp8BlockConfig]:
    modes = spaces.modes(path, document, MODES)
    if len(modes) != 1:  # its shapes are dense or grouped
        raise spaces.SpaceError(f"{path}: modes: one of {list(MODES)} per space; got {modes!r}")
    (mode,) = modes
    axes = spaces.axes(
        path, document.get("space"), {"tile": "mnk", "cluster": "mn"}, _CHOICES, ("splits", "scale_n"), "Fp8BlockConfig"
    )
    splits = axes.pop("splits", [1])
    names = list(axes)
    configs = []
    for values in itertools.product(*(axes[name] for name in names)):
        fields = dict(zip(names, values))
        fields["schedule"] = "pingpong" if fields.get("tile", (128,))[0] == 64 else "cooperative"
        split_choices = [s for s in splits if s > 1] if fields.get("scheduler") == "splitk" else [1]
        for split in split_choices:
            try:
                config = Fp8BlockConfig(**fields, splits=split)
            except ValueError:
                continue  # not a kernel: see the module docstring
            if config.mode != mode:
                raise spaces.SpaceError(f"{path}: modes [{mode}] takes {_KINDS[mode]} kernels only; got {config.name}")
            configs.append(config)
    return list(dict.fromkeys(configs))
