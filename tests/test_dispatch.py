"""Dispatch without a GPU: the table chain (this GPU's, the same architecture's, the built-in defaults), variants the
device cannot run, `explain`, a sweep's tuned table that never drops shipped rows, and build failures."""

from __future__ import annotations

import hashlib
import importlib
import logging
import shutil

import pandas as pd
import pytest
import torch

from cutlass_ext import device, explain, families, fp8, registry, tuned
from cutlass_ext.families.sm90.config import DEFAULTS as DEFAULT_SPLIT
from cutlass_ext.families.sm90.config import Sm90Config
from cutlass_ext.fp8_block.api import dense_plan, grouped_plan
from cutlass_ext.lowbit.kernel import DEFAULT_CONFIG as LOWBIT_DEFAULT
from cutlass_ext.lowbit.kernel import MODE as LOWBIT_MODE
from cutlass_ext.ozaki import OzakiConfig
from sweeps import paths
from sweeps import sweep as sweep_module

H100, H200, A100, RTX4090 = (
    device.named(name) for name in ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "RTX 4090")
)
SHIPPED = tuned.TUNED_DIR / "h100.csv"
gemm = importlib.import_module("cutlass_ext.gemm")  # the module, which the package's `gemm` function shadows


@pytest.fixture(autouse=True)
def shipped_tables(monkeypatch):
    """Each test reads the shipped tables, or its own copy of the tuned folder, with no override."""
    monkeypatch.delenv(tuned.TABLE_ENV, raising=False)
    tuned.set_tuned_table(None)
    yield
    tuned.set_tuned_table(None)


def row(mode, m, n, k, name):
    return {"mode": mode, "m": m, "n": n, "k": k, "batch": 1, "name": name, "tflops": 1.0, "gpu": "x", "date": "d"}


def test_architectures_are_read_from_names():
    assert [g.arch for g in (H100, H200, A100, RTX4090)] == ["90a", "90a", "80", "89"]
    assert device.arch_of_name("NVIDIA GeForce RTX 3090") == "86"
    assert device.arch_of_name("NVIDIA L40S") == "89"
    assert device.named("Some Future GPU").arch is None


@pytest.fixture
def only_the_h100_table(tmp_path, monkeypatch):
    shutil.copy(SHIPPED, tmp_path / "h100.csv")
    monkeypatch.setattr(tuned, "TUNED_DIR", tmp_path)
    tuned.set_tuned_table(None)


def test_an_h200_without_its_own_table_reads_the_h100s(only_the_h100_table):
    chain = tuned.table_chain(H200)
    assert [path.name for path, _ in chain] == ["h100.csv"] and "architecture fallback" in chain[0][1]
    chosen = gemm.plan(H200, "tf32tf32", 8192, 8192, 8192)
    assert chosen.path == "sm90" and chosen.variants == gemm.plan(H100, "tf32tf32", 8192, 8192, 8192).variants
    assert "h100.csv" in chosen.source and "this GPU's table" in gemm.plan(H100, "tf32tf32", 8192, 8192, 8192).source
    names, source = fp8.plan(H200, "e4m3", "e4m3", "bf16", "fast", 16, 8192, 8192)
    assert "_swap" in names[0] and "h100.csv" in source


def test_the_shipped_h200_table_answers_its_corrected_fp8_and_block_modes():
    assert [p.name for p, _ in tuned.table_chain(H200)] == ["h200.csv", "h100.csv"]
    for mode in ("tf32tf32", "halfhalf"):
        chosen = gemm.plan(H200, mode, 8192, 8192, 8192)
        assert chosen.path == "sm90" and "h200.csv" in chosen.source
    for m, swapped in ((16, True), (4096, False)):  # block-scaled: its own sweep's winners
        name, source = dense_plan(H200, "e4m3", "e4m3", "bf16", 128, m, 24576, 1536)
        assert ("_swap" in name) == swapped and "h200.csv" in source
    for m, swapped in ((16, True), (16384, False)):  # per tensor: the H100's leaders re-timed on the H200
        names, source = fp8.plan(H200, "e4m3", "e4m3", "bf16", "fast", m, 8192, 8192)
        assert ("_swap" in names[0]) == swapped and "h200.csv" in source


