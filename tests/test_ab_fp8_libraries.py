"""The FP8 A/B tool's library lookup: a cache folder can hold one variant built from several kernel sources."""

import dataclasses
import importlib.util
import json
import os
from pathlib import Path

import pytest

from cutlass_ext.fp8_config import Fp8Config

TOOL = Path(__file__).resolve().parent.parent / "python" / "ab_fp8_libraries.py"
NAME = "fp8_e4m3e4m3_bf16_128x128x128_c1x1_coop_promoted_l2pf8"


def load_tool():
    spec = importlib.util.spec_from_file_location("ab_fp8_libraries", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def entry(cache: Path, folder: str, configs: list[dict], built_at: float) -> Path:
    path = cache / "kernels" / "sm_90a" / folder
    path.mkdir(parents=True)
    manifest = path / "manifest.json"
    manifest.write_text(json.dumps({"configs": configs, "library": "lib.so"}))
    os.utime(manifest, (built_at, built_at))
    return path


def test_the_newest_build_of_the_name_is_taken(tmp_path):
    fields = dataclasses.asdict(Fp8Config.from_name(NAME))
    entry(tmp_path, f"{NAME}-old", [fields], 1_000)
    newest = entry(tmp_path, f"{NAME}-new", [fields], 2_000)
    entry(tmp_path, f"{NAME}-older", [fields], 500)
    entry(tmp_path, "tf32tf32_sm80-other", [{"family": "sm80", "tile": [128, 128, 32]}], 3_000)
    assert load_tool().library_of(NAME, str(tmp_path)) == str(newest / "lib.so")


def test_a_name_not_in_the_folder_stops_the_tool(tmp_path):
    entry(tmp_path, f"{NAME}-a", [dataclasses.asdict(Fp8Config.from_name(NAME))], 1_000)
    with pytest.raises(SystemExit, match="fp8_e4m3e4m3_bf16_64x16x128"):
        load_tool().library_of("fp8_e4m3e4m3_bf16_64x16x128_c1x1_pp_promoted_swap", str(tmp_path))
