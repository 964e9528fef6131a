"""argparse types shared by the package's and the sweep's command lines: each refuses a bad value with a message
naming it, before anything builds or runs."""

from __future__ import annotations

import argparse
import math
import re

from .device import SHARED_MEMORY_BYTES


def integer(least: int):
    """An integer of at least `least` (counts: jobs, repeats, limits)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < least:
            kind = "a positive integer" if least == 1 else f"an integer >= {least}"
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}")
        return value

    return parse


def seconds(least: float, meaning: str = ""):
    """A finite number of seconds of at least `least`; `meaning` says why the bound is what it is."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not math.isfinite(value) or value < least:
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds >= {least:g}{meaning}")
        return value

    return parse


positive_int = integer(1)
non_negative_int = integer(0)


def known_arch(text: str) -> str:
    """An arch the package knows (device.SHARED_MEMORY_BYTES: 80, 86, 87, 89, 90, 90a), spelled as that table
    spells it; `sm90a` or `90A` are refused with the spelling to use."""
    if text in SHARED_MEMORY_BYTES:
        return text
    spelled = text.strip().lower().removeprefix("sm").removeprefix("_")
    hint = f" (write {spelled})" if spelled in SHARED_MEMORY_BYTES else ""
    raise argparse.ArgumentTypeError(f"{text!r} is not one of {sorted(SHARED_MEMORY_BYTES)}{hint}")


def target_arch(text: str) -> str:
    """Any compute-capability arch nvcc takes (`80`, `90a`, `100a`: the build's, which may target GPUs newer than
    the table above); `sm90a` or `90A` are refused with the spelling to use."""
    if re.fullmatch(r"[1-9][0-9]+a?", text):
        return text
    spelled = text.strip().lower().removeprefix("sm").removeprefix("_")
    hint = f" (write {spelled})" if re.fullmatch(r"[1-9][0-9]+a?", spelled) else ""
    raise argparse.ArgumentTypeError(f"{text!r} is not an arch such as 80 or 90a{hint}")
