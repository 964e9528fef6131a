"""Family configs: derived names, parsing them back (every shipped name), stable fingerprints, clear errors."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from cutlass_ext import families
from cutlass_ext.families.sm80.config import KernelConfig, default_configs
from cutlass_ext.families.sm90.config import Sm90Config
from cutlass_ext.families.sm90_fp8.config import Fp8Config


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


def test_every_shipped_variant_name_parses_back_to_itself():
    """The names in the shipped tuned tables and the results' sweep tables follow their family's grammar: parsed
    and printed again, each is itself (the grammar is declared once; tables written before it keep working)."""
    root = Path(__file__).resolve().parents[1]
    tables = sorted((root / "cutlass_ext" / "tuned").glob("*.csv")) + sorted(
        (root / "sweeps" / "results").rglob("*.csv")
    )
    names = set()
    for table in tables:
        with open(table, newline="") as handle:
            rows = csv.DictReader(handle)
            if rows.fieldnames and {"name", "family"} <= set(rows.fieldnames):
                names.update(row["name"] for row in rows if row["family"] in families.names())
            elif rows.fieldnames and "name" in rows.fieldnames and "mode" in rows.fieldnames:  # tuned tables
                names.update(row["name"] for row in rows)
    assert len(names) > 100
    assert sorted(name for name in names if families.from_name(name).name != name) == []


@pytest.mark.parametrize(
    ("grammar_config", "name"),
    [
        (Sm90Config, "tf32tf32_sm90_128x128x32_c2x1_pp_p2_w4"),
        (Fp8Config, "fp8_e5m2e4m3_fp32_128x32x128_c1x1_coop_promoted_p2_splitk2_w4_rn_swap"),
        (Fp8Config, "fp8_e4m3e4m3_fp32_128x192x128_c1x1_coop_promoted_turns_dynamic_w4"),
        (Fp8Config, "fp8_e4m3e4m3_bf16_128x128x128_c2x1_coop_promoted_w8_rm_l2pf8_se_wf"),
        (KernelConfig, "halfhalf_sm80_128x64x32_32x32x32_s4_a1_w2_cc_packed"),
    ],
)
def test_optional_name_parts_round_trip(grammar_config, name):
    config = grammar_config.from_name(name)
    assert config.name == name and grammar_config.is_name(name)
    assert families.from_name(name) == config
