"""Named rules that remove block-scaled FP8 configs the sweep need not build (`cutlass_ext.families.rules`)."""

from __future__ import annotations

from ..families.rules import Rule

RULES = (
    Rule(
        "swapped_square_tile",
        "swapped 128x128 tiles: the unswapped 128x128 kernel covers the same tiles without transposing the output",
        lambda c, _: c.swap_ab and c.tile[0] == c.tile[1],
    ),
)
