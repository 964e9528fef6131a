"""`torchrun python/train_lm.py --distributed ddp|fsdp` on 2 CPU ranks (gloo): the global batch split across the
ranks follows one process's loss curve, and only rank 0 writes it."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow  # processes and training runs: minutes on two cores, kept out of CI

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "python" / "train_lm.py")
# the example imports cutlass_ext from this tree, installed or not
ENVIRONMENT = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def curve(folder: Path, suffix: str = "") -> pd.DataFrame:
    return pd.read_csv(folder / f"lm_bf16-stochastic_seed0{suffix}.csv")


def launch(command: list[str]) -> None:
    result = subprocess.run(command, cwd=ROOT, env=ENVIRONMENT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    folder = tmp_path_factory.mktemp("single")
    launch([sys.executable, EXAMPLE, "--quick", "--out", str(folder)])
    return curve(folder)


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_two_ranks_follow_one_process(one_process, tmp_path, mode):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    launch([*torchrun, EXAMPLE, "--quick", "--distributed", mode, "--out", str(tmp_path)])
    assert [path.name for path in tmp_path.iterdir()] == [f"lm_bf16-stochastic_seed0_{mode}2.csv"]
    ranks = curve(tmp_path, f"_{mode}2")
    assert list(ranks["step"]) == list(one_process["step"])
    # the same global batches; the gradients differ by the order of their sums only
    for column in ("train_loss", "val_loss"):
        assert list(ranks[column]) == pytest.approx(list(one_process[column]), rel=1e-3)


def test_distributed_needs_torchrun_and_a_batch_the_ranks_divide(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "python"))
    train_lm = importlib.import_module("train_lm")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match="torchrun"):
        train_lm.validate(train_lm.TrainConfig(distributed="ddp"))
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(ValueError, match="batch=64"):
        train_lm.validate(train_lm.TrainConfig(distributed="fsdp", batch=64))
    with pytest.raises(ValueError, match="distributed"):
        train_lm.validate(train_lm.TrainConfig(distributed="zero"))
