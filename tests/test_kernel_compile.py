"""nvcc compile check of the generated translation units, no GPU needed (CI's check of the kernels)."""

import dataclasses
import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from cutlass_ext import build, cache
from cutlass_ext.families.sm80.config import CUTLASS_3XTF32, KernelConfig, default_configs
from cutlass_ext.families.sm90.config import DEFAULTS as DEFAULT_SPLIT
from cutlass_ext.families.sm90_fp8 import filters as filters_fp8
from cutlass_ext.families.sm90_fp8.config import DEFAULT_FP8, Fp8Config
from cutlass_ext.gemm import KERNEL_MODES

have_nvcc = shutil.which("nvcc") is not None or os.path.exists("/usr/local/cuda/bin/nvcc")
# CI must not pass by skipping the one check that compiles kernels.
pytestmark = pytest.mark.skipif(not have_nvcc and not os.environ.get("CI"), reason="nvcc not installed")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    previous = os.environ.get(cache.CACHE_ENV)
    os.environ[cache.CACHE_ENV] = str(tmp_path_factory.mktemp("compile_cache"))
    yield
    if previous is None:
        del os.environ[cache.CACHE_ENV]
    else:
        os.environ[cache.CACHE_ENV] = previous


SM80_DEFAULT_GROUPS = [
    (default_configs("tf32tf32")[0], default_configs("tf32")[0]),
    (default_configs("halfhalf")[0], default_configs("markidis")[0]),
]


@pytest.fixture(scope="module")
def family_defaults(cache_dir):
    """CI's compile check, one wave for the three families (CUTLASS 3.x builds take minutes each): the mma.sync
    family's defaults for sm80 and the FP8 and corrected Hopper defaults for sm_90a, both builds started at once."""
    with ThreadPoolExecutor(2) as pool:
        sm80 = pool.submit(build.build_libraries, SM80_DEFAULT_GROUPS, "80", verbose=False)
        hopper = pool.submit(
            build.build_libraries, [(DEFAULT_FP8,), tuple(DEFAULT_SPLIT.values())], "90a", verbose=False
        )
        fp8, split = hopper.result()
        return {"sm80": sm80.result(), "fp8": fp8, "sm90": split}


def _exported(result) -> str:
    return subprocess.run(
        ["nm", "-D", "--defined-only", str(result.library)], capture_output=True, text=True, check=True
    ).stdout


def test_each_modes_default_kernel_compiles_for_sm80(family_defaults):
    """CI's check of the mma.sync family: each mode's vectorized default (halfhalf's packed one) in two libraries,
    one per core, with the operand passes every library exports; no spills."""
    for result in family_defaults["sm80"]:
        assert result.error is None, result.error
        exported = _exported(result)
        for symbol in ["cutlass_ext_abi_version", "cutlass_ext_range_shift", "cutlass_ext_halfhalf_pack"] + [
            f"{c.name}_{fn}" for c in result.configs for fn in ("can_implement", "workspace_size", "run")
        ]:
            assert f" T {symbol}\n" in exported
        assert spill_store_bytes(result) and not any(spill_store_bytes(result))


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["80", "90a"])
def test_default_kernels_compile_and_export_launchers(cache_dir, arch):
    # one library per mode, compiled in parallel; halfhalf also in every layout (its fragment order depends on
    # it) and splitting FP32 operands in registers as well as reading packed ones; and CUTLASS's 3xTF32 peer
    groups = (
        [tuple(default_configs(mode)) for mode in KERNEL_MODES]
        + [(CUTLASS_3XTF32,)]
        + [tuple(default_configs("halfhalf", a, b)) for a, b in (("col", "row"), ("row", "col"), ("col", "col"))]
        + [tuple(default_configs("halfhalf", operands="fp32"))]
    )
    results = build.build_libraries(groups, arch, verbose=False)
    for configs, result in zip(groups, results):
        assert result.error is None, result.error
        exported = subprocess.run(
            ["nm", "-D", "--defined-only", str(result.library)], capture_output=True, text=True, check=True
        ).stdout
        library_symbols = ["cutlass_ext_abi_version", "cutlass_ext_status_string"] + [
            f"cutlass_ext_halfhalf_{fn}" for fn in ("pack", "unscale")
        ]
        for symbol in library_symbols + [
            f"{c.name}_{fn}" for c in configs for fn in ("can_implement", "workspace_size", "run")
        ]:
            assert f" T {symbol}\n" in exported
        resource_usage = json.loads((result.library.parent / cache.MANIFEST).read_text())["resource_usage"]
        spill_reports = [line for line in resource_usage.splitlines() if "spill stores" in line]
        assert spill_reports and all(" 0 bytes spill stores" in line for line in spill_reports), spill_reports
    again = build.build_libraries(groups, arch, verbose=False)
    assert all(r.cached for r in again) and [r.library for r in again] == [r.library for r in results]