def test_own_table_first_then_the_same_architectures_entry_by_entry(tmp_path, monkeypatch):
    shutil.copy(SHIPPED, tmp_path / "h100.csv")
    own = Sm90Config("tf32tf32", (128, 256, 32)).name
    pd.DataFrame([row("tf32tf32", 8192, 8192, 8192, own)]).to_csv(tmp_path / "h200.csv", index=False)
    monkeypatch.setattr(tuned, "TUNED_DIR", tmp_path)
    tuned.set_tuned_table(None)
    assert [p.name for p, _ in tuned.table_chain(H200)] == ["h200.csv", "h100.csv"]
    assert gemm.plan(H200, "tf32tf32", 8192, 8192, 8192).variants == (own,)
    halfhalf = gemm.plan(H200, "halfhalf", 8192, 8192, 8192)  # the H200's table has no halfhalf entry
    assert "h100.csv" in halfhalf.source and halfhalf.path == "sm90"
    assert tuned.table_chain(A100) == []  # no sm80-class table shipped


def test_an_own_entry_4x_away_does_not_hide_a_siblings_entry_at_the_shape(tmp_path, monkeypatch):
    shutil.copy(SHIPPED, tmp_path / "h100.csv")
    h100 = pd.read_csv(SHIPPED)
    at_64 = h100[(h100["mode"] == "fp8_fast") & (h100["m"] == 64) & (h100["n"] == 8192) & (h100["k"] == 8192)]
    own_16 = "fp8_e4m3e4m3_bf16_64x16x256_c1x1_pp_fast_swap_l2pf8"  # an H200 decode winner at M = 16 only
    assert own_16 != at_64["name"].iloc[0]
    pd.DataFrame([row("fp8_fast", 16, 8192, 8192, own_16)]).to_csv(tmp_path / "h200.csv", index=False)
    monkeypatch.setattr(tuned, "TUNED_DIR", tmp_path)
    tuned.set_tuned_table(None)
    config, source = tuned.resolve(H200.name, "fp8_fast", 16, 8192, 8192, m_bucket_above=True, gpu=H200)
    assert config.name == own_16 and "h200.csv" in source  # its own shape: this GPU's table
    config, source = tuned.resolve(H200.name, "fp8_fast", 64, 8192, 8192, m_bucket_above=True, gpu=H200)
    assert config.name == at_64["name"].iloc[0] and "h100.csv" in source  # the sibling measured M = 64


def test_defaults_are_each_architectures_fast_path():
    assert gemm.plan(A100, "tf32tf32", 8192, 8192, 8192).path == "sm80"
    unknown = gemm.plan(device.named("Some Future GPU"), "halfhalf", 8192, 8192, 8192)
    assert unknown.path == "sm80" and "default" in unknown.source
    # off every tuned shape on Hopper: the corrected sm90 kernels once the problem fills a wave of tiles
    wide = gemm.plan(H200, "tf32tf32", 65536, 4096, 256)
    assert wide.path == "sm90" and wide.variants == (DEFAULT_SPLIT["tf32tf32"].name,) and "default" in wide.source
    assert gemm.plan(H200, "tf32tf32", 256, 256, 65536).path == "sm80"  # 4 tiles: split-K on the sm80 kernels
    assert gemm.plan(H200, "tf32tf32", 65536, 4096, 256, hopper_ok=False).path == "sm80"  # e.g. N % 4 != 0
    assert gemm.plan(H200, "tf32", 8192, 8192, 8192).path == "sm80"  # no Hopper kernel for plain TF32
    names, source = fp8.plan(H200, "e4m3", "e4m3", "bf16", "promoted", 8, 2048, 512)
    assert names[0] == fp8.DECODE_DEFAULTS["promoted", 16] and "sm90 default" in source
    assert names[-1] == fp8._default_variant("e4m3", "e4m3", "bf16", "promoted")


def test_dispatch_never_picks_what_the_device_cannot_run(tmp_path):
    path = tmp_path / "mixed.csv"
    hopper = Sm90Config("tf32tf32", (128, 128, 32)).name
    pd.DataFrame([row("tf32tf32", 8192, 8192, 8192, hopper)]).to_csv(path, index=False)
    tuned.set_tuned_table(path)
    assert gemm.plan(A100, "tf32tf32", 8192, 8192, 8192).path == "sm80"
    assert gemm.plan(H100, "tf32tf32", 8192, 8192, 8192).variants == (hopper,)
    # halfhalf's 4-stage 128x128 tiles take 128 KB: sm86/sm89 have 99
    for config in (families.from_name(name) for name in gemm.plan(RTX4090, "halfhalf", 64, 64, 64).variants):
        assert config.shared_memory_bytes <= device.SHARED_MEMORY_BYTES["89"]
    assert not tuned.runs_on(families.from_name(gemm.plan(A100, "halfhalf", 64, 64, 64).variants[0]), RTX4090)


