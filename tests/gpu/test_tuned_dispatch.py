"""ext.gemm dispatches from the tuned table: the nearest shape's winner, built at first use."""

import importlib

import pandas as pd
import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import device, numerics, ops, registry
from cutlass_ext.families.sm80.config import KernelConfig

from .helpers import operands, reference

# not a default variant, so running it shows the table was read
TUNED = {
    "tf32tf32": KernelConfig("tf32tf32", threadblock=(64, 128, 32), warp=(64, 32, 32), stages=4),
    "halfhalf": KernelConfig("halfhalf", threadblock=(128, 64, 32), warp=(32, 64, 32), stages=5, operands="packed"),
}


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "tuned.csv"
    rows = [
        {"mode": mode, "m": 512, "n": 512, "k": 512, "batch": 1, "name": c.name, "tflops": 1.0, "gpu": "", "date": ""}
        for mode, c in TUNED.items()
    ]
    pd.DataFrame(rows).to_csv(path, index=False)
    ext.set_tuned_table(path)
    yield path
    ext.set_tuned_table(None)


@pytest.mark.parametrize("mode", ["tf32tf32", "halfhalf"])
def test_gemm_runs_the_tuned_variant_of_the_nearest_shape(table, mode):
    a, b = operands("urand(-1,1)", 640, 384, 512, seed=31)
    c = ext.gemm(a, b, mode=mode)
    assert registry.is_registered(TUNED[mode].name, torch.device("cuda"))  # built and loaded because the table named it
    assert numerics.relative_residual(c, reference(a, b)) < 1e-6
    # the same kernel called alone gives the same bits (the op would fall back silently where it refused)
    alone = ops.gemm if mode == "tf32tf32" else ops.halfhalf_gemm
    assert torch.equal(c, alone(a, b, [TUNED[mode].name]))


def test_transposed_operands_keep_the_defaults_when_the_winner_reads_row_major(table):
    a, b = operands("urand(-1,1)", 512, 512, 512, seed=32)
    c = ext.gemm(a.t().contiguous().t(), b, mode="tf32tf32")
    assert numerics.relative_residual(c, reference(a, b)) < 1e-6
    gpu = device.info(torch.cuda.current_device())
    chosen = importlib.import_module("cutlass_ext.gemm").plan(gpu, "tf32tf32", 512, 512, 512, "col", "row")
    assert TUNED["tf32tf32"].name not in chosen.variants and "default" in chosen.source
