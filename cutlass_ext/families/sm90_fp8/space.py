"""The sm90_fp8 family's sweep spaces: Fp8Config fields; modes fp8_fast / fp8_promoted set `accum`.

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
  buffer_epilogue: [false, true] # taken by the same kernels; (true, true) pairs with stage_epilogue are left out
  weights_first: [false, true]   # taken by unswapped kernels (swapped, the weights already load first)
  out_dtype: [bf16]       # a_dtype, b_dtype, out_dtype default to e4m3, e4m3, bf16
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

from .. import spaces
from ..spaces import SpaceError
from . import config as fp8_config

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
    "buffer_epilogue": [False, True],
}
_FP8_TUPLES = {"tile": "mnk", "cluster": "mn"}
_FP8_MODES = {f"fp8_{accum}": accum for accum in fp8_config.ACCUMULATIONS}


def load_space(path: Path, document: dict) -> list:
    modes = spaces.modes(path, document, _FP8_MODES)
    axes = spaces.axes(
        path, document.get("space"), _FP8_TUPLES, _FP8_CHOICES, ("splits", "swizzle", "promotion"), "Fp8Config"
    )
    splits, promotions = axes.pop("splits", [1]), axes.pop("promotion", [1])
    prefetches = axes.pop("l2_prefetch", [0])
    turn_taking = axes.pop("turns", [False])
    stage_epilogues = axes.pop("stage_epilogue", [False])
    buffer_epilogues = axes.pop("buffer_epilogue", [False])
    weights_orders = axes.pop("weights_first", [False])
    names = list(axes)
    configs = []
    for mode in modes:
        for values in itertools.product(*(axes[name] for name in names)):
            fields = dict(zip(names, values), accum=_FP8_MODES[mode])
            # only split-K takes a number of splits, only promoted accumulation a promotion interval, only the
            # persistent scheduler (programmatic launch) an L2 prefetch, only promotion every k-block of a
            # cooperative tile turn-taking warpgroups, only the kernels whose D fits a stage the stage epilogue or
            # the buffer epilogue (one of them), only unswapped kernels (whose weights are B) a weights-first load
            # order
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
                epilogues = [(s, b) for s in stage_epilogues for b in buffer_epilogues if not (s and b)]
                if not epilogues:
                    raise SpaceError(f"{path}: stage_epilogue and buffer_epilogue cannot both be only true")
                for turns, (stage_epilogue, buffer_epilogue) in itertools.product(turn_choices, epilogues):
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
                    if not (stage_epilogue or buffer_epilogue):
                        configs.append(config)
                    elif config.stage_epilogue_fits:
                        configs.append(
                            dataclasses.replace(config, stage_epilogue=stage_epilogue, buffer_epilogue=buffer_epilogue)
                        )
    return configs
