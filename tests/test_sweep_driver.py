"""The sweep driver's CPU-side logic: resumable tables, resuming a killed sweep, winners and tuned dispatch."""

import argparse
import dataclasses
import os
from pathlib import Path

import pandas as pd
import pytest

from cutlass_ext import families, tuned
from cutlass_ext.families import from_name
from cutlass_ext.families.sm80.config import KernelConfig
from sweeps import sweep as sweep_module
from sweeps.table import COLUMNS, ResumableTable, config_fields

ENVIRONMENT = {"gpu": "NVIDIA H100 80GB HBM3", "nvcc": "13.0", "torch": "2.11", "date": "2026-11-22T00:00:00Z"}
CONFIGS = [
    KernelConfig("tf32tf32", threadblock=(128, 128, 32), warp=(64, 32, 32)),
    KernelConfig("tf32tf32", threadblock=(128, 64, 32), warp=(64, 32, 32)),
    KernelConfig("halfhalf", warp=(32, 64, 32), stages=4, operands="packed"),
]
SHAPES = [(1024, 1024, 1024, 1), (4096, 4096, 4096, 1)]


def make_sweep(tmp_path, monkeypatch, measured_calls, kill_after=None, retimed=None):
    retimed = [] if retimed is None else retimed
    monkeypatch.setattr(sweep_module.benchmark, "environment", lambda: dict(ENVIRONMENT))

    def fake_measure(mode, run, prepare, problem, repeats, warmup=3):
        measured_calls.append((run, problem.m))
        if kill_after is not None and len(measured_calls) > kill_after:
            raise KeyboardInterrupt  # Ctrl-C in the middle of a shape
        return {
            "relres": 1e-7,
            "status": "ok",
            "time_us": 100.0,
            "tflops": float(len(measured_calls)),
            "repeats": repeats,
        }

    def fake_retime(run, prepare, problem, repeats):
        retimed.append((run, problem.m))
        return {"time_us": 99.0, "tflops": 1000.0 + len(retimed), "repeats": repeats}

    monkeypatch.setattr(
        families.get("sm80").plugin("measure"),
        "make_problem",
        lambda m, n, k, batch: argparse.Namespace(m=m, batch=batch),
    )
    monkeypatch.setattr(sweep_module.measure, "measure", fake_measure)
    monkeypatch.setattr(sweep_module.measure, "retime", fake_retime)
    monkeypatch.setattr(families.get("sm80").plugin("measure"), "kernel_runner", lambda config: (config.name, None))
    monkeypatch.setattr(
        sweep_module.Sweep, "_peers", lambda self, problem: iter([("cublas", "fp32", "torch.matmul ieee", "sgemm")])
    )
    args = argparse.Namespace(
        out=tmp_path,
        space="configs/sm80_corrected.yaml",
        screen_repeats=2,
        finalists=1,
        repeats=5,
        power_top=0,
        tuned_out=None,
    )
    sweep = sweep_module.Sweep(args, argparse.Namespace(arch="90a"))
    sweep.runnable = list(CONFIGS)
    return sweep


def test_a_killed_sweep_resumes_without_redoing_finished_rows(tmp_path, monkeypatch):
    calls = []
    with pytest.raises(KeyboardInterrupt):
        make_sweep(tmp_path, monkeypatch, calls, kill_after=5).measure(SHAPES)
    table = pd.read_csv(tmp_path / "sweep_sm80_corrected.csv")
    assert len(table) == 5  # every row measured before the interrupt was kept
    resumed_calls = []
    make_sweep(tmp_path, monkeypatch, resumed_calls).measure(SHAPES)
    table = pd.read_csv(tmp_path / "sweep_sm80_corrected.csv")
    assert len(table) == len(SHAPES) * (len(CONFIGS) + 1)  # peers are rows too
    assert len(resumed_calls) == len(table) - 5  # nothing finished was measured again
    assert not table.duplicated(["name", "m", "n", "k", "batch", "gpu"]).any()
    assert set(table.columns) == set(COLUMNS)
    packed = table[table["name"] == CONFIGS[2].name].iloc[0]
    assert packed["operands"] == "packed" and packed["threadblock"] == "128x128x32"


