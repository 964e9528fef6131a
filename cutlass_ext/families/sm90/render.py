"""One sm90 variant's launchers, rendered from sm90_corrected_gemm_instance.in."""

from __future__ import annotations

from pathlib import Path
from string import Template

from .config import Sm90Config

TEMPLATE = Path(__file__).with_name("sm90_corrected_gemm.cu.in")
_INSTANCE = Template(TEMPLATE.with_name("sm90_corrected_gemm_instance.in").read_text())
_MODES = {"tf32tf32": "SplitTf32Tf32", "halfhalf": "SplitHalfHalf"}
_SCHEDULES = {"cooperative": "SplitCooperative", "pingpong": "SplitPingpong"}


def render_instance(config: Sm90Config) -> str:
    (tile_m, tile_n, tile_k), (cluster_m, cluster_n) = config.tile, config.cluster
    return _INSTANCE.substitute(
        name=config.name,
        mode_tag=_MODES[config.mode],
        tile_m=tile_m,
        tile_n=tile_n,
        tile_k=tile_k,
        cluster_m=cluster_m,
        cluster_n=cluster_n,
        schedule=_SCHEDULES[config.schedule],
        swizzle=config.swizzle,
        promotion=config.promotion,
        bias="true" if config.epilogue == "bias" else "false",
    )