@pytest.mark.parametrize("gpu", ["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "Unknown GPU X"])
def test_explain_names_the_variant_and_its_source(gpu, capsys):
    assert explain.main(["--gpu", gpu, "--op", "gemm", "--mode", "tf32tf32", "--shape", "8192x8192x8192"]) == 0
    lines = capsys.readouterr().out.splitlines()
    runs = next(line for line in lines if line.startswith("runs: ")).removeprefix("runs: ")
    source = next(line for line in lines if line.startswith("source: "))
    hopper = gpu.startswith("NVIDIA H")
    own_table = {"NVIDIA H100 80GB HBM3": "h100.csv", "NVIDIA H200": "h200.csv"}.get(gpu, "h100.csv")
    assert ("_sm90_" in runs) == hopper and (own_table in source) == hopper
    assert explain.main(["--gpu", gpu, "--op", "gemm_fp8", "--mode", "fast", "--shape", "16x8192x8192"]) == 0
    fp8_lines = capsys.readouterr().out
    assert ("runs: fp8_" in fp8_lines) == hopper and (("Hopper (sm90) GPUs only" in fp8_lines) != hopper)


def test_explain_names_the_cublas_and_ozaki_paths(capsys):
    assert explain.main(["--gpu", "NVIDIA A10", "--mode", "fp32", "--shape", "64x64x64"]) == 0
    assert "path: cuBLAS" in capsys.readouterr().out
    assert explain.main(["--gpu", "NVIDIA H200", "--mode", "int8x7", "--shape", "8192x8192x8192"]) == 0
    out = capsys.readouterr().out
    assert f"runs: {OzakiConfig(moduli=7).name}" in out and "path: ozaki" in out
    assert explain.main(["--gpu", "NVIDIA A100-SXM4-80GB", "--mode", "int8x8", "--shape", "64x64x64"]) == 0
    assert "sm_90a GPUs only" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        explain.main(["--gpu", "NVIDIA H200", "--mode", "int8x2", "--shape", "64x64x64"])
    assert "int8x2" in capsys.readouterr().err


def test_explain_names_the_lowbit_variant(capsys):
    assert explain.main(["--gpu", "NVIDIA H200", "--op", "lowbit", "--shape", "4096x4096x4096"]) == 0
    out = capsys.readouterr().out
    entry = tuned.lookup("NVIDIA H200", LOWBIT_MODE, 4096, 4096, 4096)
    assert entry is not None and f"runs: {entry.name}" in out and "h200.csv" in out
    assert explain.main(["--gpu", "NVIDIA A100-SXM4-80GB", "--op", "lowbit", "--shape", "64x64x64"]) == 0
    assert f"runs: {LOWBIT_DEFAULT.name}" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        explain.main(["--gpu", "NVIDIA H200", "--op", "lowbit", "--mode", "fast", "--shape", "64x64x64"])
    assert "--mode" in capsys.readouterr().err


def test_explain_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        explain.main(["--gpu", "NVIDIA H200", "--mode", "tf32tf32", "--shape", "8192x8192"])
    assert "--shape" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        explain.main(["--gpu", "NVIDIA H200", "--op", "gemm_fp8", "--mode", "tf32tf32", "--shape", "1x8x16"])
    assert "--mode" in capsys.readouterr().err


def test_the_table_source_is_logged_once(caplog):
    with caplog.at_level(logging.INFO, logger="cutlass_ext.dispatch"):
        for shape in ((8192, 8192, 8192), (4096, 4096, 4096), (8192, 8192, 8192)):
            gemm.plan(H200, "tf32tf32", *shape)
            fp8.plan(H200, "e4m3", "e4m3", "bf16", "fast", shape[0] // 512, shape[1], shape[2])
            grouped_plan(H200, "e4m3", "e4m3", "bf16", 128, 64, 4096, 7168, 8)
            fp8.plan(H200, "e4m3", "e4m3", "bf16", "fast", 1, 8192, 28672)  # an H100 entry the H200 lacks: h100.csv
    for table in ("h200.csv", "h100.csv"):
        assert len([r for r in caplog.records if table in r.getMessage()]) == 1, table


def _digests():
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(tuned.TUNED_DIR.glob("*.csv"))}


def test_a_sweep_with_out_leaves_the_shipped_tables_as_they_were(tmp_path):
    before = _digests()
    sweep = pd.DataFrame(
        [
            row("tf32tf32", 8192, 8192, 8192, "tf32tf32_sm80_64x128x32_64x32x16_s3_a4")
            | {"family": "sm80", "status": "ok", "gpu": "NVIDIA H100 80GB HBM3"}
        ]
    )
    sweep.to_csv(tmp_path / "sweep_sm80_corrected.csv", index=False)
    path = paths.tuned_table_path("NVIDIA H100 80GB HBM3", tmp_path, None)
    assert path == tmp_path / "tuned_h100.csv"
    sweep_module.write_tuned(tmp_path, "NVIDIA H100 80GB HBM3", path)
    assert _digests() == before
    assert list(pd.read_csv(path)["name"]) == ["tf32tf32_sm80_64x128x32_64x32x16_s3_a4"]
    assert paths.tuned_table_path("NVIDIA H100 80GB HBM3", None, None) == SHIPPED


def test_merging_into_a_table_keeps_the_rows_not_measured(tmp_path):
    path = tmp_path / "h100.csv"
    shutil.copy(SHIPPED, path)
    shipped = pd.read_csv(SHIPPED)
    new = pd.DataFrame([row("tf32tf32", 8192, 8192, 8192, "tf32tf32_sm80_64x128x32_64x32x16_s3_a4")])
    tuned.merge_table(new, path)
    merged = pd.read_csv(path)
    assert len(merged) == len(shipped)  # one row replaced, every other kept (FP8 and halfhalf among them)
    assert set(merged[merged["mode"] != "tf32tf32"]["name"]) == set(shipped[shipped["mode"] != "tf32tf32"]["name"])
    replaced = merged[(merged["mode"] == "tf32tf32") & (merged["m"] == 8192)]["name"]
    assert list(replaced) == ["tf32tf32_sm80_64x128x32_64x32x16_s3_a4"]


def test_a_variant_that_fails_to_build_falls_back_with_a_warning(monkeypatch):
    loaded = []

    def ensure(names, device_):
        if names == ["broken"]:
            raise RuntimeError("building kernel broken for sm_90a failed:\nerror")
        loaded.extend(names)

    monkeypatch.setattr(registry, "ensure_names_registered", ensure)
    monkeypatch.setattr(registry, "device_arch", lambda device_=None: "90a")
    registry._failed.clear()
    cuda = torch.device("cuda", 0)
    with pytest.warns(RuntimeWarning, match="falling back to default_a4"):
        assert registry.first_usable(["broken", "default_a4", "default_a1"], cuda) == ["default_a4", "default_a1"]
    assert loaded == ["default_a4"]  # the fallbacks after the one that runs are not built
    assert registry.first_usable(["broken", "default_a4"], cuda) == ["default_a4"]  # remembered: no second try
    with pytest.raises(RuntimeError, match="building kernel broken"):
        registry.first_usable(["broken"], cuda)
    registry._failed.clear()


def test_fallbacks_are_loaded_only_when_the_binding_asks(monkeypatch):
    loaded, calls = [], []

    def op(x, variants):
        calls.append(list(variants))
        if len(calls) == 1:
            raise RuntimeError(f"{registry.UNLOADED_MARKER} second")
        return x

    monkeypatch.setattr(registry, "ensure_names_registered", lambda names, device_: loaded.extend(names))
    assert registry.call_loading_fallbacks(op, ["first", "second"], torch.device("cuda", 0), 7) == 7
    assert loaded == ["first", "second"] and len(calls) == 2
    with pytest.raises(RuntimeError, match="other"):
        registry.call_loading_fallbacks(lambda x, v: (_ for _ in ()).throw(RuntimeError("other")), ["a"], None, 1)


def test_constant_result_marks_functions_as_torch_compile_does():
    import torch._dynamo

    from cutlass_ext.compiling import constant_result

    def ours():
        return 1

    def torchs():
        return 1

    constant_result(ours)
    torch._dynamo.assume_constant_result(torchs)
    assert {k: v for k, v in vars(ours).items()} == {k: v for k, v in vars(torchs).items()} != {}


def test_a_cached_constant_is_called_by_torch_compile_and_cached_in_eager_code():
    """The constant mark on functools' cache itself is not seen: fullgraph=True refused the call (traced into the
    cache, a skipped function); on the plain function that calls the cache it is."""
    import glob

    from cutlass_ext.compiling import cached_constant

    calls = []

    @cached_constant(maxsize=8)
    def pick(size: int) -> str:
        calls.append(size)
        return "wide" if not glob.glob("/nonexistent-cutlass-ext-*") else "narrow"

    compiled = torch.compile(lambda t: t * (2 if pick(3) == "wide" else 3), fullgraph=True)
    assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 2.0))
    assert pick(3) == pick(3) == "wide" and calls == [3]
    pick.cache_clear()
    pick(3)
    assert calls == [3, 3]


