"""A library built in two halves (cutlass_ext/cubin_build.py): nvcc's folders, the build edges, the cache key."""

import subprocess
from pathlib import Path

import pytest

from cutlass_ext import build, cubin_build, families
from cutlass_ext.families.sm90_fp8.config import DEFAULT_FP8

LISTING = """\
#$ _HERE_=/opt/cuda/bin
#$ INCLUDES="-I/opt/cuda/bin/../targets/x86_64-linux/include"
#$ SYSTEM_INCLUDES="-isystem" "/opt/cuda/bin/../targets/x86_64-linux/include/cccl"
#$ LIBRARIES=  "-L/opt/cuda/bin/../targets/x86_64-linux/lib/stubs" "-L/opt/cuda/bin/../targets/x86_64-linux/lib"
"""


def test_nvcc_folders_come_from_its_own_listing(monkeypatch):
    """nvcc may be a wrapper script far from its toolkit: the folders are the ones its --dryrun passes."""
    cubin_build._nvcc_paths.cache_clear()
    monkeypatch.setattr(cubin_build.toolchain, "nvcc", lambda: "/usr/local/bin/nvcc")
    monkeypatch.setattr(cubin_build.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "", LISTING))
    try:
        includes, libraries = cubin_build._nvcc_paths()
    finally:
        cubin_build._nvcc_paths.cache_clear()
    assert includes == (
        "/opt/cuda/bin/../targets/x86_64-linux/include",
        "/opt/cuda/bin/../targets/x86_64-linux/include/cccl",
    )
    assert libraries[-1] == "/opt/cuda/bin/../targets/x86_64-linux/lib"


def test_edges_compile_both_halves_of_one_unit_and_embed_the_cubin(tmp_path):
    source, library = tmp_path / "kernel.cu", tmp_path / "lib.so"
    edges = cubin_build.edges(source, library, str)
    assert edges[0] == f"build {tmp_path / 'kernel.cubin'}: cubin_device {source}"
    assert edges[1] == f"build {tmp_path / 'host.o'}: cubin_host {source}"
    assert edges[2].startswith(f"build {library}: cubin_link {tmp_path / 'host.o'} {tmp_path / 'device_code.S'} |")
    embed = (tmp_path / "device_code.S").read_text()
    assert f'.incbin "{tmp_path / "kernel.cubin"}"' in embed
    assert ".hidden cutlass_ext_device_code" in embed  # each library's own, never another's


def test_host_half_sees_nvccs_version_and_no_gnu_unique(monkeypatch):
    monkeypatch.setattr(cubin_build, "nvcc_release", lambda: (13, 0))
    monkeypatch.setattr(cubin_build, "_cuda_includes", lambda: [])
    flags = cubin_build.host_flags()
    assert "-DCUTLASS_EXT_NVCC_MAJOR=13" in flags and "-DCUTLASS_EXT_NVCC_MINOR=0" in flags
    assert "-DCUTLASS_EXT_HOST_CODE" in flags and "-fno-gnu-unique" in flags
    device = cubin_build.device_flags("90a")
    assert device[0] == "-cubin" and "-DCUTLASS_EXT_DEVICE_CODE" in device and "-shared" not in device


def test_the_host_half_is_part_of_the_cache_key(monkeypatch):
    monkeypatch.setattr(cubin_build, "key_parts", lambda arch: ("g++ 12", "-O2", "-lcudart"))
    before = build.library_key((DEFAULT_FP8,), "90a")
    monkeypatch.setattr(cubin_build, "key_parts", lambda arch: ("g++ 13", "-O2", "-lcudart"))
    assert build.library_key((DEFAULT_FP8,), "90a") != before


def test_hopper_families_are_built_in_halves_and_their_headers_are_in_their_keys():
    fp8, corrected = families.get("sm90_fp8"), families.get("sm90")
    assert fp8.cubin and fp8.cubin_nvcc_part is None
    # the corrected SGEMM's operand pass launches kernels of its own: nvcc compiles them apart
    assert corrected.cubin and corrected.cubin_nvcc_part == "CUTLASS_EXT_OPERAND_PASS_CODE"
    names = {p.name for p in build.codegen.source_files("sm90_fp8")}
    assert {"cubin_launch.h", "host_compiler_prelude.h", "sm90_fp8_gemm.cuh"} <= names
    assert {"cubin_launch.h", "halfhalf_operands.cuh"} <= {p.name for p in build.codegen.source_files("sm90")}


def test_an_nvcc_part_is_a_third_compile_beside_the_halves_and_is_linked(tmp_path):
    source, library = tmp_path / "kernel.cu", tmp_path / "lib.so"
    edges = cubin_build.edges(source, library, str, "OPERANDS")
    assert edges[2] == f"build {tmp_path / 'nvcc_part.o'}: cubin_nvcc_part {source}"
    assert edges[3] == "  part_macro = OPERANDS"
    assert edges[4].startswith(f"build {library}: cubin_link {tmp_path / 'host.o'} {tmp_path / 'nvcc_part.o'} ")
    whole = cubin_build.edges(source, library, str, "OPERANDS", split=False)
    assert whole[0] == f"build {library}: cubin_whole_nvcc_part {source}"
    assert "  part_macro = OPERANDS" in whole and f"  part_object = {tmp_path / 'nvcc_part.o'}" in whole
    flags = cubin_build.nvcc_part_flags("90a")
    assert "-Xcompiler=-fno-gnu-unique" in flags and "-shared" not in flags and "-cubin" not in flags