def test_each_modes_fastest_screened_rows_are_timed_again_with_full_repeats(tmp_path, monkeypatch):
    calls, retimed = [], []
    make_sweep(tmp_path, monkeypatch, calls, retimed=retimed).measure(SHAPES)
    table = pd.read_csv(tmp_path / "sweep_sm80_corrected.csv")
    ours = table[table["family"] == "sm80"]
    # screening ranked the tf32tf32 variants by their (fake) speed: the later call was faster
    finalists = ours[ours["repeats"] == 5]
    assert sorted(zip(finalists["m"], finalists["name"])) == sorted(
        [(m, CONFIGS[1].name) for m, *_ in SHAPES] + [(m, CONFIGS[2].name) for m, *_ in SHAPES]
    )
    assert (finalists["tflops"] > 1000).all()  # their times are the retimed ones
    assert (ours[ours["repeats"] != 5]["repeats"] == 2).all()
    assert (table[table["family"] == "cublas"]["repeats"] == 5).all()  # peers always get full repeats
    again = []
    make_sweep(tmp_path, monkeypatch, [], retimed=again).measure(SHAPES)
    assert again == []  # a finished sweep times nothing again


def test_an_older_table_gains_the_columns_added_since(tmp_path):
    path = tmp_path / "old.csv"
    pd.DataFrame([dict.fromkeys([c for c in COLUMNS if c != "repeats"], "x")]).to_csv(path, index=False)
    ResumableTable(path)
    assert list(pd.read_csv(path).columns) == COLUMNS


def test_every_shipped_sweep_table_opens_for_more_rows(tmp_path):
    """A config field added to a family (a new variant option) must not lock a results folder's tables: the README
    sweeps into them by default."""
    shipped = sorted(Path(__file__).resolve().parents[1].glob("sweeps/results/*/sweep_*.csv"))
    assert shipped
    for path in shipped:
        frame = pd.read_csv(path, dtype=str)
        if "family" not in frame:  # not a sweep's table (sweep_gpus.csv: sweep wall times)
            continue
        family = frame["family"]
        kernels = family[~family.isin(tuned.PEER_FAMILIES)].dropna().unique()
        if len(kernels) != 1:
            continue
        copy = tmp_path / path.parent.name / path.name
        copy.parent.mkdir(exist_ok=True)
        copy.write_bytes(path.read_bytes())
        ResumableTable(copy, config_fields(kernels[0]))


def test_table_refuses_a_file_that_is_not_a_sweep_table(tmp_path):
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a sweep table"):
        ResumableTable(other)


def sweep_frame():
    rows = []
    for name, mode, m, tflops, status in [
        (CONFIGS[0].name, "tf32tf32", 1024, 40.0, "ok"),
        (CONFIGS[1].name, "tf32tf32", 1024, 45.0, "ok"),
        (CONFIGS[1].name, "tf32tf32", 8192, 50.0, "inaccurate"),
        (CONFIGS[0].name, "tf32tf32", 8192, 57.0, "ok"),
        ("torch.matmul ieee", "fp32", 8192, 51.0, "ok"),
        (CONFIGS[2].name, "halfhalf", 8192, 104.0, "ok"),
    ]:
        family = "cublas" if name.startswith("torch") else "sm80"
        rows.append(
            {
                "family": family,
                "mode": mode,
                "name": name,
                "m": m,
                "n": m,
                "k": m,
                "batch": 1,
                "tflops": tflops,
                "status": status,
                **ENVIRONMENT,
            }
        )
    return pd.DataFrame(rows)


def test_winners_are_the_fastest_gated_variants_per_shape():
    winners = tuned.winners(sweep_frame())
    picked = {(r.mode, r.m): r.name for r in winners.itertuples()}
    assert picked == {
        ("tf32tf32", 1024): CONFIGS[1].name,
        ("tf32tf32", 8192): CONFIGS[0].name,  # the faster one failed the accuracy gate
        ("halfhalf", 8192): CONFIGS[2].name,
    }