def test_device_facts_are_constants_to_torch_compile(monkeypatch):
    """Per-device facts are read outside traced code: torch.compile(fullgraph=True) calls them while tracing and
    bakes the answer in, never tracing their reads (a subprocess here, a driver query on a GPU)."""
    import subprocess

    import torch._dynamo

    reads = []

    def info(index):
        reads.append(index)
        subprocess.run(["true"], check=True)  # untraceable: a graph break if dynamo stepped inside
        return device.DeviceInfo("NVIDIA H200", "90a", device.SHARED_MEMORY_BYTES["90a"])

    monkeypatch.setattr(registry.device_facts, "info", info)
    torch._dynamo.reset()

    @torch.compile(fullgraph=True, backend="eager")
    def scaled(x):
        hopper = registry.device_arch(torch.device("cuda", 0)) == "90a" and registry.device_info(0).hopper
        return x * 2 if hopper else x

    assert torch.equal(scaled(torch.ones(3)), torch.full((3,), 2.0))
    assert reads and set(reads) == {0}
    torch._dynamo.reset()


def test_a_hand_edited_row_of_another_mode_never_runs(tmp_path):
    """A table row naming another mode's kernel (halfhalf planes under tf32tf32, fast under promoted accumulation)
    would compute another product: dispatch takes its default and says why."""
    halfhalf = DEFAULT_SPLIT["halfhalf"].name
    fast = "fp8_e4m3e4m3_bf16_64x16x256_c1x1_pp_fast_swap"
    path = tmp_path / "table.csv"
    rows = [row("tf32tf32", 4096, 4096, 4096, halfhalf), row("fp8_promoted", 1, 8192, 8192, fast)]
    pd.DataFrame(rows).to_csv(path, index=False)
    tuned.set_tuned_table(path)
    chosen = gemm.plan(H100, "tf32tf32", 4096, 4096, 4096)
    assert chosen.variants == (DEFAULT_SPLIT["tf32tf32"].name,) and "a halfhalf kernel, not tf32tf32's" in chosen.source
    names, source = fp8.plan(H100, "e4m3", "e4m3", "bf16", "promoted", 1, 8192, 8192)
    assert fast not in names and "a fp8_fast kernel, not fp8_promoted's" in source


