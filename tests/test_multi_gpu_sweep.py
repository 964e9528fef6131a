"""`sweeps.run --gpus N` on the CPU, the measurement mocked: parts are disjoint whole build groups, N processes
write the table one process writes, an interrupted part resumes, and a rerun with another N measures only what is
missing."""

import argparse
import os
from pathlib import Path

import pandas as pd
import pytest

from cutlass_ext.families.rules import DeviceLimits
from sweeps import build_stage, multi_gpu
from sweeps import run as run_module
from sweeps import sweep as sweep_module
from sweeps.space import load_space
from sweeps.table import FAMILY_CONFIG_FIELDS, KEY, ResumableTable, config_columns

SPACE = "configs/sm80_corrected.yaml"
GPU = "NVIDIA H100 80GB HBM3"


class FakeSweep:
    """Sweep's surface with made-up measurements: a row per (variant, shape) and a peer per shape, appended to the
    resumable table; records what each process built and measured."""

    calls: list = []
    kill: dict = {}  # part -> rows after which that part's process is interrupted

    def __init__(self, args, limits):
        self.args = args
        self.table = ResumableTable(Path(args.out) / f"sweep_{Path(args.space).stem}.csv")
        self.survivors = []
        self.measured = 0

    def build(self, survivors, shapes):
        self.survivors = survivors
        return 0.0

    def _append(self, config, family, mode, name, shape):
        if self.table.done(name, *shape, GPU):
            return
        if self.measured == self.kill.get(self.args.part):
            raise KeyboardInterrupt
        self.measured += 1
        self.calls.append((os.environ.get("CUDA_VISIBLE_DEVICES"), self.args.part, name, shape))
        m, n, k, batch = shape
        self.table.append(
            {
                "family": family,
                "mode": mode,
                "name": name,
                "m": m,
                "n": n,
                "k": k,
                "batch": batch,
                "time_us": 10.0,
                "tflops": float(sum(map(ord, name)) % 97 + m / 1000),
                "repeats": 3,
                "relres": 1e-7,
                "status": "ok",
                "gpu": GPU,
                "nvcc": "13.0",
                "torch": "2.11",
                "date": "2026-11-26T00:00:00Z",
                **config_columns(config, FAMILY_CONFIG_FIELDS["sm80"]),
            }
        )

    def measure(self, shapes):
        for index, shape in enumerate(shapes):
            if multi_gpu.measures_peers(self.args, index):
                self._append(None, "cublas", "fp32", "torch.matmul ieee", shape)
            for config in self.survivors:
                self._append(config, config.family, config.mode, config.name, shape)
        return 0.0

    def write_tuned(self):
        return None

    def print_summary(self):
        pass


class FakePopen:
    """A part's `python -m sweeps.run ...` run in this process, under its CUDA_VISIBLE_DEVICES."""

    def __init__(self, command, env, stdout, stderr):
        assert command[1:3] == ["-m", "sweeps.run"]
        saved = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = env["CUDA_VISIBLE_DEVICES"]
        try:
            self.returncode = run_module.main(command[3:])
        except KeyboardInterrupt:
            self.returncode = 1
        finally:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved

    def wait(self):
        return self.returncode


@pytest.fixture
def sweep_run(tmp_path, monkeypatch):
    FakeSweep.calls, FakeSweep.kill = [], {}
    monkeypatch.setattr(sweep_module, "Sweep", FakeSweep)
    monkeypatch.setattr(multi_gpu.subprocess, "Popen", FakePopen)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    monkeypatch.setattr(run_module, "_limits", lambda arch: DeviceLimits.for_arch("80"))  # an sm80 GPU
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text("shapes: [[256, 256, 256], [512, 384, 128]]\n")

    def sweep_run(out: str, gpus: int, *extra) -> tuple[int, pd.DataFrame]:
        argv = [SPACE, "--arch", "80", "--shapes", str(shapes), "--limit", "5", "--group-size", "2"]
        status = run_module.main([*argv, "--out", str(tmp_path / out), "--gpus", str(gpus), "--no-report", *extra])
        table = pd.read_csv(tmp_path / out / "sweep_sm80_corrected.csv")
        return status, table.drop(columns="date").sort_values(KEY).reset_index(drop=True)

    return sweep_run


def test_parts_are_disjoint_whole_build_groups():
    configs = load_space(SPACE)[:37]
    groups = build_stage._groups(configs, 3)
    parts = []
    for index in range(3):
        args = argparse.Namespace(part=f"{index}/3", group_size=3, jobs=None)
        parts.append(multi_gpu.part(configs, args))
        # the part's own build forms the groups of the one-GPU run: the same libraries, the same cache entries
        assert build_stage._groups(parts[-1], 3) == groups[index::3]
    assert sorted(c.name for p in parts for c in p) == sorted(c.name for c in configs)
    assert multi_gpu.part(configs, argparse.Namespace(part=None)) is configs
    with pytest.raises(ValueError, match="--part"):
        multi_gpu.part(configs, argparse.Namespace(part="3/3", group_size=3, jobs=None))


