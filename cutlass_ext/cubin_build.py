"""A kernel library built in two halves (kernels/cubin_launch.h), for families whose `cubin` is set.

nvcc compiles the translation unit's device code alone (`-cubin`: cicc, ptxas) while the host compiler compiles
its launchers (the same text, CUTLASS_EXT_HOST_CODE defined, kernels/host_compiler_prelude.h first); the link
embeds the cubin, which the launchers load by the kernels' C names. nvcc whole runs two C++ front ends over the
unit, cudafe++ (the host side, which also instantiates every kernel template) then the host compile after cicc;
here a cold build waits for cicc alone. A family whose library also launches small kernels of its own with <<<>>>
(the corrected SGEMM's operand pass), which the host compiler cannot compile, names a macro (`cubin_nvcc_part`)
under which the unit holds only those: nvcc compiles it a third time, into an object of its own, beside the halves.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from . import toolchain

DEVICE_CODE = "kernel.cubin"
HOST_OBJECT = "host.o"
NVCC_PART_OBJECT = "nvcc_part.o"
# Where the link's assembly puts the cubin: one symbol per library (RTLD_LOCAL keeps libraries apart).
_EMBED = """\
.section .rodata.cutlass_ext_device_code,"a"
.balign 64
.globl cutlass_ext_device_code
.hidden cutlass_ext_device_code
cutlass_ext_device_code:
.incbin "{cubin}"
.byte 0
.section .note.GNU-stack,"",@progbits
"""


def host_compiler() -> str:
    """The host C++ compiler: nvcc's (NVCC_CCBIN when set: a compiler, or the folder nvcc would take g++ from),
    else g++ on the PATH."""
    chosen = os.environ.get("NVCC_CCBIN")
    if chosen and Path(chosen).is_dir():
        chosen = next((str(Path(chosen) / n) for n in ("g++", "c++") if (Path(chosen) / n).is_file()), None)
    found = chosen or shutil.which("g++") or shutil.which("c++")
    if found is None:
        raise FileNotFoundError("no host C++ compiler (g++) found; install one, or set NVCC_CCBIN")
    return found


@functools.cache
def host_compiler_version() -> str:
    """Its first --version line: part of a cubin library's cache key."""
    return toolchain.version_text(host_compiler()).strip().splitlines()[0]


def nvcc_release() -> tuple[int, int]:
    """(major, minor) of nvcc, which the host half must see as __CUDACC_VER_MAJOR__/MINOR__."""
    found = re.search(r"release (\d+)\.(\d+)", toolchain.nvcc_version_text())
    if found is None:
        raise RuntimeError(f"cannot read the release from `{toolchain.nvcc()} --version`")
    return int(found[1]), int(found[2])


