"""The build cache: reuse, rebuild of damaged entries, one build under concurrency (compiler stubbed out)."""

import ast
import fnmatch
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

import cutlass_ext
from cutlass_ext import build, cache, codegen, families, prebuild, toolchain
from cutlass_ext.families.sm80.config import KernelConfig


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(build.toolchain, "nvcc_version", lambda: "nvcc stub")
    return tmp_path / "cache"


@pytest.fixture
def stub_compiler(monkeypatch):
    """Replaces nvcc with a function that writes a fake library; records which configs it was asked for."""
    calls = []

    def compile_stub(groups, keys, missing, arch, jobs, verbose, on_finished=None):
        calls.append([groups[i][0].name for i in missing])
        time.sleep(0.2)  # long enough for a concurrent caller to arrive
        results = {}
        for i in missing:
            staged = cache.staging_dir("stub-")
            (staged / cache.LIBRARY).write_bytes(f"library for {groups[i][0].name}".encode())
            entry = build.library_entry(groups[i], arch, keys[i])
            cache.commit(staged, entry, keys[i], {"build_seconds": 0.2})
            results[i] = build.LibraryResult(groups[i], entry / cache.LIBRARY)
        return results

    monkeypatch.setattr(build, "_compile", compile_stub)
    return calls


CONFIG = KernelConfig(mode="tf32")


def test_second_request_is_served_from_the_cache(cache_dir, stub_compiler):
    first = build.build_libraries([(CONFIG,)], "90a", verbose=False)
    second = build.build_libraries([(CONFIG,)], "90a", verbose=False)
    assert len(stub_compiler) == 1
    assert not first[0].cached and second[0].cached
    assert first[0].library == second[0].library


def test_key_separates_archs(cache_dir, stub_compiler):
    build.build_libraries([(CONFIG,)], "80", verbose=False)
    build.build_libraries([(CONFIG,)], "90a", verbose=False)
    assert len(stub_compiler) == 2


def test_damaged_library_is_rebuilt_not_loaded(cache_dir, stub_compiler):
    library = build.build_libraries([(CONFIG,)], "90a", verbose=False)[0].library
    library.write_bytes(b"truncated")
    rebuilt = build.build_libraries([(CONFIG,)], "90a", verbose=False)[0]
    assert len(stub_compiler) == 2 and not rebuilt.cached
    assert rebuilt.library.read_bytes() == f"library for {CONFIG.name}".encode()


@pytest.mark.parametrize("damage", ["delete manifest", "garble manifest", "other key"])
def test_entry_without_a_sound_manifest_is_not_trusted(cache_dir, stub_compiler, damage):
    library = build.build_libraries([(CONFIG,)], "90a", verbose=False)[0].library
    manifest = library.parent / cache.MANIFEST
    if damage == "delete manifest":
        manifest.unlink()
    elif damage == "garble manifest":
        manifest.write_text("{not json")
    else:
        manifest.write_text(manifest.read_text().replace('"key": "', '"key": "x'))
    build.build_libraries([(CONFIG,)], "90a", verbose=False)
    assert len(stub_compiler) == 2


def test_an_entry_that_is_a_file_is_rebuilt_and_one_without_its_build_time_loads(cache_dir, stub_compiler):
    import json

    entry = build.build_libraries([(CONFIG,)], "90a", verbose=False)[0].library.parent
    manifest = json.loads((entry / cache.MANIFEST).read_text())
    del manifest["build_seconds"]  # metadata: the entry is whole without it
    (entry / cache.MANIFEST).write_text(json.dumps(manifest))
    again = build.build_libraries([(CONFIG,)], "90a", verbose=False)[0]
    assert again.cached and len(stub_compiler) == 1
    shutil.rmtree(entry)
    entry.write_text("not a directory")
    rebuilt = build.build_libraries([(CONFIG,)], "90a", verbose=False)[0]
    assert not rebuilt.cached and rebuilt.library.parent == entry and entry.is_dir()


def test_half_written_staging_is_invisible(cache_dir):
    staged = cache.staging_dir("crashed-")
    (staged / cache.LIBRARY).write_bytes(b"partial")
    key = build.library_key((CONFIG,), "90a")
    assert cache.read_manifest(build.library_entry((CONFIG,), "90a", key), key) is None


