"""The scripts of python/ without a GPU (CUDA_VISIBLE_DEVICES=""): one line on stderr and exit status 2 where they
need one, as argparse does for a bad argument; bad names refused by argparse before that check; --help answers."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "python"
# no GPU even on a GPU machine; the scripts import cutlass_ext from this tree, installed or not
ENVIRONMENT = {
    **os.environ,
    "CUDA_VISIBLE_DEVICES": "",
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(SCRIPTS / f"{script}.py"), *args]
    return subprocess.run(command, cwd=ROOT, env=ENVIRONMENT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "script, args",
    [
        ("bench_gemm", []),
        ("bench_fp8", []),
        ("bench_ozaki", []),
        ("bench_transformer_step", ["--out", "{tmp}/step.csv"]),
        ("bench_fp8_block", ["--out", "{tmp}/block.csv"]),
        ("profile_gemm", []),
        ("optim_unit_example", ["--device", "cuda"]),
        ("bench_optim", []),  # not a 1e9-parameter run on the CPU unasked
        ("first_call_times", ["--out", "{tmp}/first_call.csv"]),  # before any process that runs nvcc
    ],
)
def test_a_script_that_needs_a_gpu_says_so_in_one_line(tmp_path, script, args):
    done = run(script, *(arg.format(tmp=tmp_path) for arg in args))
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip() == f"{script} needs a CUDA device"
    assert not list(tmp_path.iterdir())  # nothing written, no folder made


@pytest.mark.parametrize(
    "script, args",
    [
        ("train_lm", ["--precision", "halfhalf", "--device", "cpu"]),
        ("lm_precision_modes", ["--device", "cpu"]),  # its default precisions include the switched ones
    ],
)
def test_a_switched_precision_is_refused_on_the_cpu_outside_quick(script, args):
    done = run(script, *args)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"{script}: precision ") and "needs a CUDA device" in line and "--quick" in line


@pytest.mark.parametrize(
    "script, args, named",
    [
        ("bench_gemm", ["--modes", "bogus"], "bogus"),
        ("bench_gemm", ["--variants", "bogus"], "bogus"),
        ("bench_transformer_step", ["--out", "x.csv", "--modes", "bogus"], "bogus"),
        ("bench_ozaki", ["--split-modes", "bogus"], "bogus"),
        ("bench_fp8_block", ["--out", "x.csv", "--variants", "bogus"], "bogus"),
        ("bench_fp8", ["--shapes", "missing.yaml"], "missing.yaml"),
        ("first_call_times", ["--out", "x.csv", "--timeout", "-1"], "-1"),
        ("optim_least_squares", ["--device", "bogus"], "bogus"),
        ("lowbit_cnn_dual_stage", ["--man", "-1"], "man=-1"),
        ("lowbit_mlp_digits", ["--width", "0"], "'0'"),
    ],
)
def test_a_bad_value_is_named_before_the_gpu_check(script, args, named):
    done = run(script, *args)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "needs a CUDA device" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{script}.py: error: ") and named in last


def test_help_answers_without_a_gpu():
    done = run("bench_gemm", "--help")
    assert done.returncode == 0 and "--modes" in done.stdout


@pytest.fixture
def script_device(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    return importlib.import_module("script_device")


def test_device_names(script_device):
    assert [script_device.device_name(name) for name in ("cpu", "cuda", "cuda:1")] == ["cpu", "cuda", "cuda:1"]
    for bad in ("bogus", "cpu:0", "cuda:x", "xpu", ""):
        with pytest.raises(Exception, match="is not a device"):
            script_device.device_name(bad)


def test_checked_passes_the_checks_message_to_argparse(script_device):
    def check(value):
        if value > 3:
            raise ValueError(f"value={value} is over 3")

    parse = script_device.checked(check, int)
    assert parse("2") == 2
    with pytest.raises(Exception, match="value=5 is over 3") as error:
        parse("5")
    assert type(error.value).__name__ == "ArgumentTypeError"


def test_a_switched_precision_on_the_cpu_is_labelled_fp32(monkeypatch):
    """--quick keeps running the switched precisions on the CPU (the smoke tests do); their rows say what ran."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    train_lm = importlib.import_module("train_lm")
    config = train_lm.TrainConfig(**{**train_lm.QUICK, "precision": "halfhalf", "steps": 2, "eval_every": 1})
    result = train_lm.train(config, log=lambda message: None)
    assert result["products"] == train_lm.UNROUTED
    assert set(result["curve"]["products"]) == {train_lm.UNROUTED}
    fp32 = train_lm.TrainConfig(**{**train_lm.QUICK, "precision": "fp32"})
    assert train_lm.products(fp32) == "torch"
    assert train_lm.products(train_lm.TrainConfig(precision="halfhalf", device="cuda")) == "ext.gemm halfhalf"


def test_a_full_low_bit_experiment_without_a_gpu_stops_with_one_line():
    """Only --quick runs on the CPU reference: the full experiment there would take hours."""
    completed = subprocess.run(
        [sys.executable, str(SCRIPTS / "lowbit_mlp_digits.py")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        check=False,
    )
    assert completed.returncode == 2 and completed.stderr.strip() == "lowbit_mlp_digits needs a CUDA device"
