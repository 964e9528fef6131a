"""KernelConfig: derived names, parsing them back, stable fingerprints, clear errors."""

import subprocess
import sys

import pytest

from cutlass_ext.families.sm80.config import KernelConfig, default_configs


def test_name_is_derived_from_the_fields():
    config = KernelConfig(mode="tf32", threadblock=(128, 64, 32), warp=(64, 32, 32), stages=4, alignment=1)
    assert config.name == "tf32_sm80_128x64x32_64x32x32_s4_a1"
    assert KernelConfig("tf32tf32", layout_a="col").name.endswith("_s3_a4_cr")
    assert KernelConfig("halfhalf", layout_b="col", operands="packed").name.endswith("_s3_a4_rc_packed")
    assert KernelConfig("halfhalf", operands="packed", swizzle=8).name.endswith("_s3_a4_w8_packed")


def test_halfhalf_dispatches_packed_operands_by_default():
    assert all(c.operands == "packed" for c in default_configs("halfhalf", "col", "row"))
    assert all(c.operands == "fp32" for c in default_configs("halfhalf", operands="fp32"))


@pytest.mark.parametrize(
    "config",
    default_configs("tf32")
    + default_configs("halfhalf", "row", "col")
    + [KernelConfig("tf32", "sm80", (64, 256, 16), (32, 64, 16), 5, 2)]
    + [KernelConfig("halfhalf", layout_a="col", operands="packed", swizzle=4)],
)
def test_from_name_inverts_name(config):
    assert KernelConfig.from_name(config.name) == config


@pytest.mark.parametrize(
    "name",
    [
        "tf32",
        "tf32_sm80_128x128x32_64x64x32_s3",
        "tf32_sm80_0128x128x32_64x64x32_s3_a4",
        "tf32_sm80_128x128x32_64x64x32_s3_a4_rr",
        "tf32_sm80_128x128x32_64x64x32_s3_a4_packed",
        "tf32_sm80_128x128x32_64x64x32_s3_a4_w1",
    ],
)
def test_from_name_rejects_other_strings(name):
    with pytest.raises(ValueError):
        KernelConfig.from_name(name)


def test_fingerprint_is_stable_across_processes_and_differs_per_field():
    config = KernelConfig(mode="tf32")
    other_process = subprocess.run(
        [
            sys.executable,
            "-c",
            "from cutlass_ext.families.sm80.config import KernelConfig; print(KernelConfig(mode='tf32').fingerprint())",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert other_process == config.fingerprint()
    variants = [
        KernelConfig(mode="tf32", stages=4),
        KernelConfig(mode="tf32", alignment=1),
        KernelConfig(mode="tf32", warp=(32, 64, 32)),
        KernelConfig(mode="tf32", swizzle=8),
    ]
    assert len({config.fingerprint(), *(v.fingerprint() for v in variants)}) == 5


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"mode": "fp64"}, "mode="),
        ({"mode": "tf32", "family": "sm70"}, "family="),
        ({"mode": "tf32", "threadblock": (128, 128)}, "threadblock="),
        ({"mode": "tf32", "alignment": 3}, "alignment="),
        ({"mode": "halfhalf", "operands": "fp16"}, "operands="),
        ({"mode": "tf32tf32", "operands": "packed"}, "operands="),
        ({"mode": "tf32", "swizzle": 3}, "swizzle="),
    ],
)
def test_invalid_fields_are_named(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        KernelConfig(**kwargs)