def test_a_tie_goes_to_the_earlier_measurement_in_any_row_order():
    frame = sweep_frame()
    tie = frame[(frame["mode"] == "halfhalf") & (frame["m"] == 8192)].iloc[[0]].copy()
    later = dataclasses.replace(CONFIGS[2], stages=3).name
    tie["name"], tie["date"] = later, "2026-11-30T00:00:00Z"  # as fast as the winner, measured by a later sweep
    for rows in (pd.concat([frame, tie]), pd.concat([tie, frame])):
        picked = {(r.mode, r.m): r.name for r in tuned.winners(rows).itertuples()}
        assert picked[("halfhalf", 8192)] == CONFIGS[2].name


def test_the_tuned_table_takes_winners_from_every_sweep_table_of_the_folder(tmp_path, monkeypatch):
    sweep = make_sweep(tmp_path, monkeypatch, [])
    sweep.measure(SHAPES[:1])
    other = sweep_frame()  # another space's sweep: a faster tf32tf32 variant at 1024
    other.loc[(other["name"] == CONFIGS[0].name) & (other["m"] == 1024), "tflops"] = 1e6
    other.reindex(columns=COLUMNS).to_csv(tmp_path / "sweep_other_space.csv", index=False)
    sweep.args.tuned_out = tmp_path / "tuned.csv"
    table = pd.read_csv(sweep.write_tuned())
    picked = {(r.mode, r.m): r.name for r in table.itertuples()}
    assert picked[("tf32tf32", 1024)] == CONFIGS[0].name  # this sweep's own fastest was CONFIGS[1]
    assert picked[("tf32tf32", 8192)] == CONFIGS[0].name  # a shape only the other table has
    assert picked[("halfhalf", 1024)] == CONFIGS[2].name  # from this sweep's own table


def test_dispatch_takes_the_nearest_shape_of_the_chosen_table(tmp_path, monkeypatch):
    path = tmp_path / "mine.csv"
    tuned.write_table(tuned.winners(sweep_frame()), path)
    monkeypatch.delenv(tuned.TABLE_ENV, raising=False)
    tuned.set_tuned_table(path)
    try:
        gpu = ENVIRONMENT["gpu"]
        assert tuned.lookup(gpu, "tf32tf32", 1500, 1000, 900).name == CONFIGS[1].name
        assert tuned.lookup(gpu, "tf32tf32", 6000, 9000, 8192).name == CONFIGS[0].name
        assert tuned.lookup(gpu, "halfhalf", 4096, 2048, 16384).name == CONFIGS[2].name
        assert tuned.lookup(gpu, "halfhalf", 1024, 1024, 1024) is None  # 8x from the only entry: defaults
        assert tuned.lookup(gpu, "tf32tf32", 256, 256, 16384) is None  # deep K near a square bucket: defaults
        assert tuned.lookup(gpu, "markidis", 1024, 1024, 1024) is None  # no entry: the defaults apply
    finally:
        tuned.set_tuned_table(None)
    monkeypatch.setenv(tuned.TABLE_ENV, os.fspath(path))
    tuned.set_tuned_table(None)
    assert tuned.lookup("Some Other GPU", "tf32tf32", 1024, 1024, 1024).name == CONFIGS[1].name
    with pytest.raises(FileNotFoundError, match="does not exist"):
        tuned.set_tuned_table(tmp_path / "missing.csv")


def test_a_halfhalf_entry_that_splits_in_registers_is_not_used(tmp_path):
    frame = sweep_frame()
    frame.loc[frame["mode"] == "halfhalf", "name"] = KernelConfig("halfhalf", operands="fp32").name
    path = tmp_path / "fp32_operands.csv"
    tuned.write_table(tuned.winners(frame), path)
    tuned.set_tuned_table(path)
    try:
        assert tuned.lookup(ENVIRONMENT["gpu"], "halfhalf", 8192, 8192, 8192) is None  # halfhalf packs its operands
    finally:
        tuned.set_tuned_table(None)


@pytest.mark.parametrize(
    "gpu, key", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA H200", "h200")]
)
def test_gpu_keys(gpu, key):
    assert tuned.gpu_key(gpu) == key


def test_the_shipped_h100_table_names_buildable_winners():
    path = tuned.TUNED_DIR / "h100.csv"
    table = pd.read_csv(path)
    assert {"tf32tf32", "halfhalf"} <= set(table["mode"])
    for name in table["name"]:
        config = from_name(name)
        if isinstance(config, KernelConfig):
            assert config.operands == ("packed" if config.mode == "halfhalf" else "fp32")


