"""A kernel family from its own folder (tests/toy_family: config, name grammar, render function, templates) plugs
in with one registry call and nothing else: its names parse, codegen renders it, the cache key covers its
templates and the kernels/ headers they include, and nvcc builds it (no GPU needed: its host function runs)."""

import ctypes
import dataclasses

import pytest

from cutlass_ext import build, cache, codegen, families


@pytest.fixture
def toy_family(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    families.register("tests.toy_family", name="toy")  # the one line a family adds
    yield families.get("toy")
    families.unregister("toy")


def test_a_family_registered_with_one_line_renders_and_builds(toy_family):
    config = families.from_name("toy_f3")
    assert (config.factor, config.family, config.name) == (3, "toy", "toy_f3")
    with pytest.raises(ValueError, match="not a variant name of any kernel family"):
        families.from_name("toy_f")
    assert {p.name for p in codegen.source_files("toy")} >= {"toy.cu.in", "toy_instance.in", "launcher_abi.h"}
    assert toy_family.builds_for("80") and toy_family.builds_for("90a")

    source = codegen.render_library([config, families.from_name("toy_f5")])
    assert "toy_scale<3>(x)" in source and "toy_scale<5>(x)" in source

    (result,) = build.build_libraries([(config, families.from_name("toy_f5"))], "80", verbose=False)
    assert result.error is None, result.error
    library = ctypes.CDLL(str(result.library))
    assert (library.toy_f3_scale(7), library.toy_f5_scale(-4)) == (21, -20)
    assert build.library_entry((config,), "80", build.library_key((config,), "80")).parent.name == "sm_80"


def test_an_unknown_family_is_named_in_the_error():
    with pytest.raises(KeyError, match="kernel family 'toy' is not registered"):
        families.get("toy")


def test_every_registered_family_names_itself_and_has_its_templates():
    assert {"sm80", "sm90", "sm90_fp8", "lowbit", "optim"} <= set(families.names())
    for family in families.all_families():
        assert family.template.is_file() and family.instance_template.is_file()
        (field,) = [f for f in dataclasses.fields(family.config) if f.name == "family"]
        assert field.default == family.name
