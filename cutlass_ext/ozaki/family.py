"""The ozaki family registered with `cutlass_ext.families`: Ozaki-II FP32 GEMM on INT8 Tensor Cores (sm_90a)."""

from pathlib import Path
from string import Template

from ..families import Family
from .config import OzakiConfig

TEMPLATE = Path(__file__).resolve().parent / "ozaki_gemm.cu.in"


def render_instance(config: OzakiConfig) -> str:
    """The variant's launchers in the family's translation unit (ozaki_gemm_instance.in)."""
    (tile_m, tile_n, tile_k), (cluster_m, cluster_n) = config.tile, config.cluster
    return Template(TEMPLATE.with_name("ozaki_gemm_instance.in").read_text()).substitute(
        name=config.name,
        moduli=config.moduli,
        shift_budget=config.shift_budget,
        tile_m=tile_m,
        tile_n=tile_n,
        tile_k=tile_k,
        cluster_m=cluster_m,
        cluster_n=cluster_n,
        swizzle=config.swizzle,
        product="int8_t" if config.output == "residues" else "int32_t",
        residue_output="true" if config.output == "residues" else "false",
    )


FAMILY = Family(name="ozaki", config=OzakiConfig, template=TEMPLATE, render_instance=render_instance, archs=("90a",))
