"""First calls from many threads at once: each library is built and loaded once per (variant, arch), failures reach
every waiting thread, and tuned look-ups survive a table reset from another thread. The build step is replaced by
a recording stub, so this runs without nvcc or a GPU (tests/gpu/test_threads.py runs the real thing)."""

import random
import threading
import time
from collections import Counter

import pytest
import torch

from cutlass_ext import build, native, registry, tuned
from cutlass_ext.families.sm80.config import KERNEL_MODES, default_configs
from cutlass_ext.families.sm90.config import DEFAULTS as SM90_DEFAULTS
from cutlass_ext.families.sm90_fp8.config import DEFAULT_FP8
from cutlass_ext.lowbit.kernel import DEFAULT_CONFIG as LOWBIT_DEFAULT
from cutlass_ext.once import OnceMap

THREADS = 8
ARCHS = {0: "90a", 1: "80"}  # two GPUs of two architectures in one process
BINDING_CONFIGS = [c for mode in KERNEL_MODES for c in default_configs(mode)] + list(SM90_DEFAULTS.values())
BINDING_CONFIGS.append(DEFAULT_FP8)
REAL_BINDING = registry.binding


@pytest.fixture
def stub_dispatch(monkeypatch, tmp_path):
    """Fresh per-process state; building records (name, arch) and takes a while, loading records too."""
    built, loaded = Counter(), Counter()
    lock = threading.Lock()

    def build_libraries(groups, arch, *args, **kwargs):
        ((config,),) = groups
        with lock:
            built[config.name, arch] += 1
        time.sleep(0.05)  # long enough for every other thread to arrive while it builds
        if config.name.startswith("broken"):
            return [build.LibraryResult((config,), None, error="nvcc: error")]
        library = tmp_path / f"{config.name}-{arch}.so"
        library.write_text("library")
        return [build.LibraryResult((config,), library)]

    def load(name, arch, library):
        assert library.endswith(f"-{arch}.so"), f"{name}: the binding was told arch {arch} for {library}"
        with lock:
            loaded[name, arch] += 1

    monkeypatch.setattr(build, "build_libraries", build_libraries)
    monkeypatch.setattr(registry.requirements, "check_driver", lambda nvcc_version: None)  # no driver here
    monkeypatch.setattr(registry, "binding", lambda: None)
    monkeypatch.setattr(registry, "_load_into_binding", lambda name, arch, library: load(name, arch, str(library)))
    monkeypatch.setattr(registry, "device_arch", lambda device: ARCHS[device.index])
    monkeypatch.setattr(registry, "_registered", OnceMap())
    monkeypatch.setattr(registry, "_libraries", OnceMap())
    monkeypatch.setattr(native.ctypes, "CDLL", lambda path, mode=0: f"CDLL({path})")
    return built, loaded


def run_threads(work) -> list:
    """work(thread_index) in THREADS threads released together; the exceptions they raised."""
    start, errors = threading.Barrier(THREADS), []

    def target(index):
        start.wait()
        try:
            work(index)
        except Exception as error:  # collected: the test names them
            errors.append(error)

    threads = [threading.Thread(target=target, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_first_calls_from_many_threads_build_and_load_each_library_once(stub_dispatch):
    built, loaded = stub_dispatch
    libraries = {}

    def work(index):
        order = random.Random(index).sample(BINDING_CONFIGS, len(BINDING_CONFIGS))
        for config in order:
            device = torch.device("cuda", index % 2)
            registry.ensure_registered([config], device)
            libraries.setdefault(index, []).append(native.library(LOWBIT_DEFAULT, device))

    assert run_threads(work) == []
    expected = {(c.name, arch) for c in BINDING_CONFIGS + [LOWBIT_DEFAULT] for arch in ARCHS.values()}
    assert set(built) == expected and set(built.values()) == {1}
    assert set(loaded) == {(c.name, arch) for c in BINDING_CONFIGS for arch in ARCHS.values()}
    assert set(loaded.values()) == {1}
    assert all(registry.is_registered(c.name, torch.device("cuda", 1)) for c in BINDING_CONFIGS)
    # each device got its own arch's library
    assert {lib.rsplit("-", 1)[-1] for index in range(1, THREADS, 2) for lib in libraries[index]} == {"80.so)"}
    assert {lib.rsplit("-", 1)[-1] for index in range(0, THREADS, 2) for lib in libraries[index]} == {"90a.so)"}


class BrokenConfig:
    """A variant whose build fails (the stub fails names starting `broken`)."""

    family, name = "sm80", "broken_tf32_sm80"


def test_a_failed_build_reaches_every_waiting_thread_and_is_tried_again_later(stub_dispatch):
    built, _ = stub_dispatch
    errors = run_threads(lambda index: registry.ensure_registered([BrokenConfig()], torch.device("cuda", 0)))
    assert len(errors) == THREADS and all("building kernel broken_tf32_sm80 for sm_90a" in str(e) for e in errors)
    before = built[BrokenConfig.name, "90a"]
    with pytest.raises(RuntimeError, match="building kernel broken_tf32_sm80"):
        registry.ensure_registered([BrokenConfig()], torch.device("cuda", 0))
    assert built[BrokenConfig.name, "90a"] == before + 1  # a failure is not remembered as a library


def test_tuned_lookups_survive_table_resets_from_another_thread(tmp_path):
    table = tmp_path / "table.csv"
    table.write_text(
        "mode,m,n,k,batch,name,tflops,gpu,date\n"
        f"tf32tf32,4096,4096,4096,1,{SM90_DEFAULTS['tf32tf32'].name},1.0,NVIDIA H200,2026-11-26\n"
    )
    sizes = range(1024, 1024 + 200)

    def answers():
        return {size: tuned.lookup("NVIDIA H200", "tf32tf32", size, 4096, 4096) for size in sizes}

    tuned.set_tuned_table(table)
    with_table = answers()
    tuned.set_tuned_table(None)
    shipped = answers()
    assert with_table != shipped  # the two tables answer differently, so a mixed-up answer shows
    stop = threading.Event()

    def reset():
        while not stop.is_set():
            tuned.set_tuned_table(table)
            tuned.set_tuned_table(None)

    resetter = threading.Thread(target=reset)
    resetter.start()
    try:

        def work(index):
            for size in sizes:  # each answer is one table's, whichever was installed
                assert tuned.lookup("NVIDIA H200", "tf32tf32", size, 4096, 4096) in (with_table[size], shipped[size])

        assert run_threads(work) == []
    finally:
        stop.set()
        resetter.join()
        tuned.set_tuned_table(None)


def test_a_first_call_builds_the_binding_while_nvcc_builds_the_kernel(stub_dispatch, monkeypatch):
    """The binding (16 s) and the first kernel (11-17 s) build side by side; the kernel is loaded once both are."""
    events = []

    def slow(what, result):
        def run(*args):
            events.append(f"{what} started")
            time.sleep(0.3)
            events.append(f"{what} done")
            return result

        return run

    monkeypatch.setattr(registry, "binding", REAL_BINDING)
    monkeypatch.setattr(registry, "_binding", OnceMap())
    monkeypatch.setattr(build, "load_binding", slow("binding", "binding"))
    monkeypatch.setattr(registry, "build_one", slow("kernel", "kernel-90a.so"))
    start = time.perf_counter()
    registry.ensure_registered([default_configs("tf32")[0]], torch.device("cuda", 0))
    assert time.perf_counter() - start < 0.5  # one after the other: 0.6 s
    assert set(events[:2]) == {"binding started", "kernel started"}
    assert stub_dispatch[1] == Counter({(default_configs("tf32")[0].name, "90a"): 1})  # loaded after both