@pytest.mark.parametrize(
    "text, message",
    [
        ("mode,m,n,k,name\ntf32tf32,4k,4096,4096,x\n", r"table.csv, line 2: m, n, k and batch must be integers"),
        ("mode,m,n,k,name\ntf32tf32,4096,4096,4096\n", r"table.csv, line 2: needs a mode, a name and sizes >= 1"),
        ("mode,m,n,k,name\ntf32tf32,0,4096,4096,x\n", r"table.csv, line 2: needs a mode, a name and sizes >= 1"),
        (b"mode,m,n,k,name\ntf32tf32,1,1,1,\xff\n", r"table.csv \(set_tuned_table\) cannot be read: not UTF-8"),
    ],
)
def test_a_bad_table_is_named_with_its_line(tmp_path, text, message):
    path = tmp_path / "table.csv"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    tuned.set_tuned_table(path)
    with pytest.raises(ValueError, match=message):
        gemm.plan(H100, "tf32tf32", 4096, 4096, 4096)


def test_a_spreadsheets_byte_order_mark_and_a_directory(tmp_path):
    path = tmp_path / "table.csv"
    own = Sm90Config("tf32tf32", (128, 256, 32)).name
    path.write_text(pd.DataFrame([row("tf32tf32", 4096, 4096, 4096, own)]).to_csv(index=False), encoding="utf-8-sig")
    tuned.set_tuned_table(path)
    assert gemm.plan(H100, "tf32tf32", 4096, 4096, 4096).variants == (own,)
    with pytest.raises(FileNotFoundError, match="is a directory, not a CSV file"):
        tuned.set_tuned_table(tmp_path)