def test_two_gpus_write_the_table_of_one(sweep_run):
    status, one = sweep_run("one", 1)
    assert status == 0
    FakeSweep.calls = []
    status, two = sweep_run("two", 2)
    assert status == 0
    pd.testing.assert_frame_equal(one, two)
    variants = {}
    for device, part, name, _ in FakeSweep.calls:
        if name != "torch.matmul ieee":
            variants.setdefault((device, part), set()).add(name)
    peers = [(part, shape) for _, part, name, shape in FakeSweep.calls if name == "torch.matmul ieee"]
    assert [part for part, _ in peers] == ["0/2", "1/2"]  # the first shape's peers by part 0, the second's by part 1
    assert sorted(variants) == [("4", "0/2"), ("6", "1/2")]  # one process per GPU, in its own part
    assert not variants["4", "0/2"] & variants["6", "1/2"]
    assert len(two) == 2 * (1 + len(variants["4", "0/2"]) + len(variants["6", "1/2"]))


def test_an_interrupted_part_resumes_where_it_stopped(sweep_run):
    _, complete = sweep_run("reference", 1)
    FakeSweep.calls, FakeSweep.kill = [], {"1/2": 4}
    status, partial = sweep_run("resumed", 2)
    assert status == 1 and 0 < len(partial) < len(complete)
    first = FakeSweep.calls
    FakeSweep.calls, FakeSweep.kill = [], {}
    status, resumed = sweep_run("resumed", 2)
    assert status == 0
    variant_rows = [(name, shape) for _, _, name, shape in first + FakeSweep.calls if name != "torch.matmul ieee"]
    assert len(variant_rows) == len(set(variant_rows)) == (complete["family"] == "sm80").sum()  # none twice
    pd.testing.assert_frame_equal(complete, resumed)


def test_a_rerun_with_another_gpu_count_measures_only_what_is_missing(sweep_run):
    sweep_run("table", 1)
    FakeSweep.calls = []
    status, table = sweep_run("table", 2)
    assert status == 0 and FakeSweep.calls == []
    _, more = sweep_run("table", 2, "--limit", "7")
    assert len(more) > len(table)
    assert {call[2] for call in FakeSweep.calls}.isdisjoint(set(table["name"]))
    assert not more.duplicated(KEY).any()


def test_the_peers_are_dealt_by_shape(sweep_run):
    assert [multi_gpu.measures_peers(argparse.Namespace(part=None), i) for i in range(3)] == [True] * 3
    for part, shapes in (("0/2", [0, 2, 4]), ("1/2", [1, 3]), ("2/3", [2])):
        measured = [i for i in range(5) if multi_gpu.measures_peers(argparse.Namespace(part=part), i)]
        assert measured == shapes
    status, table = sweep_run("table", 2)
    peers = [call for call in FakeSweep.calls if call[2] == "torch.matmul ieee"]
    # each shape's peers once, by a different part for each of the two shapes, and all in the merged table
    assert status == 0 and len(peers) == 2 and len({call[1] for call in peers}) == 2
    assert (table["name"] == "torch.matmul ieee").sum() == 2


def _rows(mode_tflops, shape=(256, 256, 256, 1), gpu=GPU, **extra):
    m, n, k, batch = shape
    return pd.DataFrame(
        [
            {"family": "sm80", "mode": mode, "name": f"{mode}_{i}", "m": m, "n": n, "k": k, "batch": batch,
             "tflops": tflops, "repeats": 3, "status": "ok", "gpu": gpu, **extra}
            for i, (mode, tflops) in enumerate(mode_tflops)
        ]
    )  # fmt: skip


def test_a_part_keeps_only_finalists_the_other_parts_do_not_beat():
    mine = _rows([("tf32tf32", 50.0), ("tf32tf32", 40.0), ("tf32tf32", 30.0), ("halfhalf", 10.0)])
    theirs = _rows([("tf32tf32", 45.0), ("tf32tf32", 35.0), ("halfhalf", 90.0), ("halfhalf", 80.0)])
    kept = multi_gpu.among_fastest(mine, theirs, 3)
    # the three fastest tf32tf32 of both parts are 50, 45, 40: 30 goes; halfhalf's 10 is beaten twice, stays (< 3)
    assert kept["tflops"].tolist() == [50.0, 40.0, 10.0]
    assert multi_gpu.among_fastest(mine, theirs, 2)["tflops"].tolist() == [50.0]
    assert multi_gpu.among_fastest(mine, theirs.iloc[:0], 2).equals(mine)  # nothing measured there yet
    nothing = multi_gpu.among_fastest(mine.iloc[:0], theirs, 2)  # every variant here failed at this shape
    assert nothing.empty and list(nothing.columns) == list(mine.columns)


