"""Build kernel libraries and the torch binding into the cache (`python -m cutlass_ext.build --prebuild` builds ahead:
cutlass_ext/prebuild.py).

Kernel libraries are torch-free: each is one generated translation unit compiled by nvcc (ninja runs them in
parallel), keyed by its configs, the kernel sources, nvcc's version, the CUTLASS headers and the arch. The
binding is the one translation unit that includes torch; `torch.utils.cpp_extension` builds it per torch version.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import cache, codegen, cubin_build, families, nvcc_steps, toolchain

# The binding: its ops and their registration, compiled side by side (only the second parses torch/library.h).
BINDING_SOURCES = ("torch_binding.cpp", "torch_binding_registration.cpp")
BINDING_HEADERS = ("torch_binding.h", "launcher_abi.h", "range_shift_abi.h")
_NINJA_STATUS = re.compile(r"^\[(?P<finished>\d+)/(?P<total>\d+)\] ")


@dataclass(frozen=True)
class LibraryResult:
    """Outcome of building one group of configs: `library` on success, `error` (the compiler's log) otherwise."""

    configs: tuple
    library: Path | None
    error: str | None = None
    seconds: float = 0.0
    cached: bool = False


def _kernel_sources_digest(family: str) -> str:
    """The headers and templates a library of this family is made of (not the torch binding)."""
    return cache.fingerprint(*(f"{p.name}:{p.read_text()}" for p in codegen.source_files(family)))


@functools.cache
def _cutlass_digest() -> str:
    """Every CUTLASS and CuTe header a kernel can include (a patched header rebuilds, not only a new version)."""
    root = toolchain.cutlass_root()
    files = sorted(p for folder in (root / "include", root / "tools" / "util" / "include") for p in folder.rglob("*"))
    digest = hashlib.sha256()
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _cubin_family(configs):
    """The family of a library built in halves (cubin_build.py); None for a library built otherwise."""
    family = families.get(configs[0].family)
    return family if family.cubin else None


def library_key(configs: tuple, arch: str) -> str:
    return cache.fingerprint(
        *(c.fingerprint() for c in configs),
        _kernel_sources_digest(configs[0].family),
        _cutlass_digest(),
        toolchain.nvcc_version(),
        arch,
        " ".join(toolchain.NVCC_FLAGS),
        *(cubin_build.key_parts(arch) if _cubin_family(configs) else ()),
    )


def library_entry(configs: tuple, arch: str, key: str) -> Path:
    label = configs[0].name if len(configs) == 1 else f"group{len(configs)}"
    return cache.cache_root() / "kernels" / f"sm_{arch}" / f"{label}-{key[:16]}"


def _ninja_path(path: Path) -> str:
    return str(path).replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def _nvcc_arguments(arch: str) -> list[str]:
    includes = [f"-I{d}" for d in toolchain.include_dirs()]
    return [*toolchain.NVCC_FLAGS, toolchain.gencode(arch), *includes]


_ON_FAILURE = "|| { cat $out.log; exit 1; }"  # a failed step prints its log
_RULES = [
    "rule nvcc_library",
    f"  command = $nvcc $flags -o $out.partial $in > $out.log 2>&1 && mv $out.partial $out {_ON_FAILURE}",
    "  description = nvcc $out",
    "rule nvcc_object",
    f"  command = $nvcc $object_flags -c -o $out $in > $out.log 2>&1 {_ON_FAILURE}",
    "  description = nvcc $out",
    "rule nvcc_objects",
    # the objects go once linked: the cache keeps the library, not its parts
    f"  command = $nvcc -shared -o $out.partial $in > $out.log 2>&1 && mv $out.partial $out && rm -f $in {_ON_FAILURE}",
    "  description = nvcc $out",
    "rule nvcc_step",
    f"  command = bash $in > $out.log 2>&1 && touch $out {_ON_FAILURE}",
    "  description = nvcc $out",
    "rule nvcc_link",
    f"  command = bash $in > $out.log 2>&1 && mv $out.partial $out {_ON_FAILURE}",
    "  description = nvcc $out",
]


def _compiles(sources: list[Path], cubin_family) -> int:
    """The compiles a library's split build runs side by side: nvcc's two front ends, its units, or a cubin
    library's halves and nvcc part."""
    if cubin_family:
        return 3 if cubin_family.cubin_nvcc_part else 2
    return max(2, len(sources))


def _write_ninja_file(
    staging_root: Path, jobs: list[tuple[list[Path], Path, object]], arch: str, parallel: int
) -> Path:
    """The build edges of each library, from its translation units: one unit, nvcc whole, or (for a build of fewer
    libraries than cores) nvcc's host and device front ends side by side, then the link (nvcc_steps.py); several
    units (a family's `parts`), one object each, side by side, then linked; or a cubin family's two halves
    (cubin_build.py). Side by side only where `parallel` (ninja's -j) runs every split compile at once; otherwise
    each library is one edge, so they finish one by one and a killed build keeps those done. Each library appears
    under its name only once whole, so a build that is killed leaves no half-written one to commit; compiler output
    goes to logs in its staging folder, printed only when it fails."""
    arguments = _nvcc_arguments(arch)
    object_arguments = [a for a in arguments if a != "-shared"]
    lines = [
        "ninja_required_version = 1.3",
        f"nvcc = {toolchain.nvcc()}",
        f"flags = {' '.join(shlex.quote(a) for a in arguments)}",
        f"object_flags = {' '.join(shlex.quote(a) for a in object_arguments)}",
        *_RULES,
    ]
    if any(cubin_family for _, _, cubin_family in jobs):
        lines += cubin_build.ninja_rules(arch, _ON_FAILURE)
    # Splits pay only where all their compiles run at once, or for one library (a first call: its short host-side
    # compiles then share the cores with its long device compile): ninja runs every ready compile before any link
    # (critical-path order), so with more compiles than jobs every split library would finish last, and a library
    # whole on one job takes about as long as its split halves queued behind others.
    split = len(jobs) == 1 or sum(_compiles(sources, cubin_family) for sources, _, cubin_family in jobs) <= parallel
    for sources, library, cubin_family in jobs:
        if cubin_family:
            (source,) = sources
            lines += cubin_build.edges(source, library, _ninja_path, cubin_family.cubin_nvcc_part, split=split)
            continue
        if not split:
            lines.append(f"build {_ninja_path(library)}: nvcc_library {' '.join(map(_ninja_path, sources))}")
            continue
        if len(sources) > 1:
            objects = [source.with_suffix(".o") for source in sources]
            lines += [f"build {_ninja_path(o)}: nvcc_object {_ninja_path(s)}" for s, o in zip(sources, objects)]
            lines.append(f"build {_ninja_path(library)}: nvcc_objects {' '.join(map(_ninja_path, objects))}")
            continue
        (source,) = sources
        work = library.parent / "steps"
        steps = nvcc_steps.split(
            toolchain.nvcc(),
            [*arguments, str(source)],
            library.with_name(library.name + ".partial"),
            work,
            staging_root,
        )
        if not steps:
            shutil.rmtree(work, ignore_errors=True)
            lines.append(f"build {_ninja_path(library)}: nvcc_library {_ninja_path(source)}")
            continue
        stamps = []
        for name, text in (("host", steps.host), ("device", steps.device)):
            script = library.parent / f"{name}.sh"
            script.write_text(text + "\n")
            stamps.append(library.parent / f"{name}.done")
            lines.append(f"build {_ninja_path(stamps[-1])}: nvcc_step {_ninja_path(script)}")
        link = library.parent / "link.sh"
        link.write_text(steps.link + f"\nrm -rf {shlex.quote(str(work))}\n")  # ~150 MB of intermediates
        lines.append(
            f"build {_ninja_path(library)}: nvcc_link {_ninja_path(link)} | " + " ".join(map(_ninja_path, stamps))
        )
    ninja_file = staging_root / "build.ninja"
    ninja_file.write_text("\n".join(lines) + "\n")
    return ninja_file


def _compiler_output(library: Path) -> str:
    """What the compiler printed for one library (ptxas's resource usage, or the errors), whole, by step or by
    translation unit."""
    steps = [library.parent / f"{step}.done.log" for step in ("host", "device")]
    logs = [
        *steps,
        *cubin_build.compiler_logs(library.parent),
        *sorted(library.parent.glob("kernel*.o.log")),
        library.with_name(library.name + ".log"),
    ]
    return "".join(log.read_text() for log in logs if log.is_file())


def build_libraries(
    groups: list[tuple],
    arch: str,
    jobs: int | None = None,
    verbose: bool = True,
    on_finished: Callable[[int], None] | None = None,
) -> list[LibraryResult]:
    """Build (or find in the cache) one kernel library per group of configs for `arch`; failures are returned.

    `on_finished(n)` is told how many of the libraries to compile have finished, as ninja reports them.
    """
    groups = [tuple(g) for g in groups]
    keys = [library_key(g, arch) for g in groups]
    results: dict[int, LibraryResult] = {}

    def cached_result(index: int) -> LibraryResult | None:
        entry = library_entry(groups[index], arch, keys[index])
        manifest = cache.read_manifest(entry, keys[index])
        if manifest is None:
            return None
        seconds = manifest.get("build_seconds", 0.0)  # metadata: an entry without it is still whole
        return LibraryResult(groups[index], entry / manifest["library"], seconds=seconds, cached=True)

    for i in range(len(groups)):
        if (found := cached_result(i)) is not None:
            results[i] = found
    if len(results) < len(groups):
        pending = [i for i in range(len(groups)) if i not in results]
        what = ", ".join(groups[i][0].name for i in pending[:3]) + (" …" if len(pending) > 3 else "")
        with cache.entry_locks([keys[i] for i in pending], f"sm_{arch} {what}"):
            for i in range(len(groups)):
                if i not in results and (found := cached_result(i)) is not None:
                    results[i] = found  # another process built it while we waited
            missing = [i for i in range(len(groups)) if i not in results]
            if missing:
                cache.sweep_stale_staging()  # what builds killed before us left behind
                results.update(_compile(groups, keys, missing, arch, jobs, verbose, on_finished))
    return [results[i] for i in range(len(groups))]


def _run_ninja(ninja_file: Path, jobs: int, on_line: Callable[[str], None]) -> str:
    """ninja over every library at once (no idle cores between batches); each output line goes to `on_line`."""
    environment = {**os.environ, "NINJA_STATUS": "[%f/%t] "}
    output = []
    with subprocess.Popen(
        ["ninja", "-f", str(ninja_file), "-k", "0", "-j", str(jobs)],
        cwd=ninja_file.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environment,
    ) as process:
        for line in process.stdout:
            output.append(line)
            on_line(line)
    return "".join(output)  # failures are per library, read from their logs


def _compile(groups, keys, missing, arch, jobs, verbose, on_finished=None) -> dict[int, LibraryResult]:
    staging_root = cache.staging_dir("kernels-")
    work = []
    for i in missing:
        staged = staging_root / f"entry{i}"
        staged.mkdir()
        sources = codegen.render_parts(list(groups[i]))
        paths = [staged / ("kernel.cu" if len(sources) == 1 else f"kernel{p}.cu") for p in range(len(sources))]
        for path, text in zip(paths, sources):
            path.write_text(text)
        work.append((i, staged, paths, staged / cache.LIBRARY))
    jobs = jobs or os.cpu_count() or 1
    ninja_file = _write_ninja_file(
        staging_root, [(paths, library, _cubin_family(groups[i])) for i, _, paths, library in work], arch, jobs
    )
    if verbose:
        names = ", ".join(
            groups[i][0].name + (f" +{len(groups[i]) - 1}" if len(groups[i]) > 1 else "") for i in missing
        )
        print(
            f"cutlass_ext: building {len(missing)} kernel librar{'y' if len(missing) == 1 else 'ies'} "
            f"for sm_{arch} with {jobs} jobs: {names}",
            file=sys.stderr,
            flush=True,
        )
    start = time.perf_counter()
    results = {}
    nvcc_version = toolchain.nvcc_version()

    def commit_finished() -> None:
        """Move every library that is whole into the cache now: a build killed later keeps them."""
        for i, staged, _, library in work:
            if i not in results and library.is_file():
                seconds = time.perf_counter() - start
                metadata = {
                    "configs": [c.to_dict() for c in groups[i]],
                    "arch": arch,
                    "nvcc": nvcc_version,
                    "build_seconds": round(seconds, 2),
                    "resource_usage": _compiler_output(library),
                }
                entry = library_entry(groups[i], arch, keys[i])
                cache.commit(staged, entry, keys[i], metadata)
                results[i] = LibraryResult(groups[i], entry / cache.LIBRARY, seconds=seconds)

    def on_line(line: str) -> None:
        if on_finished and (status := _NINJA_STATUS.match(line)):
            on_finished(int(status["finished"]))
        commit_finished()

    try:
        ninja_output = _run_ninja(ninja_file, jobs, on_line)
        commit_finished()
        for i, _, _, library in work:
            if i not in results:
                error = _compiler_output(library) or ninja_output
                results[i] = LibraryResult(groups[i], None, error=error or "ninja produced no library and no log")
    finally:  # finished or interrupted, no staging folder outlives the build
        shutil.rmtree(staging_root, ignore_errors=True)
    if on_finished:
        on_finished(len(missing))
    if verbose:
        print(f"cutlass_ext: kernel build finished in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return results


def load_binding(verbose: bool = True):
    """Build (once per torch version) and load the torch binding: a plain library that gives the ops of
    cutlass_ext/ops.py their CUDA implementations and adds `register_variant` / `registered_variants` ops."""
    import torch
    from torch.utils import cpp_extension

    kernels = toolchain.kernels_dir()
    sources = [kernels / file for file in BINDING_SOURCES]
    key = cache.fingerprint(
        *(path.read_text() for path in sources),
        *((kernels / file).read_text() for file in BINDING_HEADERS),
        torch.__version__,
        str(torch.version.cuda),
        sys.version,
    )
    name = f"cutlass_ext_binding_{key[:12]}"
    build_directory = cache.cache_root() / "binding" / name
    build_directory.mkdir(parents=True, exist_ok=True)
    already_built = (build_directory / f"{name}.so").is_file()
    if verbose and not already_built:
        print(f"cutlass_ext: building the torch binding ({name})", file=sys.stderr, flush=True)
    start = time.perf_counter()

    if not torch.cuda.is_available():
        # The binding holds no device code; cpp_extension still wants an arch list to compile without a GPU.
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")

    def load():
        return cpp_extension.load(
            name=name,
            sources=[str(path) for path in sources],
            extra_include_paths=[str(kernels)],
            build_directory=str(build_directory),
            extra_cflags=["-O2"],
            extra_ldflags=["-ldl"],
            with_cuda=True,
            is_python_module=False,
            verbose=False,
        )

    def rebuild():
        # A damaged build (a crash while linking, a truncated file) is rebuilt, not trusted.
        for path in build_directory.iterdir():
            if path.is_file() and path.name != "lock":  # cpp_extension's own lock file stays
                path.unlink()
        return load()

    # Building, and deleting a damaged build, happen under the binding's build lock: no process deletes the files
    # another is building. Loading a finished build takes no lock.
    lock = functools.partial(cache.entry_locks, [key], f"the torch binding {name}")
    if already_built:
        try:
            library = load()
        except (ImportError, OSError, RuntimeError):
            with lock():
                library = rebuild()
    else:
        with lock():
            library = load()
    if verbose and not already_built:
        print(f"cutlass_ext: torch binding built in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return library


if __name__ == "__main__":  # `python -m cutlass_ext.build --prebuild`: the command lives one layer up
    from cutlass_ext.prebuild import main

    sys.exit(main())