def test_the_environment_variable_changed_while_running_takes_effect(tmp_path, monkeypatch):
    own = Sm90Config("tf32tf32", (128, 256, 32)).name
    path = tmp_path / "table.csv"
    pd.DataFrame([row("tf32tf32", 4096, 4096, 4096, own)]).to_csv(path, index=False)
    before = gemm.plan(H100, "tf32tf32", 4096, 4096, 4096).variants
    assert before != (own,)
    monkeypatch.setenv(tuned.TABLE_ENV, str(path))
    assert gemm.plan(H100, "tf32tf32", 4096, 4096, 4096).variants == (own,)
    monkeypatch.delenv(tuned.TABLE_ENV)
    assert gemm.plan(H100, "tf32tf32", 4096, 4096, 4096).variants == before


def test_a_tables_nearest_entry_the_gpu_cannot_run_leaves_its_next_nearest_to_answer(tmp_path):
    path = tmp_path / "a100.csv"
    small, large = "tf32tf32_sm80_64x64x32_32x32x16_s3_a4", "tf32tf32_sm80_128x128x32_64x64x16_s4_a4"
    assert tuned.runs_on(families.from_name(small), RTX4090)
    assert not tuned.runs_on(families.from_name(large), RTX4090)  # 128 KB of shared memory for 99
    pd.DataFrame([row("tf32tf32", 1024, 1024, 1024, small), row("tf32tf32", 4096, 4096, 4096, large)]).to_csv(
        path, index=False
    )
    tuned.set_tuned_table(path)
    assert tuned.resolve(RTX4090.name, "tf32tf32", 3072, 3072, 3072, gpu=RTX4090)[0].name == small
    assert tuned.resolve(A100.name, "tf32tf32", 3072, 3072, 3072, gpu=A100)[0].name == large


def test_boards_of_one_chip_have_tables_of_their_own():
    assert [tuned.gpu_key(g) for g in ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL")] == [
        "h100",
        "h100_pcie",
        "h100_nvl",
    ]
    chain = tuned.table_chain(device.named("NVIDIA H100 PCIe"))
    assert chain[0] == (SHIPPED, "architecture fallback (sm90a: h100's table)")


def test_merging_into_a_table_without_batch_and_dropping_shapes_measured_without_a_winner(tmp_path):
    path = tmp_path / "table.csv"
    old = "tf32tf32_sm80_64x64x32_32x32x16_s3_a4"
    existing = pd.DataFrame([row("tf32tf32", 1024, 1024, 1024, old), row("tf32tf32", 2048, 2048, 2048, old)])
    existing.drop(columns="batch").to_csv(path, index=False)  # the reader takes batch 1 for a missing column
    new = pd.DataFrame([row("tf32tf32", 1024, 1024, 1024, "tf32tf32_sm80_64x128x32_64x32x16_s3_a4")])
    failed = pd.DataFrame([{"mode": "tf32tf32", "m": 2048, "n": 2048, "k": 2048}])  # every variant inaccurate there
    tuned.merge_table(new, path, failed)
    merged = pd.read_csv(path)
    assert merged[["m", "batch", "name"]].values.tolist() == [[1024, 1, "tf32tf32_sm80_64x128x32_64x32x16_s3_a4"]]
    tuned.set_tuned_table(path)
    assert tuned.resolve(A100.name, "tf32tf32", 1024, 1024, 1024, gpu=A100)[0] is not None  # still readable


def test_a_row_major_winner_leaves_other_layouts_their_defaults():
    """The 1024^3 tf32tf32 entry is a row-major kernel: a call with A or B column-major takes the defaults that
    read those layouts (the binding would also run the winner on copies, accurately but slower)."""
    winner = gemm.plan(H200, "tf32tf32", 1024, 1024, 1024)
    assert winner.path == "sm80" and "entry tf32tf32 1024x1024x1024" in winner.source
    assert families.from_name(winner.variants[0]).layout_a == "row"
    for layouts in (("col", "row"), ("row", "col"), ("col", "col")):
        chosen = gemm.plan(H200, "tf32tf32", 1024, 1024, 1024, *layouts)
        first = families.from_name(chosen.variants[0])
        assert (first.layout_a, first.layout_b) == layouts and "default" in chosen.source
        assert winner.variants[0] not in chosen.variants