def test_compile_errors_are_reported_not_raised(cache_dir, monkeypatch):
    monkeypatch.setattr(build.codegen, "render_library", lambda configs: "#error deliberately broken\n")
    monkeypatch.setattr(build, "_kernel_sources_digest", lambda family: "broken sources")
    (result,) = build.build_libraries([tuple(default_configs("tf32")[:1])], "80", verbose=False)
    assert result.library is None
    assert "deliberately broken" in result.error


@pytest.mark.slow
def test_the_smallest_table_3_survivors_compile(cache_dir):
    # the filter rules' boundary: tiles one step from each CUTLASS rule (families/sm80/filters.py), in one library
    names = [
        "halfhalf_sm80_16x32x32_16x16x32_s3_a4_packed",  # two mma steps per warp k, the fewest allowed
        "tf32tf32_sm80_16x32x16_16x16x16_s3_a4",  # bn 32 = one 128-B line; warps split k, epilogue map still fits
        "tf32tf32_sm80_16x32x32_16x32x16_s3_a4",  # bk 32 = one 128-B line
        "halfhalf_sm80_128x128x32_64x32x32_s3_a4_w8_packed",  # a swizzled launch order
    ]
    (result,) = build.build_libraries([tuple(KernelConfig.from_name(n) for n in names)], "90a", verbose=False)
    assert result.error is None, result.error


def spill_store_bytes(result) -> list[int]:
    """Bytes of spill stores per kernel function of a built library (ptxas's resource usage)."""
    return [
        int(line.split(" bytes spill stores")[0].split(",")[-1])
        for line in resource_usage(result).splitlines()
        if "spill stores" in line
    ]


def resource_usage(result) -> str:
    return json.loads((result.library.parent / cache.MANIFEST).read_text())["resource_usage"]


def test_fp8_default_kernel_compiles_without_spills(family_defaults):
    """CI's check of the FP8 family: the default variant (stream-K, promoted accumulation, EVT epilogue)."""
    result = family_defaults["fp8"]
    assert result.error is None, result.error
    for fn in ("fp8_can_implement", "fp8_workspace_size", "fp8_run"):
        assert f" T {DEFAULT_FP8.name}_{fn}\n" in _exported(result)
    # built in two halves (kernels/cubin_launch.h): the kernel is in the embedded cubin under its C name, and no
    # GNU-unique symbol (one loaded cubin shared by every library in the process) leaves the library
    assert f"Compiling entry function '{DEFAULT_FP8.name}_kernel'" in resource_usage(result)
    assert not [line for line in _exported(result).splitlines() if " u " in line]
    assert "C7514" not in resource_usage(result)
    assert spill_store_bytes(result) and not any(spill_store_bytes(result))


