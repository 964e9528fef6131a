"""The FP8 benchmark's CPU side: one column per contender across shapes, the floor ratio, one build up front."""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest
import torch

BENCH = Path(__file__).resolve().parent.parent / "python" / "bench_fp8.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_fp8", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shape_rows(m: int, triton_config: str, read_config: str, ours_us: float, read_us: float) -> list[dict]:
    """One shape's rows as measure_shape writes them; Triton and the read carry the config tuned for the shape."""
    contenders = [
        ("cutlass_ext", "ext.gemm_fp8", "tensor", "fast", ours_us),
        ("cublas", "torch._scaled_mm", "tensor", "fast", 25.0),
        ("triton", f"triton splitk {triton_config}", "tensor", "fast", 30.0),
        ("floor", f"weights read {read_config}", "", "", read_us),
    ]
    return [
        {"family": f, "name": name, "granularity": g, "accum": a, "m": m, "n": 8192, "k": 8192, "graph_us": us}
        for f, name, g, a, us in contenders
    ]


def test_summary_has_one_column_per_contender_and_the_floor_ratio():
    bench = load_bench()
    frame = pd.DataFrame(
        shape_rows(1, "64x64x256x4x4x3", "4096x4x8", 24.0, 23.4)
        + shape_rows(16, "64x128x256x2x8x3", "1024x16x4", 25.0, 23.5)
    )
    wide = bench.summary(frame)
    assert {"triton splitk tensor fast", "weights read"} <= set(wide.columns)
    assert not any(column.startswith(("triton splitk 64", "weights read 4096")) for column in wide.columns)
    assert wide["floor / ours tensor fast"].tolist() == pytest.approx([23.4 / 24.0, 23.5 / 25.0], abs=0.006)
    assert wide["speedup vs cuBLAS tensor fast"].tolist() == [round(25.0 / 24.0, 2), 1.0]
    assert wide["fastest (tensor fast)"].tolist() == ["ours", "ours"]
    slower = frame.assign(graph_us=frame["graph_us"].where(frame["name"] != "ext.gemm_fp8", 40.0))
    assert bench.summary(slower)["fastest (tensor fast)"].tolist() == ["cuBLAS", "cuBLAS"]


def test_summary_reads_back_from_the_csv(tmp_path):
    """The floor's empty scaling and accumulation cells come back from the CSV as NaN."""
    bench = load_bench()
    path = tmp_path / "gemm_fp8.csv"
    pd.DataFrame(shape_rows(1, "64x64x256x4x4x3", "4096x4x8", 24.0, 23.4)).to_csv(path, index=False)
    wide = bench.summary(pd.read_csv(path))
    assert wide["floor / ours tensor fast"].tolist() == pytest.approx([23.4 / 24.0], abs=0.006)


def test_the_variants_of_every_shape_are_built_in_one_run(monkeypatch):
    bench = load_bench()
    asked, built = [], []

    def variant_names(device, a, b, out, accum, m, n, k):
        asked.append((accum, m))
        return [f"tuned_{accum}_{m}", f"default_{accum}"]

    monkeypatch.setattr(bench.fp8, "variant_names", variant_names)
    monkeypatch.setattr(bench.registry, "ensure_names_registered", lambda names, device: built.append(names))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    bench.build_variants([(1, 8192, 8192), (16, 8192, 8192)])
    assert sorted(asked) == [("fast", 1), ("fast", 16), ("promoted", 1), ("promoted", 16)]
    assert built == [
        sorted(
            {
                "tuned_fast_1",
                "tuned_fast_16",
                "tuned_promoted_1",
                "tuned_promoted_16",
                "default_fast",
                "default_promoted",
            }
        )
    ]


def test_sustained_ratios_appear_only_where_the_rows_were_timed_sustained():
    bench = load_bench()
    frame = pd.DataFrame(
        shape_rows(16, "64x128x256x2x8x3", "1024x16x4", 25.0, 23.5)
        + shape_rows(8192, "128x128x128x1x8x3", "1024x16x4", 800.0, 23.5)
    )
    frame["sustained_us"] = float("nan")
    at_8192 = frame["m"] == 8192
    frame.loc[at_8192 & (frame["family"] == "cutlass_ext"), "sustained_us"] = 900.0
    frame.loc[at_8192 & (frame["family"] == "cublas"), "sustained_us"] = 880.0
    wide = bench.summary(frame)
    ratios = wide["sustained speedup vs cuBLAS tensor fast"].tolist()
    assert pd.isna(ratios[0]) and ratios[1] == round(880.0 / 900.0, 2)
    assert "sustained speedup vs cuBLAS tensor fast" not in bench.summary(frame.drop(columns="sustained_us"))
