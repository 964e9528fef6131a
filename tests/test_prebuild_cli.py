"""`python -m cutlass_ext.build --prebuild` refuses what it cannot build before nvcc starts (no compiler runs here)."""

import subprocess
import sys

import pytest

from cutlass_ext import prebuild

FP8 = "fp8_e4m3e4m3_bf16_128x176x128_c2x1_pp_fast"


@pytest.fixture
def builds(monkeypatch):
    """The (arch, names) build_libraries is asked for; it builds nothing."""
    calls = []
    monkeypatch.setattr(
        prebuild, "build_libraries", lambda groups, arch, jobs: calls.append((arch, [g[0].name for g in groups])) or []
    )
    return calls


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--arch", "sm90a"], "argument --arch: 'sm90a' is not an arch such as 80 or 90a (write 90a)"),
        (["--arch", "90A"], "argument --arch: '90A' is not an arch such as 80 or 90a (write 90a)"),
        (["--arch", "9x"], "argument --arch: '9x' is not an arch such as 80 or 90a"),
        (["--arch", "90a", "--jobs", "-1"], "argument --jobs: '-1' is not a positive integer"),
        (["--arch", "90a", "--jobs", "0"], "argument --jobs: '0' is not a positive integer"),
        (["--arch", "90a", "--modes", "int8x2"], "argument --modes: moduli=2 must be an integer in 3..14"),
        (["--arch", "90a", "--modes", "fp8"], "argument --modes: 'fp8' is not one of"),
    ],
)
def test_bad_arguments_are_refused_naming_the_option_and_value(extra, message, builds, capsys):
    with pytest.raises(SystemExit) as exited:
        prebuild.main(["--prebuild", "--no-binding", *extra])
    assert exited.value.code == 2 and message in capsys.readouterr().err
    assert builds == []


def test_a_named_variant_no_given_arch_builds_is_an_error(builds, capsys):
    assert prebuild.main(["--prebuild", "--no-binding", "--arch", "80", "--names", FP8]) == 2
    assert capsys.readouterr().err == (f"error: --names {FP8}: the sm90_fp8 family builds for sm_90a only, not sm_80\n")
    assert builds == []


def test_a_named_variant_another_arch_builds_is_skipped_with_a_note(builds, capsys):
    assert (
        prebuild.main(["--prebuild", "--no-binding", "--arch", "80", "--arch", "90a", "--arch", "80", "--names", FP8])
        == 0
    )
    assert builds == [("80", []), ("90a", [FP8])]  # each arch once
    assert f"sm_80: skipped {FP8} (not built for sm_80)" in capsys.readouterr().err


def test_modes_nothing_of_which_builds_for_the_arch_are_an_error(builds, capsys):
    assert prebuild.main(["--prebuild", "--no-binding", "--arch", "80", "--modes", "fp8_fast"]) == 2
    assert capsys.readouterr().err == "error: --modes fp8_fast: no variant of these builds for sm_80\n"
    assert builds == []


def test_errors_are_one_error_line(builds, capsys):
    assert prebuild.main(["--prebuild", "--no-binding", "--arch", "90a", "--names", "bogus"]) == 2
    assert capsys.readouterr().err.startswith("error: --names: 'bogus' is not a variant name")
    assert prebuild.main(["--arch", "90a"]) == 2
    assert capsys.readouterr().err == "error: nothing to do: pass --prebuild\n"


def test_an_arch_newer_than_the_tables_builds_the_families_that_build_anywhere(builds):
    assert prebuild.main(["--prebuild", "--no-binding", "--arch", "100a", "--modes", "tf32tf32"]) == 0
    assert [arch for arch, _ in builds] == ["100a"] and builds[0][1]  # the sm80 family builds for any arch


def test_the_command_line_refuses_a_misspelt_arch_without_running_nvcc():
    completed = subprocess.run(
        [sys.executable, "-m", "cutlass_ext.build", "--prebuild", "--no-binding", "--arch", "sm_90a"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 2 and completed.stdout == ""
    assert "error: argument --arch: 'sm_90a' is not an arch such as 80 or 90a (write 90a)" in completed.stderr


def test_ozaki_modes_build_their_default_kernel(builds):
    assert prebuild.main(["--prebuild", "--no-binding", "--arch", "90a", "--modes", "int8x8", "int8x9", "int8x8"]) == 0
    assert builds == [("90a", ["ozaki_int8x8_128x256x128_c1x1_w8", "ozaki_int8x9_128x256x128_c1x1_w8"])]