def test_a_problems_prepared_operands_are_made_once_per_shape():
    import torch

    from cutlass_ext.families.sm80.measure import Problem

    sets = [(torch.ones(2, 2), torch.ones(2, 2)), (torch.zeros(2, 2), torch.zeros(2, 2))]
    problem = Problem(2, 2, 2, 1, sets, torch.ones(2, 2, dtype=torch.float64), 1e-7)
    calls = []

    def prepare(a, b):
        calls.append(1)
        return a + 1, b + 1

    first = problem.operands(prepare)
    assert problem.operands(prepare) is first and len(calls) == len(sets)  # every packed variant shares them
    assert torch.equal(first[1][0], torch.ones(2, 2))
    assert problem.operands(None) is sets


def test_fp8_dispatch_takes_the_m_bucket_at_or_above_m(tmp_path):
    # decode buckets: a tile tuned for fewer tokens than M would stream the weights once per column tile
    names = {
        1: "fp8_e4m3e4m3_bf16_64x16x256_c1x1_pp_fast_swap",
        16: "fp8_e4m3e4m3_bf16_64x16x128_c1x1_pp_fast_swap",
        64: "fp8_e4m3e4m3_bf16_64x64x256_c1x1_pp_fast",
    }
    table = pd.DataFrame(
        [
            {
                "mode": "fp8_fast",
                "m": m,
                "n": 8192,
                "k": 8192,
                "batch": 1,
                "name": name,
                "tflops": 1.0,
                "gpu": ENVIRONMENT["gpu"],
                "date": ENVIRONMENT["date"],
            }
            for m, name in names.items()
        ]
    )
    path = tmp_path / "fp8.csv"
    tuned.write_table(table, path)
    tuned.set_tuned_table(path)
    try:
        pick = {
            m: tuned.lookup(ENVIRONMENT["gpu"], "fp8_fast", m, 8192, 8192, m_bucket_above=True).name
            for m in (1, 2, 16, 17, 32, 64, 100)
        }
        nearest = tuned.lookup(ENVIRONMENT["gpu"], "fp8_fast", 32, 8192, 8192).name
    finally:
        tuned.set_tuned_table(None)
    assert pick == {
        1: names[1],
        2: names[1],
        16: names[16],
        17: names[64],
        32: names[64],
        64: names[64],
        100: names[64],
    }  # 2: 16 is over MAX_RATIO away; 100: above the largest bucket, the nearest
    assert nearest == names[16]  # without the rule a tie goes to the first (smaller) bucket


def test_sm80_rows_time_what_dispatch_runs(monkeypatch):
    """A packed halfhalf variant is timed with its operand pass and unscaling (the whole `ext.gemm` call), as the
    Hopper family's rows include its split pass: the two families' rows at a shape compare like with like."""
    measure = families.get("sm80").plugin("measure")
    calls = []
    monkeypatch.setattr(measure.ops, "halfhalf_gemm", lambda a, b, variants: calls.append(("halfhalf_gemm", variants)))
    monkeypatch.setattr(measure.ops, "gemm", lambda a, b, variants: calls.append(("gemm", variants)))
    for config in (CONFIGS[2], CONFIGS[0]):
        run, prepare = measure.kernel_runner(config)
        assert prepare is None  # nothing done outside the timed call
        run(None, None)
    assert calls == [("halfhalf_gemm", [CONFIGS[2].name]), ("gemm", [CONFIGS[0].name])]


