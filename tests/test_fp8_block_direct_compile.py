"""The directly written block-scaled FP8 kernel without a GPU: its configs and names, its sweep space, the API's
reading of its variant names, and its libraries compiling for sm_90a with no register spills."""

import json
import os
import re
import shutil
import subprocess

import pytest

from cutlass_ext import build, cache, families
from cutlass_ext.fp8_block.direct import Fp8BlockDirectConfig
from cutlass_ext.fp8_block.variant import config_of
from sweeps.space import load_space

have_nvcc = shutil.which("nvcc") is not None or os.path.exists("/usr/local/cuda/bin/nvcc")


@pytest.mark.parametrize(
    "fields, name",
    [
        ({"tile": (128, 64, 128), "scale_a_major": "m"}, "fp8direct_e4m3e4m3_bf16_128x64x128_am"),
        ({"tile": (64, 16, 128), "cluster": 2}, "fp8direct_e4m3e4m3_bf16_64x16x128_mc2"),
        ({"tile": (128, 128, 128), "cluster": 2, "scale_a_major": "m"}, "fp8direct_e4m3e4m3_bf16_128x128x128_mc2_am"),
        ({"tile": (128, 64, 128), "cluster": 2, "grouped": True}, "fp8direct_e4m3e4m3_bf16_128x64x128_mc2_grouped"),
        (
            {"out_dtype": "fp32", "tile": (128, 32, 128), "k_grouped": True},
            "fp8direct_e4m3e4m3_fp32_128x32x128_kgrouped",
        ),
    ],
)
def test_names_round_trip_through_every_family_lookup(fields, name):
    config = Fp8BlockDirectConfig(**fields)
    assert config.name == name
    assert Fp8BlockDirectConfig.from_name(config.name) == config
    assert families.from_name(config.name) == config
    assert config_of(config.name) == config
    assert config_of("fp8block_e4m3e4m3_bf16_128x128x128_c1x1_coop_sb128").family == "sm90_fp8_block"


@pytest.mark.parametrize(
    "fields, word",
    [
        ({"tile": (256, 128, 128)}, "tile"),
        ({"tile": (64, 96, 128)}, "tile"),
        ({"tile": (64, 64, 64)}, "tile"),
        ({"out_dtype": "fp16"}, "out_dtype"),
        ({"a_dtype": "e5m2"}, "a_dtype"),
        ({"scale_a_major": "n"}, "scale_a_major"),
        ({"cluster": 4}, "cluster"),
        ({"grouped": True, "scale_a_major": "m"}, "K-major"),
        ({"k_grouped": True}, "out_dtype"),
        ({"k_grouped": True, "grouped": True, "out_dtype": "fp32"}, "one form"),
    ],
)
def test_configs_it_does_not_build_are_refused(fields, word):
    with pytest.raises(ValueError, match=word):
        Fp8BlockDirectConfig(**fields)


def test_other_names_are_refused_naming_the_variant():
    with pytest.raises(ValueError, match="variant='fp8_e4m3e4m3_bf16"):
        config_of("fp8_e4m3e4m3_bf16_128x128x128_c1x1_coop_promoted")


def test_sweep_space_holds_every_tile_with_the_scales_quantize_fp8_writes():
    configs = load_space("configs/sm90_fp8_block_direct.yaml")
    assert {c.tile for c in configs} == {(m, n, 128) for m in (64, 128) for n in (16, 32, 64, 128)}
    assert {c.cluster for c in configs} == {1, 2}
    assert len(configs) == 16
    assert {c.mode for c in configs} == {"fp8_block"}
    assert {c.scale_a_major for c in configs} == {"k"}


@pytest.mark.skipif(not have_nvcc and not os.environ.get("CI"), reason="nvcc not installed")
def test_libraries_compile_without_spills(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    configs = [
        Fp8BlockDirectConfig(tile=(64, 16, 128)),
        Fp8BlockDirectConfig(tile=(128, 128, 128), cluster=2, grouped=True),
        Fp8BlockDirectConfig(out_dtype="fp32", tile=(128, 64, 128), k_grouped=True),
    ]
    results = build.build_libraries([(c,) for c in configs], "90a", verbose=False)
    for config, result in zip(configs, results):
        assert result.library is not None, result.error
        usage = json.loads((result.library.parent / "manifest.json").read_text())["resource_usage"]
        spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", usage)
        assert spills and all(stores == loads == "0" for stores, loads in spills), usage
        symbols = subprocess.run(["nm", "-D", "--defined-only", str(result.library)], capture_output=True, text=True)
        form = "fp8_k_grouped" if config.k_grouped else "fp8_grouped" if config.grouped else "fp8_block"
        assert f"{config.name}_{form}_run" in symbols.stdout


def test_grouped_sweep_space_holds_grouped_kernels_only():
    configs = load_space("configs/sm90_fp8_grouped_direct.yaml")
    assert configs and all(c.grouped and c.mode == "fp8_grouped" for c in configs)
    assert {c.cluster for c in configs} == {1, 2}