def test_a_part_reads_the_other_parts_tables_as_they_stand(tmp_path):
    args = argparse.Namespace(part="1/3")
    table = tmp_path / "parts" / "1of3" / "sweep_x.csv"
    siblings = multi_gpu.sibling_tables(args, table)
    assert siblings == [tmp_path / "parts" / f"{j}of3" / "sweep_x.csv" for j in (0, 2)]
    assert multi_gpu.sibling_tables(argparse.Namespace(part=None), table) == []
    assert multi_gpu.sibling_rows(siblings) is None  # no part has written yet
    siblings[0].parent.mkdir(parents=True)
    text = _rows([("tf32tf32", 45.0), ("tf32tf32", 35.0)]).to_csv(index=False)
    siblings[0].write_text(text + "sm80,tf32tf32,cut,256,256,256,1,12")  # a row still being written
    rows = multi_gpu.sibling_rows(siblings)
    assert rows["tflops"].tolist() == [45.0, 35.0]
    siblings[0].write_text(text + 'sm80,tf32tf32,cut,256,256,256,1,12,3,ok,"a detail\nof two lines, cut')
    assert multi_gpu.sibling_rows(siblings) is None  # cut inside a quoted field: that table is skipped
    siblings[0].write_text(text.splitlines()[0])  # the header being written
    assert multi_gpu.sibling_rows(siblings) is None


def test_a_parts_finalists_leave_out_rows_the_other_part_beats(tmp_path, monkeypatch):
    """Sweep._finals of part 0/2 with part 1's table beside it: only its rows among the two fastest of both."""
    shape = (256, 256, 256, 1)
    folder = tmp_path / "parts" / "0of2"
    table = ResumableTable(folder / "sweep_sm80_corrected.csv")
    for row in _rows([("tf32tf32", 50.0), ("tf32tf32", 40.0), ("tf32tf32", 30.0)]).to_dict("records"):
        table.append(row)
    other = tmp_path / "parts" / "1of2" / "sweep_sm80_corrected.csv"
    other.parent.mkdir(parents=True)
    # t_a, t_b: part 1's; tf32tf32_1: part 1's table kept it from an earlier run that dealt the groups otherwise
    theirs = _rows([("tf32tf32", 45.0), ("tf32tf32", 44.0), ("tf32tf32", 60.0)])  # its 60 must not count
    theirs.assign(name=["t_a", "t_b", "tf32tf32_1"]).to_csv(other, index=False)
    sweep = object.__new__(sweep_module.Sweep)
    sweep.args = argparse.Namespace(part="0/2", finalists=2, repeats=15)
    sweep.table, sweep.gpu = table, GPU
    sweep.runnable = [argparse.Namespace(name=f"tf32tf32_{i}") for i in range(3)]
    sweep.family = argparse.Namespace(kernel_runner=lambda config: (config.name, None))
    retimed = []
    monkeypatch.setattr(sweep_module.measure, "retime", lambda run, *_: retimed.append(run) or {"repeats": 15})
    sweep._finals(None, shape)
    assert retimed == ["tf32tf32_0"]  # 50 and 45 are the two fastest of both parts: 40 and 30 are no finalists
    sweep.args.finalists, sweep.args.repeats, retimed[:] = 1, 30, []  # more repeats: re-timed again
    sweep._finals(None, shape)
    assert retimed == ["tf32tf32_0"]  # the fastest of all (the stale copy of tf32tf32_1 at 60 counted would drop it)


def test_a_multi_gpu_run_refuses_outputs_it_must_not_write_before_any_part_starts(sweep_run, tmp_path, capsys):
    status, _ = sweep_run("first", 2)  # a finished sweep table to point --tuned-out at
    table = tmp_path / "first" / "sweep_sm80_corrected.csv"
    before = table.read_text()
    argv = [SPACE, "--arch", "80", "--shapes", str(tmp_path / "shapes.yaml"), "--gpus", "2", "--no-report"]
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for extra, message in (
        (["--out", str(tmp_path / "second"), "--tuned-out", str(table)], "is not a tuned table"),
        (["--out", str(a_file)], "is a file, not a results folder"),
    ):
        assert run_module.main([*argv, *extra]) == 2
        assert message in capsys.readouterr().err
    assert table.read_text() == before and not (tmp_path / "second").exists()
