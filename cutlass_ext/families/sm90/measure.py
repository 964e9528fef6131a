"""The sweep's GPU stages for the Hopper corrected family (sm90): the sm80 family's problems, accuracy gate and
peers, with each variant run end to end as `ext.gemm` runs it (the split pass, then the kernel)."""

from __future__ import annotations

from ... import corrected_sm90
from ..sm80.measure import make_problem, peers
from .config import Sm90Config

__all__ = ["kernel_runner", "make_problem", "peers"]


def kernel_runner(config: Sm90Config):
    """(run, prepare): the split pass and the variant's kernel on float32 operands."""

    def run(a, b):
        return corrected_sm90.product(a, b, config.mode, [config.name])

    return run, None
