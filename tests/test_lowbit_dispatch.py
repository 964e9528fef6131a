"""The low-bit GEMM's dispatch without a GPU: tuned-table entries of its two modes pick the forward's and the
backward's variants for shapes near them, a shape far from every entry takes the default variant."""

import csv

import pytest

from cutlass_ext import device, tuned
from cutlass_ext.lowbit.kernel import DEFAULT_CONFIG, TUNED_MODES, LowbitKernelConfig, plan

H100 = device.named("NVIDIA H100 80GB HBM3")
FORWARD = LowbitKernelConfig(block=(128, 64, 16), thread=(8, 4), window=16)
BACKWARD = LowbitKernelConfig(window=8)


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "tuned.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=tuned.COLUMNS)
        writer.writeheader()
        for mode, config in zip(TUNED_MODES, (FORWARD, BACKWARD)):
            row = dict(mode=mode, m=4096, n=4096, k=4096, batch=1, name=config.name, tflops=1.0, gpu="h100")
            writer.writerow(row | {"date": "2026-11-26"})
    tuned.set_tuned_table(path)
    yield path
    tuned.set_tuned_table(None)


def test_tuned_entries_pick_each_direction(table):
    forward, backward, source = plan(H100, 2048, 4096, 8192)
    assert (forward, backward) == (FORWARD, BACKWARD)
    assert str(table) in source and "lowbit_backward" in source


def test_far_shapes_take_the_default(table):
    forward, backward, source = plan(H100, 64, 64, 64)
    assert forward == backward == DEFAULT_CONFIG and "default" in source