def test_a_family_whose_problems_differ_by_mode_is_told_the_spaces_mode(tmp_path, monkeypatch):
    from sweeps import measure

    seen = []

    def with_mode(m, n, k, batch, mode=None):
        seen.append(mode)

    def without_mode(m, n, k, batch):
        seen.append("no mode")

    for plugin in (argparse.Namespace(make_problem=with_mode), argparse.Namespace(make_problem=without_mode)):
        measure.make_problem(plugin, (4096, 7168, 2048, 16), "fp8_k_grouped")
    measure.make_problem(argparse.Namespace(make_problem=with_mode), (128, 4096, 7168, 8))
    assert seen == ["fp8_k_grouped", "no mode", None]
    # the sweep takes the mode from its space (one mode, or the one --mode keeps), not from what it built
    monkeypatch.setattr(sweep_module.benchmark, "environment", lambda: dict(ENVIRONMENT))
    space = tmp_path / "space.yaml"
    for modes, kept, expected in (
        (["fp8_k_grouped"], None, "fp8_k_grouped"),
        (["halfhalf", "tf32tf32"], None, None),
        (["halfhalf", "tf32tf32"], ["tf32tf32"], "tf32tf32"),
    ):
        space.write_text(f"family: sm90_fp8_block\nmodes: {modes}\n")
        args = argparse.Namespace(out=tmp_path, space=str(space), mode=kept, tuned_out=None)
        assert sweep_module.Sweep(args, argparse.Namespace(arch="90a")).problem_mode == expected


CONFIGS_DIR = Path(__file__).resolve().parents[1] / "configs"
SPACE = str(CONFIGS_DIR / "sm80_corrected.yaml")
SQUARE = str(CONFIGS_DIR / "shapes_square.yaml")


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--arch", "99"], "argument --arch: '99' is not one of ['80', '86', '87', '89', '90', '90a']"),
        (["--arch", "sm80"], "argument --arch: 'sm80' is not one of"),
        (["--arch", "90A"], "(write 90a)"),
        (["--arch", ""], "argument --arch: '' is not one of"),
        (["--part", "abc"], "argument --part: 'abc' must be I/N (integers)"),
        (["--part", "3/2"], "argument --part: '3/2': I must be in [0, N)"),
        (["--group-size", "-3"], "argument --group-size: '-3' is not a positive integer"),
        (["--limit", "-1"], "argument --limit: '-1' is not a positive integer"),
        (["--limit", "0"], "argument --limit: '0' is not a positive integer"),
        (["--gpus", "0"], "argument --gpus: '0' is not a positive integer"),
        (["--gpus", "-2"], "argument --gpus: '-2' is not a positive integer"),
        (["--jobs", "0"], "argument --jobs: '0' is not a positive integer"),
        (["--jobs", "two"], "argument --jobs: 'two' is not an integer"),
        (["--repeats", "0"], "argument --repeats: '0' is not a positive integer"),
        (["--screen-repeats", "0"], "argument --screen-repeats: '0' is not a positive integer"),
        (["--finalists", "-1"], "argument --finalists: '-1' is not an integer >= 0"),
        (["--power-top", "-1"], "argument --power-top: '-1' is not an integer >= 0"),
        (["--power-seconds", "nan"], "argument --power-seconds: 'nan' is not a finite number of seconds"),
        (
            ["--power-seconds", "1.5"],
            "argument --power-seconds: '1.5' is not a finite number of seconds >= 2 (the power sampling window)",
        ),
        (["--build-only"], "argument --build-only: not allowed with argument --dry-run"),
    ],
)
def test_run_refuses_bad_arguments_naming_the_option_and_value(extra, message, capsys):
    from sweeps import run as run_module

    with pytest.raises(SystemExit) as exited:
        run_module.main([SPACE, "--dry-run", "--arch", "80", "--shapes", SQUARE, *extra])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_run_takes_zero_finalists_and_power_rows_and_a_longer_power_window():
    from sweeps import run as run_module

    args = run_module._parse_args([SPACE, "--finalists", "0", "--power-top", "0", "--power-seconds", "2.5"])
    assert (args.finalists, args.power_top, args.power_seconds) == (0, 0, 2.5)
    assert run_module._parse_args([SPACE, "--part", "1/2", "--arch", "90a"]).part == "1/2"


def test_run_list_needs_dry_run_and_starts_nothing(monkeypatch, capsys):
    from sweeps import run as run_module

    monkeypatch.setattr(run_module, "_sweep_space", lambda *a: pytest.fail("a sweep started"))
    with pytest.raises(SystemExit) as exited:
        run_module.main([SPACE, "--list", "--arch", "80"])
    assert (
        exited.value.code == 2 and "--list lists what --dry-run would build: pass --dry-run" in capsys.readouterr().err
    )


