"""The low-bit GEMM's dispatch without a GPU: a tuned-table entry of the family's mode picks the variant for
shapes near it, a shape far from every entry takes the default variant."""

import csv

import pytest

from cutlass_ext import device, tuned
from cutlass_ext.lowbit.kernel import DEFAULT_CONFIG, MODE, LowbitKernelConfig, plan

H100 = device.named("NVIDIA H100 80GB HBM3")
TUNED = LowbitKernelConfig(block=(128, 64, 16), thread=(8, 4), window=8)


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "tuned.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=tuned.COLUMNS)
        writer.writeheader()
        writer.writerow(
            dict(mode=MODE, m=4096, n=4096, k=4096, batch=1, name=TUNED.name, tflops=1.0, gpu="h100", date="2026")
        )
    tuned.set_tuned_table(path)
    yield path
    tuned.set_tuned_table(None)


def test_a_tuned_entry_picks_the_variant(table):
    config, source = plan(H100, 2048, 4096, 8192)
    assert config == TUNED and config.mode == MODE
    assert str(table) in source


def test_far_shapes_take_the_default(table):
    config, source = plan(H100, 64, 64, 64)
    assert config == DEFAULT_CONFIG and source.startswith("default")
