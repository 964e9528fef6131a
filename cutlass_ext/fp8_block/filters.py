"""Named rules that remove block-scaled FP8 configs the sweep need not build (`cutlass_ext.families.rules`)."""

from __future__ import annotations

from ..families.rules import Rule

RULES = (
    Rule(
        "swapped_square_tile",
        "swapped 128x128 tiles: the unswapped 128x128 kernel covers the same tiles without transposing the output",
        lambda c, _: c.swap_ab and c.tile[:2] == (128, 128),
    ),
    Rule(
        "overlapped_per_row_weight_scales",
        "overlapped promotion with 1x128 weight scales: two sets of per-column scale registers beside three "
        "accumulator fragments spill (478 bytes at 128x128)",
        lambda c, _: c.overlapped and c.scale_n == 1,
    ),
    Rule(
        "programmatic_cooperative",
        "programmatic launch of cooperative kernels: 4% faster one GEMM after another, but 13-23% slower in a "
        "block-scaled layer, where the quantizer before lets them launch at its start (ping-pong ones gain 2-26% "
        "there)",
        lambda c, _: c.programmatic and c.schedule == "cooperative",
    ),
)
