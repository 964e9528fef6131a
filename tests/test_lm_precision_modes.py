"""python/lm_precision_modes.py in its --quick mode on the CPU (where the switch routes nothing): one row per
precision with its step time, the curves and the plot."""

import importlib
import math
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow  # processes and training runs: minutes on two cores, kept out of CI

SCRIPTS = Path(__file__).resolve().parent.parent / "python"

pytest.importorskip("matplotlib")


def test_quick_run_writes_rows_curves_and_plot(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    module = importlib.import_module("lm_precision_modes")
    module.main(["--quick", "--out", str(tmp_path)])
    runs = pd.read_csv(tmp_path / "lm_precision_modes.csv")
    curves = pd.read_csv(tmp_path / "lm_precision_modes_curves.csv")
    assert (tmp_path / "lm_precision_modes.png").is_file()
    assert list(runs["precision"]) == list(module.PRECISIONS)
    assert (runs["step_ms"] > 0).all() and (runs["step_ms"] * runs["steps"] < runs["seconds"] * 1000).all()
    assert (runs["final_val_loss"] < math.log(256)).all()
    assert set(curves["precision"]) == set(module.PRECISIONS)
    assert module.summary(runs).loc["fp32", "gap_to_fp32"] == 0.0


def test_train_lm_takes_the_switched_precisions(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    train_lm = importlib.import_module("train_lm")
    for precision in train_lm.SWITCHED:
        train_lm.validate(train_lm.TrainConfig(precision=precision))
    assert not set(train_lm.SWITCHED) & set(train_lm.PRECISIONS)  # the BF16 study's list stays its own
