"""The 16-bit optimizer experiments and benchmark (python/optim_*.py, train_lm.py, bench_optim.py) in their --quick
modes on the CPU: each writes its CSV and plot, and the numbers carry the seed's pattern where a few seconds can
show it."""

import importlib
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

SCRIPTS = Path(__file__).resolve().parent.parent / "python"

pytest.importorskip("matplotlib")


@pytest.fixture
def scripts(monkeypatch):
    """Import a script of python/ by name (optim_lm_precisions imports train_lm from there)."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    return importlib.import_module


def test_unit_example_nearest_stays_and_stochastic_and_kahan_reach_two(scripts, tmp_path):
    scripts("optim_unit_example").main(["--quick", "--out", str(tmp_path)])
    frame = pd.read_csv(tmp_path / "optim_unit_example.csv")
    assert (tmp_path / "optim_unit_example.png").is_file()
    final = frame[frame["step"] == 1000].set_index("update")
    assert final.loc["nearest", ["min", "max"]].tolist() == [1.0, 1.0]
    assert final.loc["kahan", "mean"] == pytest.approx(2.0, abs=2**-6)
    assert final.loc["stochastic", "mean"] == pytest.approx(final.loc["exact", "mean"], abs=0.03)
    assert final.loc["stochastic", "max"] > final.loc["stochastic", "min"]


def test_least_squares_writes_every_variant_and_each_one_trains(scripts, tmp_path):
    module = scripts("optim_least_squares")
    module.main(["--quick", "--out", str(tmp_path)])
    frame = pd.read_csv(tmp_path / "optim_least_squares.csv")
    assert (tmp_path / "optim_least_squares.png").is_file()
    assert list(frame["variant"].unique()) == list(module.VARIANTS)
    for variant, rows in frame.groupby("variant"):
        first, last = rows.sort_values("step")["loss_mean"].iloc[[0, -1]]
        assert math.isfinite(last) and last < first / 10, variant


def test_least_squares_rounded_gradient_is_the_bf16_gradient(scripts):
    module = scripts("optim_least_squares")
    weight = torch.rand(3, module.DIMENSION) * 100
    x, y = torch.randn(3, module.DIMENSION), torch.randn(3) * 50
    exact = module.gradient(weight, x, y, rounded=False)
    rounded = module.gradient(weight, x, y, rounded=True)
    assert torch.equal(rounded, rounded.to(torch.bfloat16).float())
    assert torch.allclose(rounded, exact, rtol=0.05, atol=0.05 * exact.abs().max().item())


def test_lm_precisions_writes_one_row_per_precision_and_curves(scripts, tmp_path):
    module = scripts("optim_lm_precisions")
    module.main(["--quick", "--out", str(tmp_path)])
    runs = pd.read_csv(tmp_path / "optim_lm_precisions.csv")
    curves = pd.read_csv(tmp_path / "optim_lm_curves.csv")
    assert (tmp_path / "optim_lm_precisions.png").is_file()
    assert list(runs["precision"]) == list(scripts("train_lm").PRECISIONS)
    # a few steps from the uniform prediction (ln 256 nats per byte) already lower the validation loss
    assert (runs["final_val_loss"] < math.log(256)).all()
    assert set(curves["precision"]) == set(runs["precision"])
    assert module.summary(runs).loc["fp32", "gap_to_fp32"] == 0.0


def test_train_lm_names_the_bad_argument(scripts, capsys):
    train_lm = scripts("train_lm")
    with pytest.raises(ValueError, match="precision='bf8'"):
        train_lm.validate(train_lm.TrainConfig(precision="bf8"))
    with pytest.raises(ValueError, match="width=100 must be a multiple of heads=3"):
        train_lm.validate(train_lm.TrainConfig(width=100, heads=3))
    with pytest.raises(SystemExit):
        train_lm.main(["--precision", "fp16"])
    assert "--precision" in capsys.readouterr().err


def test_train_lm_corpus_split_is_fixed(scripts):
    train_lm = scripts("train_lm")
    files = train_lm.corpus_files()
    assert files == sorted(files, key=lambda path: path.name) and len(files) > 20
    train, validation = train_lm.load_corpus(max_files=20)
    assert validation.numel() == sum(p.stat().st_size for p in files[:20:10])
    assert train.numel() + validation.numel() == sum(p.stat().st_size for p in files[:20])


def test_bench_quick_counts_bytes_from_the_tensors(scripts, tmp_path):
    scripts("bench_optim").main(["--quick", "--out", str(tmp_path)])
    frame = pd.read_csv(tmp_path / "optim_bench.csv").set_index("contender")
    assert (tmp_path / "optim_bench.png").is_file()
    assert frame.loc[["ours nearest", "ours stochastic", "ours kahan"], "bytes_per_param"].tolist() == [6, 6, 8]
    assert frame.loc["ours kahan", "moved_bytes_per_param"] == pytest.approx(18)
    master = frame.loc["torch fused FP32 master"]
    assert (master["bytes_per_param"], master["total_bytes_per_param"], master["moved_bytes_per_param"]) == (12, 14, 28)
    assert (frame.loc[frame["family"] == "cutlass_ext", "step_us"] > 0).all()
    for peer in ("torchao SR", "optimi Kahan"):  # timed where installed, else a row that says why not
        assert frame.loc[peer, "step_us"] > 0 or str(frame.loc[peer, "note"]).startswith("skipped")


def test_bench_shapes_reach_the_parameter_count(scripts):
    bench = scripts("bench_optim")
    shapes = bench.llama_shapes(1e9, 2048, 5632, 32000)
    total = sum(torch.Size(s).numel() for s in shapes)
    per_layer = 4 * 2048**2 + 3 * 2048 * 5632 + 2 * 2048
    assert abs(total - 1e9) <= per_layer / 2
    assert shapes.count((5632, 2048)) == 2 * shapes.count((2048, 5632))


def test_bench_compares_ours_with_the_fastest_peer_that_ran(scripts):
    bench = scripts("bench_optim")
    frame = pd.DataFrame(
        [
            {"contender": "ours stochastic", "family": "cutlass_ext", "step_us": 300.0, "total_bytes_per_param": 6},
            {"contender": "torchao SR", "family": "torchao", "step_us": 600.0, "total_bytes_per_param": 6},
            {"contender": "optimi Kahan", "family": "optimi", "step_us": float("nan"), "total_bytes_per_param": None},
            {"contender": "torch fused FP32 master", "family": "torch", "step_us": 450.0, "total_bytes_per_param": 14},
            {
                "contender": "torch fused BF16 (nearest)",
                "family": "reference",
                "step_us": 100.0,
                "total_bytes_per_param": 6,
            },
        ]
    )
    versus = bench.comparison(frame).iloc[0]
    assert versus["fastest_peer"] == "torch fused FP32 master"
    assert versus["speedup"] == pytest.approx(1.5)


def test_train_lm_validates_on_more_batches_during_training_than_at_the_end(scripts):
    train_lm = scripts("train_lm")
    config = train_lm.TrainConfig(**{**train_lm.QUICK, "precision": "fp32", "eval_batches": 3, "final_eval_batches": 1})
    result = train_lm.train(config)
    assert list(result["curve"]["step"]) == [5, 10]
    assert math.isfinite(result["final_val_loss"])
