"""The first-call timer's cache states, without a GPU: which folder each fresh process sees, and the CSV it writes."""

import csv
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "python" / "first_call_times.py"


@pytest.fixture
def timer(monkeypatch):
    spec = importlib.util.spec_from_file_location("first_call_times", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.prebuilds = []

    def prebuild(args, cache, timeout):
        module.prebuilds.append(args)
        (cache / "kernels" / "sm_90a" / "variant").mkdir(parents=True)
        (cache / "kernels" / "sm_90a" / "variant" / "lib.so").write_bytes(b"\0")
        (cache / "locks").mkdir()
        (cache / "locks" / "entry.lock").write_text("")
        return 12.5 + len(module.prebuilds)

    monkeypatch.setattr(module, "prebuild", prebuild)
    return module


class Recorder:
    """Stands in for the fresh process: records the cache folder and what it held when the process started."""

    def __init__(self, fail=()):
        self.calls, self.fail = [], set(fail)

    def __call__(self, mode, cache, timeout):
        held = None if cache is None else sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())
        self.calls.append((mode, cache, held))
        if mode in self.fail:
            raise RuntimeError(f"{mode}: the measuring process exited 1")
        return {"import_s": 1.25, "first_call_s": 30.0 if held == [] else 0.5, "second_call_s": 0.002, "gpu": "GPU"}


def read(path):
    with path.open() as file:
        return list(csv.DictReader(file))


def test_each_state_sees_its_own_cache_folder(timer, tmp_path):
    run = Recorder()
    out = tmp_path / "first_call.csv"
    modes = ["tf32tf32", "fp32", "fp8_decode", "fp8_prefill"]
    assert timer.measure(modes, ["cold", "warm", "prebuilt"], out, 60.0, run=run) == 0
    rows = read(out)
    assert [(r["mode"], r["state"]) for r in rows] == [(m, s) for m in modes for s in ("cold", "warm", "prebuilt")]
    by_key = {
        (mode, state): (cache, held) for (mode, cache, held), state in zip(run.calls, ["cold", "warm", "prebuilt"] * 4)
    }
    colds = [by_key[(mode, "cold")][0] for mode in modes]
    assert len(set(colds)) == len(modes) and all(by_key[(m, "cold")][1] == [] for m in modes)
    assert all(by_key[(m, "warm")][0] == by_key[(m, "cold")][0] for m in modes)
    # One plain prebuild for ext.gemm's modes, one naming FP8, each copied per mode without its locks.
    assert timer.prebuilds == [(), ("--modes", "fp8_promoted")]
    prebuilt = [by_key[(mode, "prebuilt")] for mode in modes]
    assert len({cache for cache, _ in prebuilt}) == len(modes)
    assert all(held == ["kernels/sm_90a/variant/lib.so"] for _, held in prebuilt)
    setups = {(r["mode"], r["state"]): r["setup_s"] for r in rows}
    assert setups[("tf32tf32", "prebuilt")] == setups[("fp32", "prebuilt")] == "13.5"
    assert setups[("fp8_decode", "prebuilt")] == setups[("fp8_prefill", "prebuilt")] == "14.5"
    assert {setups[(m, s)] for m in modes for s in ("cold", "warm")} == {""}
    assert rows[0]["first_call_s"] == "30.00" and rows[0]["second_call_ms"] == "2.000" and rows[0]["gpu"] == "GPU"


def test_warm_without_cold_fills_the_current_cache_first(timer, tmp_path):
    run = Recorder()
    timer.measure(["lowbit"], ["warm"], tmp_path / "out.csv", 60.0, run=run)
    assert [(mode, cache) for mode, cache, _ in run.calls] == [("lowbit", None), ("lowbit", None)]
    assert len(read(tmp_path / "out.csv")) == 1


def test_a_failed_process_is_counted_and_the_rest_still_written(timer, tmp_path, capsys):
    out = tmp_path / "out.csv"
    assert timer.measure(["halfhalf", "tf32"], ["cold"], out, 60.0, run=Recorder(fail={"halfhalf"})) == 1
    assert [r["mode"] for r in read(out)] == ["tf32"]
    assert "halfhalf cold" in capsys.readouterr().err


