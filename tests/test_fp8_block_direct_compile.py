"""The directly written block-scaled FP8 kernel without a GPU: its library (every tiling the GPU tests run)
compiles for sm_90a, with no register spills, and exports its launchers."""

import os
import re
import shutil
import subprocess

import pytest

from tests.gpu.test_fp8_block_direct import TILINGS, compile_unit

have_nvcc = shutil.which("nvcc") is not None or os.path.exists("/usr/local/cuda/bin/nvcc")


@pytest.mark.skipif(not have_nvcc, reason="needs nvcc")
def test_library_compiles_without_spills(tmp_path):
    library, log = compile_unit(tmp_path, TILINGS)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert len(spills) == len(TILINGS)
    assert all(stores == "0" and loads == "0" for stores, loads in spills), log
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True).stdout
    for bm, bn, stages in TILINGS:
        assert f"direct_{bm}x{bn}_s{stages}" in symbols