@functools.cache
def _nvcc_paths() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The include and library folders nvcc itself passes (its --dryrun; nvcc may be a wrapper script elsewhere)."""
    listing = subprocess.run(
        [toolchain.nvcc(), "--dryrun", "-E", "-x", "cu", "/dev/null"], capture_output=True, text=True
    ).stderr
    includes, libraries = [], []
    for line in listing.splitlines():
        if line.startswith("#$ INCLUDES=") or line.startswith("#$ SYSTEM_INCLUDES="):
            words = shlex.split(line.split("=", 1)[1])
            includes += [w[2:] if w.startswith("-I") else w for w in words if w not in ("-isystem",)]
        elif line.startswith("#$ LIBRARIES="):
            libraries += [w[2:] for w in shlex.split(line.split("=", 1)[1]) if w.startswith("-L")]
    return tuple(includes), tuple(libraries)


def _cuda_includes() -> list[str]:
    return [f"-I{d}" for d in _nvcc_paths()[0]]


def host_flags() -> list[str]:
    major, minor = nvcc_release()
    return [
        "-x", "c++", "-std=c++17", "-O2", "-fPIC", "-DNDEBUG",
        # no GNU-unique symbols: an inline function's static (a loaded cubin) must stay in its own library
        "-fno-gnu-unique",
        # CUTLASS's headers name device builtins in inline functions no host code calls (declared by the prelude)
        "-fpermissive", "-w",
        "-DCUTLASS_EXT_HOST_CODE", f"-DCUTLASS_EXT_NVCC_MAJOR={major}", f"-DCUTLASS_EXT_NVCC_MINOR={minor}",
        *(f"-I{d}" for d in toolchain.include_dirs()), *_cuda_includes(),
    ]  # fmt: skip


def device_flags(arch: str) -> list[str]:
    shared = [f for f in toolchain.NVCC_FLAGS if f not in ("-shared", "-Xcompiler=-fPIC")]
    return ["-cubin", *shared, "-DCUTLASS_EXT_DEVICE_CODE", toolchain.gencode(arch),
            *(f"-I{d}" for d in toolchain.include_dirs())]  # fmt: skip


def nvcc_part_flags(arch: str) -> list[str]:
    """The third object (a family's cubin_nvcc_part): nvcc whole over the kernels the library launches itself. It
    is host-side code too (CUTLASS_EXT_HOST_CODE; __CUDACC__ tells the unit it is nvcc's, not the host compiler's)."""
    shared = [f for f in toolchain.NVCC_FLAGS if f != "-shared"]
    return [
        *shared,
        "-Xcompiler=-fno-gnu-unique",
        "-DCUTLASS_EXT_HOST_CODE",
        toolchain.gencode(arch),
        *(f"-I{d}" for d in toolchain.include_dirs()),
    ]


def link_flags() -> list[str]:
    folders = _nvcc_paths()[1]
    lib = next((d for d in folders if (Path(d) / "libcudart_static.a").is_file()), None)
    if lib is None:
        raise FileNotFoundError(f"libcudart_static.a not found in nvcc's library folders {list(folders)}")
    # libstdc++ named (NVCC_CCBIN may be a C driver such as gcc); nothing left undefined for dlopen to find missing
    return [f"-L{lib}", "-l:libcudart_static.a", "-ldl", "-lrt", "-lpthread", "-lstdc++", "-Wl,--no-undefined"]


def key_parts(arch: str) -> tuple[str, ...]:
    """What a cubin library depends on beyond nvcc: the host compiler and both halves' flags, without folders (the
    headers' contents are keyed already; a cache stays valid where the same toolkit and packages sit elsewhere)."""

    def flags(words):
        return " ".join(w for w in words if not w.startswith(("-I", "-L")))

    return (
        host_compiler_version(),
        flags(host_flags()),
        flags(device_flags(arch)),
        flags(nvcc_part_flags(arch)),
        flags(link_flags()),
        _EMBED,
    )


# The steps of a cubin library, shared by the split edges and the one-edge form: the device half, the host half,
# the nvcc part where the family has one, and the link of their objects with the embedded cubin.
_DEVICE_COMPILE = "$nvcc $cubin_device_flags"
_HOST_COMPILE = "$cxx $cubin_host_flags"
_NVCC_PART_COMPILE = "$nvcc $cubin_nvcc_part_flags -D$part_macro"


def _link(inputs: str) -> str:
    return f"$cxx -shared -o $out.partial {inputs} $cubin_link_flags > $out.log 2>&1 && mv $out.partial $out"


def ninja_rules(arch: str, on_failure: str) -> list[str]:
    def quoted(words):
        return " ".join(shlex.quote(w) for w in words)

    lines = [
        f"cubin_device_flags = {quoted(device_flags(arch))}",
        f"cubin_host_flags = {quoted(host_flags())}",
        f"cubin_link_flags = {quoted(link_flags())}",
        f"cubin_nvcc_part_flags = {quoted(nvcc_part_flags(arch))}",
        f"cxx = {shlex.quote(host_compiler())}",
        "rule cubin_device",
        f"  command = {_DEVICE_COMPILE} -o $out $in > $out.log 2>&1 {on_failure}",
        "  description = nvcc -cubin $out",
        "rule cubin_host",
        f"  command = {_HOST_COMPILE} -c -o $out $in > $out.log 2>&1 {on_failure}",
        "  description = host compile $out",
        "rule cubin_nvcc_part",
        f"  command = {_NVCC_PART_COMPILE} -c -o $out $in > $out.log 2>&1 {on_failure}",
        "  description = nvcc part $out",
        "rule cubin_link",
        f"  command = {_link('$in')} && rm -f $in $cubin {on_failure}",
        "  description = link $out",
    ]
    # One edge for a whole library, its steps one after the other (a build of more compiles than jobs).
    part_step = f"&& {_NVCC_PART_COMPILE} -c -o $part_object $in > $part_object.log 2>&1 "
    for rule, part in (("cubin_whole", ""), ("cubin_whole_nvcc_part", part_step)):
        objects = "$host_object $part_object" if part else "$host_object"
        logs = "$cubin.log $host_object.log " + ("$part_object.log " if part else "") + "$out.log"
        lines += [
            f"rule {rule}",
            f"  command = ({_DEVICE_COMPILE} -o $cubin $in > $cubin.log 2>&1 "
            f"&& {_HOST_COMPILE} -c -o $host_object $in > $host_object.log 2>&1 {part}"
            f"&& {_link(objects + ' $embed')} && rm -f {objects} $embed $cubin) "
            f"|| {{ cat {logs} 2>/dev/null; exit 1; }}",
            "  description = nvcc -cubin, host compile, link $out",
        ]
    return lines


def edges(source: Path, library: Path, ninja_path, nvcc_part: str | None = None, split: bool = True) -> list[str]:
    """The build edges of one library from its translation unit (and the assembly that embeds the cubin): its
    halves (and its nvcc part, compiled with the macro `nvcc_part` defined, where the family has one) side by side
    then the link, or (`split` false) one edge doing them in turn."""
    folder = library.parent
    cubin, host_object, embed = folder / DEVICE_CODE, folder / HOST_OBJECT, folder / "device_code.S"
    part_object = folder / NVCC_PART_OBJECT
    embed.write_text(_EMBED.format(cubin=str(cubin).replace("\\", "\\\\").replace('"', '\\"')))
    part_variables = [f"  part_macro = {nvcc_part}", f"  part_object = {ninja_path(part_object)}"] if nvcc_part else []
    if not split:
        rule = "cubin_whole_nvcc_part" if nvcc_part else "cubin_whole"
        return [
            f"build {ninja_path(library)}: {rule} {ninja_path(source)}",
            f"  cubin = {ninja_path(cubin)}",
            f"  host_object = {ninja_path(host_object)}",
            f"  embed = {ninja_path(embed)}",
            *part_variables,
        ]
    objects = [ninja_path(host_object)]
    lines = [
        f"build {ninja_path(cubin)}: cubin_device {ninja_path(source)}",
        f"build {ninja_path(host_object)}: cubin_host {ninja_path(source)}",
    ]
    if nvcc_part:
        lines += [
            f"build {ninja_path(part_object)}: cubin_nvcc_part {ninja_path(source)}",
            f"  part_macro = {nvcc_part}",
        ]
        objects.append(ninja_path(part_object))
    return lines + [
        f"build {ninja_path(library)}: cubin_link {' '.join(objects)} {ninja_path(embed)} | {ninja_path(cubin)}",
        f"  cubin = {ninja_path(cubin)}",
    ]


def compiler_logs(folder: Path) -> list[Path]:
    """The steps' logs (ptxas's resource usage is in the device half's)."""
    return [folder / f"{DEVICE_CODE}.log", folder / f"{HOST_OBJECT}.log", folder / f"{NVCC_PART_OBJECT}.log"]
