"""The lowbit family's sweep plug-ins without a GPU: the space file's product, the filter rules and their errors."""

from pathlib import Path

import pytest
import yaml

from cutlass_ext.families.rules import DeviceLimits, apply_rules
from cutlass_ext.families.spaces import SpaceError
from cutlass_ext.lowbit import filters, space
from cutlass_ext.lowbit.kernel import DEFAULT_CONFIG, MODE, LowbitKernelConfig

ROOT = Path(__file__).resolve().parent.parent
H100 = DeviceLimits.for_arch("90a")


def _load(tmp_path, document):
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(document))
    return space.load_space(path, document)


def test_shipped_space_builds_every_config_and_holds_the_default():
    path = ROOT / "configs" / "lowbit.yaml"
    configs = space.load_space(path, yaml.safe_load(path.read_text()))
    assert len(configs) == len(set(configs)) == 3 * 3 * 2 * 2 * 2  # block m, n, k; thread m; window
    assert DEFAULT_CONFIG in configs and all(c.mode == MODE for c in configs)
    assert apply_rules(configs, H100, filters.RULES).survivors == configs
    assert (ROOT / "configs" / yaml.safe_load(path.read_text())["shapes"]).is_file()


def test_rejected_combinations_are_left_out(tmp_path):
    # thread 3 divides neither block; 8x8 threads of 1x1 on a 8x8x8 block is 64 threads: kept
    configs = _load(
        tmp_path,
        {
            "family": "lowbit",
            "modes": [MODE],
            "space": {"block": {"m": [8], "n": [8], "k": [8]}, "thread": {"m": [1, 3], "n": [1]}, "window": [16]},
        },
    )
    assert configs == [LowbitKernelConfig(block=(8, 8, 8), thread=(1, 1), window=16)]


def test_rules_remove_spilling_small_and_oversized_tiles():
    spills = LowbitKernelConfig(block=(64, 64, 16), thread=(8, 8))
    small = LowbitKernelConfig(block=(16, 16, 16), thread=(4, 4))
    large = LowbitKernelConfig(block=(128, 256, 32), thread=(8, 4))
    result = apply_rules([spills, small, large, DEFAULT_CONFIG], H100, filters.RULES)
    assert result.survivors == [DEFAULT_CONFIG]
    assert result.removed == {
        spills: "thread_tile_over_32_outputs",
        small: "under_one_warp",
        large: "static_shared_memory_over_48k",
    }


@pytest.mark.parametrize(
    "document, match",
    [
        ({"family": "lowbit", "modes": ["fp8_fast"], "space": {"window": [8]}}, "modes"),
        ({"family": "lowbit", "modes": [MODE], "space": {"tile": {"m": [64]}}}, "space.tile"),
        ({"family": "lowbit", "modes": [MODE], "space": {"window": [0]}}, "space.window"),
        ({"family": "lowbit", "modes": [MODE], "space": {"block": {"m": [64], "n": [64]}}}, "space.block"),
    ],
)
def test_bad_space_files_name_the_key(tmp_path, document, match):
    with pytest.raises(SpaceError, match=match):
        _load(tmp_path, document)