def test_an_nvcc_part_is_a_macro_of_a_cubin_family():
    fp8 = families.get("sm90_fp8")
    for cubin, part in ((False, "OPERANDS"), (True, "not a macro")):
        with pytest.raises(ValueError, match="cubin_nvcc_part"):
            families.Family(
                name="parted", config=fp8.config, template=Path(fp8.template), render_instance=fp8.render_instance,
                cubin=cubin, cubin_nvcc_part=part,
            )  # fmt: skip


def test_a_cubin_family_is_one_translation_unit():
    fp8 = families.get("sm90_fp8")
    with pytest.raises(ValueError, match="one translation unit"):
        families.Family(
            name="halves", config=fp8.config, template=Path(fp8.template), render_instance=fp8.render_instance,
            parts=2, cubin=True,
        )  # fmt: skip


def test_the_key_names_no_folder(monkeypatch):
    """A cache built where the packages sit elsewhere (another machine, another venv) stays valid."""
    monkeypatch.setattr(cubin_build, "host_compiler_version", lambda: "g++ 12")
    monkeypatch.setattr(cubin_build, "nvcc_release", lambda: (13, 0))
    monkeypatch.setattr(cubin_build, "_nvcc_paths", lambda: (("/opt/cuda/include",), ("/opt/cuda/lib",)))
    monkeypatch.setattr(cubin_build, "link_flags", lambda: ["-L/opt/cuda/lib", "-l:libcudart_static.a"])
    parts = cubin_build.key_parts("90a")
    assert not any(
        folder in part for part in parts for folder in ("/opt/cuda", str(cubin_build.toolchain.kernels_dir()))
    )
    assert "-DCUTLASS_EXT_HOST_CODE" in parts[1] and "-cubin" in parts[2] and "-l:libcudart_static.a" in parts[4]


def test_nvcc_ccbin_may_name_a_folder(monkeypatch, tmp_path):
    (tmp_path / "g++").write_text("")
    monkeypatch.setenv("NVCC_CCBIN", str(tmp_path))
    assert cubin_build.host_compiler() == str(tmp_path / "g++")


def test_with_more_compiles_than_jobs_libraries_finish_one_by_one(tmp_path, monkeypatch):
    """ninja runs every ready compile before any link; where the split compiles outnumber the jobs each library is
    one edge, so the first is whole before the next starts (a build killed midway keeps it). The real ninja,
    compilers stubbed."""
    ninja = pytest.importorskip("ninja")
    monkeypatch.setattr(cubin_build, "host_compiler", lambda: "cxx")  # no toolkit needed: the stub ignores flags
    monkeypatch.setattr(cubin_build, "link_flags", lambda: [])
    monkeypatch.setattr(cubin_build, "_nvcc_paths", lambda: ((), ()))
    monkeypatch.setattr(cubin_build, "nvcc_release", lambda: (13, 0))
    jobs = []
    for i, family in enumerate((families.get("sm90_fp8"), families.get("sm90"), None)):
        folder = tmp_path / f"entry{i}"
        folder.mkdir()
        sources = [folder / f"kernel{p}.cu" for p in range(1 if family else 2)]
        for source in sources:
            source.write_text("")
        jobs.append((sources, folder / "lib.so", family))
    (tmp_path / "split").mkdir()
    split = build._write_ninja_file(tmp_path / "split", jobs, "90a", parallel=7).read_text()
    assert ": cubin_device " in split and ": cubin_nvcc_part " in split and ": nvcc_object " in split  # 7 at once
    ninja_file = build._write_ninja_file(tmp_path, jobs, "90a", parallel=4)  # 7 compiles split: more than 4
    stub, log = tmp_path / "compiler", tmp_path / "calls.txt"
    stub.write_text(f'#!/bin/sh\nwhile [ "$1" != -o ]; do shift; done\necho "$2" >> {log}\ntouch "$2"\n')
    stub.chmod(0o755)
    text = ninja_file.read_text()
    text = "\n".join(
        f"{line.split(' = ')[0]} = {stub}" if line.startswith(("nvcc = ", "cxx = ")) else line
        for line in text.splitlines()
    )
    ninja_file.write_text(text + "\n")
    subprocess.run(
        [Path(ninja.BIN_DIR) / "ninja", "-f", ninja_file, "-j", "1"], check=True, capture_output=True, cwd=tmp_path
    )
    order = [Path(line).parent.name for line in log.read_text().split()]
    assert all(library.is_file() for _, library, _ in jobs)
    assert order == sorted(order)  # each library's compiles and link together, entry0's first
    # two halves and the link; the same and the nvcc part; nvcc whole
    assert order.count("entry0") == 3 and order.count("entry1") == 4 and order.count("entry2") == 1