def test_run_names_a_space_or_shape_file_that_is_not_utf8_text(tmp_path, capsys):
    from sweeps import run as run_module

    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00shapes")
    assert run_module.main([SPACE, "--dry-run", "--arch", "80", "--shapes", str(binary)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {binary}: cannot read: not UTF-8 text")
    assert run_module.main([str(binary), "--dry-run", "--arch", "80"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {binary}: cannot read: not UTF-8 text")


def _confirm_folder(tmp_path) -> tuple[Path, Path]:
    """A results folder with one sweep table (fp8_fast at 16x8192x8192 on an H100) and a shape file."""
    folder = tmp_path / "results"
    folder.mkdir()
    name = "fp8_e4m3e4m3_bf16_64x16x256_c1x1_pp_fast_swap_l2pf8"
    row = {"family": "sm90_fp8", "mode": "fp8_fast", "name": name, "m": 16, "n": 8192, "k": 8192, "batch": 1}
    pd.DataFrame([row | {"tflops": 80.0, "status": "ok", **ENVIRONMENT}]).to_csv(folder / "sweep_fp8.csv")
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text("shapes: [[16, 8192, 8192]]\n")
    return folder, shapes


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--top", "0"], "argument --top: '0' is not a positive integer"),
        (["--rounds", "-1"], "argument --rounds: '-1' is not a positive integer"),
        (["--repeats", "0"], "argument --repeats: '0' is not a positive integer"),
        (["--seconds", "nan"], "argument --seconds: 'nan' is not a finite number of seconds >= 0"),
        (["--seconds", "-1"], "argument --seconds: '-1' is not a finite number of seconds >= 0"),
        (["--latest", "absent.csv"], "argument --latest: 'absent.csv': no such file"),
    ],
)
def test_confirm_refuses_bad_arguments_naming_the_option_and_value(extra, message, capsys):
    from sweeps import confirm

    with pytest.raises(SystemExit) as exited:
        confirm.main(["--shapes", SQUARE, *extra])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_confirm_names_a_bad_shape_file_before_asking_for_a_gpu(tmp_path, monkeypatch, capsys):
    from sweeps import confirm

    monkeypatch.setattr(confirm.torch.cuda, "is_available", lambda: False)
    assert confirm.main(["--shapes", str(tmp_path / "absent.yaml")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'absent.yaml'}: cannot read: No such file or directory\n"
    (tmp_path / "bad.yaml").write_text("shapes: [[16, 0, 16]]\n")
    assert confirm.main(["--shapes", str(tmp_path / "bad.yaml")]) == 2
    assert "shapes[0]: 0 is not a positive integer" in capsys.readouterr().err
    assert confirm.main(["--shapes", SQUARE]) == 2
    assert capsys.readouterr().err == "error: sweeps.confirm times kernels: it needs a CUDA GPU\n"


def test_confirm_names_a_mode_no_row_has_and_shapes_without_candidates(tmp_path, monkeypatch, capsys):
    from sweeps import confirm

    folder, shapes = _confirm_folder(tmp_path)
    monkeypatch.setattr(confirm.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(confirm.benchmark, "environment", lambda: dict(ENVIRONMENT))
    monkeypatch.setattr(confirm.registry, "ensure_registered", lambda *a: pytest.fail("reached the GPU"))
    incumbents = tmp_path / "incumbents.csv"
    pd.DataFrame([{"mode": "fp8_fast", "m": 1, "n": 64, "k": 64, "batch": 1, "name": "x"}]).to_csv(incumbents)
    base = ["--sweeps", str(folder), "--out", str(tmp_path / "out"), "--incumbents", str(incumbents)]
    assert confirm.main(["--shapes", str(shapes), *base, "--modes", "fp8_fast", "bogus"]) == 2
    assert (
        capsys.readouterr().err
        == "error: --modes 'bogus': no row to re-time has this mode; the rows' modes: ['fp8_fast']\n"
    )
    other = tmp_path / "other.yaml"
    other.write_text("shapes: [[32, 4096, 4096]]\n")
    assert confirm.main(["--shapes", str(other), *base, "--modes", "fp8_fast"]) == 2
    assert (
        capsys.readouterr().err == f"error: no candidates: no gated row of --modes fp8_fast at the shapes of {other}\n"
    )
    with pytest.raises(SystemExit) as exited:
        confirm.main(["--shapes", str(shapes), "--sweeps", str(folder), "--latest", str(tmp_path / "absent.csv")])
    assert exited.value.code == 2


def test_a_table_of_another_family_takes_rows_under_its_own_header(tmp_path):
    """A confirm table is named after its shapes only: rows of a family with fewer columns go under the right ones."""
    import pandas as pd

    from sweeps.table import ResumableTable, config_fields

    path = tmp_path / "confirm_sq.csv"
    fp8 = ResumableTable(path, config_fields("sm90_fp8"))
    split = ResumableTable(path, config_fields("sm90"))
    assert set(split.columns) < set(fp8.columns)
    split.append({"family": "sm90", "mode": "tf32tf32", "name": "v", "m": 8, "n": 8, "k": 8, "batch": 1, "gpu": "g"})
    row = pd.read_csv(path, dtype=str, keep_default_na=False).iloc[0]
    assert (row["family"], row["name"], row["gpu"], row["a_dtype"]) == ("sm90", "v", "g", "")


def test_a_winner_dispatch_cannot_take_does_not_push_out_the_one_it_can():
    """The table has no layout or operand column: a column-major or unpacked halfhalf winner would serve no plain
    call and hide the plain variant measured beside it."""
    frame = sweep_frame()
    faster = frame[(frame["mode"] == "tf32tf32") & (frame["m"] == 1024)].iloc[[0]].copy()
    faster["name"], faster["tflops"] = dataclasses.replace(CONFIGS[1], layout_a="col").name, 1e6
    unpacked = frame[(frame["mode"] == "halfhalf") & (frame["m"] == 8192)].iloc[[0]].copy()
    unpacked["name"], unpacked["tflops"] = dataclasses.replace(CONFIGS[2], operands="fp32").name, 1e6
    no_time = frame[(frame["mode"] == "tf32tf32") & (frame["m"] == 8192)].iloc[[0]].copy()
    no_time["name"], no_time["tflops"], no_time["status"] = CONFIGS[1].name, float("nan"), "ok"
    picked = {(r.mode, r.m): r.name for r in tuned.winners(pd.concat([frame, faster, unpacked, no_time])).itertuples()}
    assert picked == {
        ("tf32tf32", 1024): CONFIGS[1].name,
        ("tf32tf32", 8192): CONFIGS[0].name,
        ("halfhalf", 8192): CONFIGS[2].name,
    }


def test_shapes_whose_variants_never_ran_keep_their_old_winners(tmp_path):
    table = tmp_path / "tuned.csv"
    tuned.write_table(tuned.winners(sweep_frame()), table)
    before = table.read_text()
    broken = sweep_frame().assign(status="build_failed", tflops=float("nan"))
    broken.loc[broken["name"] == CONFIGS[1].name, "status"] = "cannot_run"
    broken.reindex(columns=COLUMNS).to_csv(tmp_path / "sweep_broken.csv", index=False)
    (tmp_path / "sweep_killed_at_once.csv").write_text("")  # created, then killed before its first row
    sweep_module.write_tuned(tmp_path, ENVIRONMENT["gpu"], table)
    assert table.read_text() == before
    failed_gate = sweep_frame().assign(status="inaccurate")
    failed_gate.reindex(columns=COLUMNS).to_csv(tmp_path / "sweep_broken.csv", index=False)
    sweep_module.write_tuned(tmp_path, ENVIRONMENT["gpu"], table)
    assert pd.read_csv(table).empty  # every variant measured and failed its gate: no winner stays


def test_a_sweep_refuses_to_write_its_tuned_table_over_what_is_not_one(tmp_path, monkeypatch):
    sweep = make_sweep(tmp_path, monkeypatch, [])
    sweep.measure(SHAPES[:1])
    sweep_table = sweep.table.path.read_text()
    for path, message in (
        (sweep.table.path, "is not a tuned table"),
        (tmp_path, "is a directory"),
    ):
        args = argparse.Namespace(**{**vars(sweep.args), "tuned_out": path})
        with pytest.raises(ValueError, match=f"--tuned-out {path} {message}"):
            sweep_module.Sweep(args, argparse.Namespace(arch="90a"))
    assert sweep.table.path.read_text() == sweep_table
    tuned_table = tmp_path / "mine.csv"
    tuned.write_table(tuned.winners(sweep_frame()), tuned_table)
    args = argparse.Namespace(**{**vars(sweep.args), "tuned_out": tuned_table})
    sweep_module.Sweep(args, argparse.Namespace(arch="90a"))  # a tuned table, or a new file, is taken
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    with pytest.raises(ValueError, match="--out .*a_file is a file, not a results folder"):
        sweep_module.Sweep(argparse.Namespace(**{**vars(sweep.args), "out": a_file}), argparse.Namespace(arch="90a"))


def test_the_default_results_folder_is_the_repositorys_from_any_directory(tmp_path, monkeypatch):
    from sweeps import paths

    assert paths.RESULTS == Path(__file__).resolve().parents[1] / "sweeps" / "results"
    monkeypatch.setattr(paths, "RESULTS", tmp_path / "repo_results")  # not to touch the real folder
    monkeypatch.setattr(sweep_module.benchmark, "environment", lambda: dict(ENVIRONMENT))
    space = str(Path(__file__).resolve().parents[1] / "configs" / "sm80_corrected.yaml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    args = argparse.Namespace(out=None, space=space, mode=None, tuned_out=tmp_path / "t.csv")
    sweep = sweep_module.Sweep(args, argparse.Namespace(arch="90a"))
    assert sweep.table.path == tmp_path / "repo_results" / "h100" / "sweep_sm80_corrected.csv"
    assert not (elsewhere / "sweeps").exists()


def test_run_refuses_a_space_the_filters_empty_and_a_measuring_run_without_its_gpu(tmp_path, monkeypatch, capsys):
    from sweeps import run as run_module

    space = tmp_path / "too_big.yaml"
    space.write_text(
        "family: sm80\nmodes: [tf32tf32]\nspace:\n  threadblock: {m: [256], n: [256], k: [128]}\n"
        "  warp: {m: [16], n: [16], k: [16]}\n  stages: [8]\n  alignment: [4]\n"
    )
    assert run_module.main([str(space), "--dry-run", "--arch", "80", "--shapes", SQUARE]) == 2
    assert "the filters removed every variant: nothing to build or measure" in capsys.readouterr().err
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exited:  # --arch names a target for building, not the GPU that measures
        run_module.main([SPACE, "--arch", "80", "--shapes", SQUARE])
    assert exited.value.code == 2 and "a sweep measures on the GPU it runs on" in capsys.readouterr().err
    monkeypatch.setattr(run_module, "_limits", lambda arch: run_module.DeviceLimits.for_arch("90a"))
    assert run_module.main([SPACE, "--arch", "80", "--shapes", SQUARE]) == 2
    assert "error: --arch 80: this GPU is sm_90a" in capsys.readouterr().err


def test_a_sweep_of_variants_that_cannot_be_entries_leaves_the_tables_entries(tmp_path):
    table = tmp_path / "tuned.csv"
    tuned.write_table(tuned.winners(sweep_frame()), table)
    before = table.read_text()
    column_major = sweep_frame().assign(name=dataclasses.replace(CONFIGS[1], layout_b="col").name)
    column_major.reindex(columns=COLUMNS).to_csv(tmp_path / "sweep_layouts.csv", index=False)
    sweep_module.write_tuned(tmp_path, ENVIRONMENT["gpu"], table)
    assert table.read_text() == before


def test_space_files_keep_yaml_merge_keys_and_name_an_unhashable_key(tmp_path):
    from sweeps.space import SpaceError, load_space

    space = tmp_path / "space.yaml"
    space.write_text(
        "family: sm80\nmodes: [tf32tf32]\nspace:\n  threadblock: &tile {m: [128], n: [128], k: [32]}\n"
        "  warp: {<<: *tile, m: [64], n: [32]}\n  stages: [3]\n  alignment: [4]\n"
    )
    assert [c.name for c in load_space(space)] == ["tf32tf32_sm80_128x128x32_64x32x32_s3_a4"]
    space.write_text("? [a, b]\n: 1\n")
    with pytest.raises(SpaceError, match="not valid YAML"):
        load_space(space)
