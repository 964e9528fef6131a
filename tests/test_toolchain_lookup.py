"""Where the CUTLASS headers are found: nvidia-cutlass's package, looked up safely from many threads at once."""

from __future__ import annotations

import importlib.util
import threading
from types import SimpleNamespace

import pytest

from cutlass_ext import toolchain


@pytest.fixture
def lookup(monkeypatch, tmp_path):
    """find_spec replaced by a counter that misses `misses` times, then finds a package holding CUTLASS's headers."""
    package = tmp_path / "cutlass_library"
    (package / "source" / "include" / "cutlass").mkdir(parents=True)
    (package / "source" / "include" / "cutlass" / "cutlass.h").write_text("")
    state = {"calls": 0, "misses": 0}

    def find_spec(name):
        assert name == "cutlass_library"
        state["calls"] += 1
        if state["calls"] <= state["misses"]:
            return None
        return SimpleNamespace(submodule_search_locations=[str(package)])

    monkeypatch.delenv(toolchain.CUTLASS_DIR_ENV, raising=False)
    monkeypatch.setattr(toolchain, "_PACKAGE_DIR", [])
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    return state, package


def test_a_missed_lookup_is_retried_once_after_invalidating_the_caches(lookup):
    state, package = lookup
    state["misses"] = 1
    assert toolchain.cutlass_root() == package / "source"
    assert state["calls"] == 2


def test_a_package_that_is_absent_is_reported_and_not_remembered(lookup):
    state, package = lookup
    state["misses"] = 2
    with pytest.raises(FileNotFoundError, match="pip install nvidia-cutlass"):
        toolchain.cutlass_root()
    assert toolchain.cutlass_root() == package / "source"  # installed since: found on the next call


def test_threads_look_it_up_once(lookup):
    state, package = lookup
    roots = []
    threads = [threading.Thread(target=lambda: roots.append(toolchain.cutlass_root())) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert roots == [package / "source"] * 16 and state["calls"] == 1