def test_a_second_run_appends_to_the_same_table(timer, tmp_path):
    out = tmp_path / "out.csv"
    timer.measure(["tf32"], ["cold"], out, 60.0, run=Recorder())
    timer.measure(["markidis"], ["cold"], out, 60.0, run=Recorder())
    assert [r["mode"] for r in read(out)] == ["tf32", "markidis"]
    assert out.read_text().count("first_call_s") == 1


def test_a_table_with_other_columns_is_refused(timer, tmp_path):
    out = tmp_path / "old.csv"
    out.write_text("mode,state,first_call_s,second_call_ms,import_s,setup_s,gpu\n")
    with pytest.raises(ValueError, match="write to a new file"):
        timer.measure(["tf32"], ["cold"], out, 60.0, run=Recorder())


def test_build_times_come_from_the_first_calls_log(timer, tmp_path, monkeypatch):
    log = (
        "cutlass_ext: building the torch binding (cutlass_ext_binding_0)\n"
        "cutlass_ext: torch binding built in 12.6 s\ncutlass_ext: kernel build finished in 16.7 s\n"
    )
    done = timer.subprocess.CompletedProcess(
        [], 0, stdout='{"import_s": 0.1, "first_call_s": 17.0, "second_call_s": 0.001, "gpu": "GPU"}\n', stderr=log
    )
    monkeypatch.setattr(timer.subprocess, "run", lambda *args, **kwargs: done)
    out = tmp_path / "out.csv"
    timer.measure(["fp8_decode"], ["cold"], out, 60.0)
    (row,) = read(out)
    assert (row["binding_build_s"], row["kernel_build_s"], row["first_call_s"]) == ("12.6", "16.7", "17.00")


def test_out_is_required_and_states_run_cold_first(timer, tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit):
        timer.main(["--modes", "tf32"])
    assert "--out" in capsys.readouterr().err
    seen = {}
    monkeypatch.setattr(timer, "measure", lambda modes, states, out, timeout: seen.update(states=states) or 0)
    assert timer.main(["--out", str(tmp_path / "x.csv"), "--states", "warm", "cold"]) == 0
    assert seen["states"] == ["cold", "warm"]


def test_peers_see_their_own_jit_cache_and_take_no_prebuilt_state(timer, tmp_path):
    """DeepGEMM's modes: the state's folder is its JIT cache (NVCC or NVRTC as named); `prebuilt` is ours alone."""
    run = Recorder()
    out = tmp_path / "first_call.csv"
    modes = ["fp8_block", "deepgemm_nvcc", "deepgemm_nvrtc"]
    assert timer.measure(modes, ["cold", "warm", "prebuilt"], out, 60.0, run=run) == 0
    rows = [(r["mode"], r["state"]) for r in read(out)]
    assert rows == [(m, s) for m in modes for s in ("cold", "warm", "prebuilt") if s != "prebuilt" or m == "fp8_block"]
    assert timer.prebuilds == [("--modes", "fp8_block")]
    cold = {mode: cache for mode, cache, held in run.calls if held == []}
    nvcc = timer._environment(cold["deepgemm_nvcc"], "deepgemm_nvcc")
    nvrtc = timer._environment(cold["deepgemm_nvrtc"], "deepgemm_nvrtc")
    assert nvcc["DG_JIT_CACHE_DIR"] == str(cold["deepgemm_nvcc"]) and nvcc["DG_JIT_USE_NVRTC"] == "0"
    assert nvrtc["DG_JIT_USE_NVRTC"] == "1" and nvrtc.get("CUTLASS_EXT_CACHE") != str(cold["deepgemm_nvrtc"])
    assert timer._environment(cold["fp8_block"], "fp8_block")["CUTLASS_EXT_CACHE"] == str(cold["fp8_block"])