def test_a_killed_build_keeps_the_libraries_it_finished(cache_dir, monkeypatch):
    """ninja stubbed: the first library is written whole, then the build is interrupted (as `timeout` does)."""
    other = KernelConfig(mode="tf32", threadblock=(128, 64, 32))

    def ninja_interrupted(ninja_file, jobs, on_line):
        lines = ninja_file.read_text().splitlines()
        commands = {rule.split()[1]: command for rule, command in zip(lines, lines[1:]) if rule.startswith("rule ")}
        libraries = [line for line in lines if line.startswith("build ") and line.split(":")[0].endswith(cache.LIBRARY)]
        for edge in libraries:  # whole libraries only, by rename, whichever rule writes them
            assert "mv $out.partial $out" in commands[edge.split(": ", 1)[1].split()[0]]
        first_library = Path(libraries[0].split(":")[0].removeprefix("build ").replace("$ ", " "))
        first_library.write_bytes(b"finished library")
        on_line("[1/2] nvcc next library\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "_run_ninja", ninja_interrupted)
    with pytest.raises(KeyboardInterrupt):
        build.build_libraries([(CONFIG,), (other,)], "90a", jobs=1, verbose=False)
    kept = [build.library_key(g, "90a") for g in [(CONFIG,), (other,)]]
    entries = [build.library_entry(g, "90a", key) for g, key in zip([(CONFIG,), (other,)], kept)]
    assert cache.read_manifest(entries[0], kept[0]) is not None
    assert cache.read_manifest(entries[1], kept[1]) is None


def test_concurrent_callers_build_once(cache_dir, stub_compiler):
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(build.build_libraries([(CONFIG,)], "90a", verbose=False)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(stub_compiler) == 1
    assert len({r[0].library for r in results}) == 1


def test_kernel_sources_are_part_of_the_key(cache_dir, monkeypatch):
    before = build.library_key((CONFIG,), "90a")
    monkeypatch.setattr(build, "_kernel_sources_digest", lambda family: "edited headers")
    assert build.library_key((CONFIG,), "90a") != before


def test_a_family_key_covers_its_own_headers_only():
    names = {family: {p.name for p in codegen.source_files(family)} for family in ("sm80", "sm90", "sm90_fp8")}
    assert {"sm80_gemm.cu.in", "sm80_gemm_instance.in", "sm80_gemm.cuh", "split_mma.h"} <= names["sm80"]
    assert {"halfhalf_operands.cuh", "launcher_abi.h", "library_exports.h"} <= names["sm80"] & names["sm90"]
    assert "sm90_split_mainloop.hpp" in names["sm90"]
    assert "sm90_fp8_gemm.cuh" in names["sm90_fp8"] and not names["sm90_fp8"] & {"halfhalf_operands.cuh", "split_mma.h"}
    assert not set(build.BINDING_SOURCES) & set().union(*names.values())


def test_every_kernel_source_ships_as_package_data():
    """A non-editable install carries kernels/ and the families' templates only through setup.py's patterns: every
    file a kernel library or the binding is built from must match one, relative to the package it ships in."""
    setup_text = (toolchain.kernels_dir().parent / "setup.py").read_text()
    package_data = ast.literal_eval(re.search(r"package_data=(\{[^}]*\})", setup_text).group(1))
    roots = {"cutlass_ext.kernels": toolchain.kernels_dir(), "cutlass_ext": Path(cutlass_ext.__file__).parent}
    needed = {path for family in families.names() for path in codegen.source_files(family)}
    needed.update(toolchain.kernels_dir() / file for file in build.BINDING_SOURCES + build.BINDING_HEADERS)
    assert toolchain.kernels_dir() / "sm90_fp8_overlapped_promotion.hpp" in needed

    def shipped(path):
        return any(
            path.is_relative_to(roots[package])
            and any(fnmatch.fnmatch(str(path.relative_to(roots[package])), p) for p in patterns)
            for package, patterns in package_data.items()
        )

    assert sorted(str(path) for path in needed if not shipped(path)) == []


def test_prebuild_builds_each_fp8_variant_once():
    """gemm's dispatch list holds the tuned FP8 winners and gemm_fp8's holds them too: each is built once (the
    device's prebuild compiled every FP8 library twice, side by side, before this)."""
    configs = prebuild.prebuild_configs(["fp8_fast", "fp8_promoted"])
    names = [c.name for c in configs]
    assert len(names) == len(set(names)) > 2
    assert {c.family for c in configs} == {"sm90_fp8"}


def test_prebuild_lowbit_builds_the_default_and_the_shipped_winners():
    from cutlass_ext import tuned
    from cutlass_ext.lowbit.kernel import DEFAULT_CONFIG, LowbitKernelConfig

    configs = prebuild.prebuild_configs(["lowbit"])
    shipped = {c for c in tuned.shipped_configs() if isinstance(c, LowbitKernelConfig)}
    assert shipped and set(configs) == shipped | {DEFAULT_CONFIG}
    assert len(configs) == len(set(configs)) and {c.family for c in configs} == {"lowbit"}


def test_prebuild_by_names_builds_those_variants_for_each_arch_they_run_on(cache_dir, stub_compiler):
    fp8 = "fp8_e4m3e4m3_bf16_128x176x128_c2x1_pp_fast"
    argv = ["--prebuild", "--no-binding", "--arch", "80", "--arch", "90a", "--names", CONFIG.name, fp8, fp8]
    assert prebuild.main(argv) == 0
    assert stub_compiler == [[CONFIG.name], [CONFIG.name, fp8]]  # the FP8 kernel for sm_90a only, once


def test_prebuild_by_names_refuses_an_unknown_name(cache_dir, stub_compiler, capsys):
    assert prebuild.main(["--prebuild", "--no-binding", "--arch", "90a", "--names", "fp8_e4m3e4m3_bf16_tile"]) == 2
    assert "--names: 'fp8_e4m3e4m3_bf16_tile' is not a variant name of any kernel family" in capsys.readouterr().err
    assert stub_compiler == []


def test_a_held_build_lock_times_out_naming_its_holder(cache_dir):
    """Locks are per cache entry; one held past the timeout raises, naming the process that holds it."""
    import os
    import subprocess
    import sys

    key = "f" * 64
    script = (
        "from cutlass_ext import cache; import time\n"
        f"with cache.entry_locks(['{key}'], 'a test library'):\n    print('held', flush=True); time.sleep(30)"
    )
    environment = {**os.environ, cache.CACHE_ENV: str(cache_dir)}
    holder = subprocess.Popen([sys.executable, "-c", script], env=environment, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        expected = f"held by pid {holder.pid} on .*building a test library"
        with pytest.raises(TimeoutError, match=expected), cache.entry_locks([key], "this test", timeout=0.2):
            pass
        with cache.entry_locks(["e" * 64], "another library", timeout=0.2):  # other entries are not blocked
            pass
    finally:
        holder.kill()
        holder.wait()
    with cache.entry_locks([key], "this test", timeout=5):  # a killed holder's lock is free
        pass


def test_a_killed_build_leaves_no_staging_that_later_builds_trip_over(cache_dir, stub_compiler, monkeypatch):
    """A build interrupted in this process removes its staging folder; one left by a process that was killed
    outright is swept by the next build, under its lock, while a live process's folder is left alone."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    staging = cache.cache_root() / "staging"
    staging.mkdir()
    host, namespace, _ = cache._owner()
    stale = staging / f"kernels-+{host}+{namespace}+{gone.pid}+x1"
    live = staging / f"kernels-+{host}+{namespace}+{os.getpid()}+x2"
    # a dead pid of another host whose name ends in this one's, and of another PID namespace: not ours to judge
    others = [staging / f"kernels-+x{host}+{namespace}+{gone.pid}+x3", staging / f"kernels-+{host}+1+{gone.pid}+x4"]
    for folder in (stale, live, *others):
        (folder / "entry0").mkdir(parents=True)
        (folder / "entry0" / "kernel.cu").write_text("half-written")
    build.build_libraries([(CONFIG,)], "90a", verbose=False)
    assert not stale.exists() and live.exists() and all(folder.exists() for folder in others)
    for folder in others:
        shutil.rmtree(folder)

    monkeypatch.undo()  # the real _compile, with ninja interrupted
    monkeypatch.setenv(cache.CACHE_ENV, str(cache_dir))
    monkeypatch.setattr(build.toolchain, "nvcc_version", lambda: "nvcc stub")

    def ninja_interrupted(ninja_file, jobs, on_line):
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "_run_ninja", ninja_interrupted)
    with pytest.raises(KeyboardInterrupt):
        build.build_libraries([(KernelConfig(mode="tf32", stages=4),)], "90a", verbose=False)
    assert sorted(p.name for p in staging.iterdir()) == [live.name]


def test_a_relative_cache_path_is_taken_from_where_the_caller_stands(tmp_path, monkeypatch):
    """ninja runs inside a staging directory, so the root must be absolute before any build path is formed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(cache.CACHE_ENV, "relative/cache")
    root = cache.cache_root()
    assert root.is_absolute() and root == tmp_path / "relative" / "cache" and root.is_dir()
    assert cache.staging_dir("x-").is_absolute()


def test_variants_registered_together_build_in_one_parallel_call(cache_dir, stub_compiler, monkeypatch):
    """A caller registering several variants (a test module, a confirmation run) gets one parallel build, not one
    nvcc run after another; each is then loaded from the cache."""
    from cutlass_ext import registry, requirements

    loaded = []
    monkeypatch.setattr(registry, "device_arch", lambda device=None: "90a")
    monkeypatch.setattr(registry, "_binding", {"binding": True})
    monkeypatch.setattr(requirements, "check_driver", lambda version: None)
    monkeypatch.setattr(registry, "_load_into_binding", lambda name, arch, library: loaded.append(name))
    monkeypatch.setattr(registry, "_registered", registry.OnceMap())
    configs = [KernelConfig(mode="tf32", stages=s) for s in (3, 4, 5)]
    registry.ensure_registered(configs, None)
    assert stub_compiler == [[c.name for c in configs]]
    assert loaded == [c.name for c in configs]
    registry.ensure_registered(configs, None)  # registered: nothing built or loaded again
    assert len(stub_compiler) == 1 and len(loaded) == 3


def test_an_unusable_cache_or_lock_timeout_is_named(tmp_path, monkeypatch):
    a_file = tmp_path / "file"
    a_file.write_text("")
    monkeypatch.setenv(cache.CACHE_ENV, str(a_file))
    with pytest.raises(RuntimeError, match=f"the kernel cache {a_file} cannot be used .*point CUTLASS_EXT_CACHE"):
        cache.cache_root()
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    for text in ("abc", "-1", "inf"):
        monkeypatch.setenv(cache.LOCK_TIMEOUT_ENV, text)
        with pytest.raises(ValueError, match=f"CUTLASS_EXT_BUILD_LOCK_TIMEOUT='{text}' must be a finite number"):
            with cache.entry_locks(["k"], "a test"):
                pass
