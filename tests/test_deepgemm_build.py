"""The DeepGEMM peer's offline build script, on a stand-in checkout (no torch extension is built here)."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "python" / "deepgemm_build.py"
_spec = importlib.util.spec_from_file_location("deepgemm_build", SCRIPT)
deepgemm_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(deepgemm_build)


def _checkout(root):
    for folder in ("csrc", "deep_gemm/include/deep_gemm", "third-party/fmt/include"):
        (root / folder).mkdir(parents=True)
    (root / "csrc" / "python_api.cpp").write_text("// stand-in\n")
    for library, header in (("cutlass", "detail/helper_macros.hpp"), ("cute", "tensor.hpp")):
        path = root / "third-party" / "cutlass" / "include" / library / header
        path.parent.mkdir(parents=True)
        path.write_text("#pragma once\n")
    return root


def test_headers_only_puts_cutlass_where_the_jit_looks_for_it(tmp_path):
    """An extension built on another machine and carried in still needs CUTLASS and CuTe in deep_gemm/include."""
    source = _checkout(tmp_path / "deepgemm")
    assert deepgemm_build.main(["--source", str(source), "--headers-only"]) == 0
    include = source / "deep_gemm" / "include"
    assert (include / "cutlass" / "detail" / "helper_macros.hpp").is_file()
    assert (include / "cute" / "tensor.hpp").is_file()
    assert deepgemm_build.main(["--source", str(source), "--headers-only"]) == 0  # again: nothing to copy


def test_a_folder_that_is_not_a_checkout_is_refused(tmp_path, capsys):
    assert deepgemm_build.main(["--source", str(tmp_path), "--headers-only"]) == 2
    assert "not a DeepGEMM checkout" in capsys.readouterr().err