@pytest.mark.slow
def test_fp8_default_and_widest_promoted_kernels_compile_without_spills(cache_dir):
    # CUTLASS 3.x for sm_90a: the default FP8 variant (stream-K scheduler, promoted accumulation, EVT epilogue), and the
    # widest three-fragment promoted tile: a 128x144 cooperative tile, 216 registers, on one n = 144 wgmma (the kernel
    # asserts one wgmma spans the tile's n), under CUTLASS's fixed stride and under our dynamic tile scheduler (its
    # posted tiles in shared memory too); and two fragments of a 128x208 tile with the warpgroups taking turns
    # (kernels/sm90_fp8_turn_taking_promotion.hpp). At the register rule's limit, two fragments of 128x224 (224
    # registers) spill a little around the tile loop (60-68 bytes; docs/design-notes.md, FP8 tiles): it builds, with
    # under 128 bytes. A decode tile with 256-deep k-blocks promoted in slices of 128: ptxas must not serialize its
    # wgmmas (warning C7514), which it does for some shapes of the slice loop, nor any other promoting mainloop's. The
    # 256-row decode tile with D written through its last mainloop stage (kernels/sm90_stage_epilogue.hpp): seven 32 KB
    # stages; its producer requests the weights first (kernels/sm90_weights_load_mainloop.hpp).
    widest = Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x144x128_c1x1_coop_promoted")
    assert filters_fp8.accumulator_registers(widest) == 216
    widest_dynamic = dataclasses.replace(widest, scheduler="dynamic")
    wide_turns = Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x208x128_c1x1_coop_promoted_turns")
    assert filters_fp8.accumulator_registers(wide_turns) == 208
    widest_turns = Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x224x128_c1x1_coop_promoted_turns_w4")
    assert filters_fp8.accumulator_registers(widest_turns) == filters_fp8.ACCUMULATOR_BUDGET
    # three libraries: stream-K (the default) and persistent or dynamic variants differ in programmatic launch
    sliced = Fp8Config.from_name("fp8_e4m3e4m3_bf16_64x16x256_c1x1_pp_promoted_swap_l2pf8")
    stage = Fp8Config.from_name("fp8_e4m3e4m3_bf16_128x128x128_c2x1_coop_promoted_l2pf8_se_wf")
    groups = [(DEFAULT_FP8,), (widest, widest_dynamic, wide_turns, sliced, stage), (widest_turns,)]
    results = build.build_libraries(groups, "90a", verbose=False)
    for result in results:
        assert result.error is None, result.error
        exported = subprocess.run(
            ["nm", "-D", "--defined-only", str(result.library)], capture_output=True, text=True, check=True
        ).stdout
        for config in result.configs:
            for fn in ("fp8_can_implement", "fp8_workspace_size", "fp8_run"):
                assert f" T {config.name}_{fn}\n" in exported
    for result in results:
        assert "C7514" not in resource_usage(result), [c.name for c in result.configs]
    # each variant's kernel is compiled under its C name (kernels/cubin_launch.h), the stage-epilogue one too
    assert f"Compiling entry function '{stage.name}_kernel'" in resource_usage(results[1])
    *clean, at_limit = [spill_store_bytes(result) for result in results]
    for result, spills in zip(results, clean):
        assert spills and not any(spills), (result.configs, spills)
    assert at_limit and max(at_limit) < 128, at_limit


def test_hopper_corrected_defaults_compile_without_spills(family_defaults):
    # Our CUTLASS 3.x mainloop (three accumulator fragments per consumer thread) for both modes, one library
    result = family_defaults["sm90"]
    assert result.error is None, result.error
    exported = subprocess.run(
        ["nm", "-D", "--defined-only", str(result.library)], capture_output=True, text=True, check=True
    ).stdout
    assert " T cutlass_ext_split_planes\n" in exported
    for config in DEFAULT_SPLIT.values():
        for fn in ("split_can_implement", "split_workspace_size", "split_run"):
            assert f" T {config.name}_{fn}\n" in exported
    resource_usage = json.loads((result.library.parent / cache.MANIFEST).read_text())["resource_usage"]
    # built in two halves, the host half by nvcc (the operand pass's kernels are its own): the GEMMs in the cubin
    for config in DEFAULT_SPLIT.values():
        assert f"Compiling entry function '{config.name}_kernel'" in resource_usage
    assert not [line for line in exported.splitlines() if " u " in line]
    spill_reports = [line for line in resource_usage.splitlines() if "spill stores" in line]
    assert spill_reports and all(" 0 bytes spill stores" in line for line in spill_reports), spill_reports
