"""`python -m sweeps.report` on tables it cannot rank: one error line and exit status 2, never a traceback."""

from pathlib import Path

import pytest

from sweeps import report

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ROOT / "sweeps" / "results" / "h200" / "sweep_lowbit.csv"


@pytest.mark.parametrize(
    "text, message",
    [("", "cannot be read as a CSV table"), ("a,b\n1,2\n", "not a sweep table (it lacks ['family', 'mode'")],
)
def test_a_file_that_is_no_sweep_table_is_one_error_line(tmp_path, capsys, text, message):
    path = tmp_path / "sweep_x.csv"
    path.write_text(text)
    with pytest.raises(SystemExit) as exited:
        report.main([str(path), "--no-plots"])
    assert exited.value.code == 2 and message in capsys.readouterr().err


def test_a_table_without_passing_rows_says_so(tmp_path, capsys):
    path = tmp_path / "sweep_x.csv"
    path.write_text(SWEEP.read_text().splitlines()[0] + "\n")  # the header alone
    assert report.main([str(path), "--no-plots"]) == 2
    assert "no row passed the accuracy gate" in capsys.readouterr().err


def test_a_missing_file_and_a_shipped_table(capsys):
    with pytest.raises(SystemExit) as exited:
        report.main(["/nonexistent/sweep.csv", "--no-plots"])
    assert exited.value.code == 2 and "cannot be read" in capsys.readouterr().err
    assert report.main([str(SWEEP), "--no-plots"]) == 0


def test_the_tuned_table_of_a_folder_skips_files_that_hold_no_kernels_rows(tmp_path):
    from sweeps.sweep import write_tuned

    (tmp_path / "sweep_gpus.csv").write_text("gpus,tflops\n2,1.0\n")  # the multi-GPU run's file shares the prefix
    assert write_tuned(tmp_path, "NVIDIA H100 80GB HBM3", tmp_path / "tuned.csv") is None


def test_shapes_of_other_batches_and_gpus_are_reported_apart():
    import pandas as pd

    def line(batch, gpu, name, tflops):
        shape = {"m": 512, "n": 7168, "k": 2048, "batch": batch, "gpu": gpu}
        return shape | {"family": "sm90_fp8", "mode": "fp8_block", "name": name, "tflops": tflops, "status": "ok"}

    frame = pd.DataFrame([line(8, "H", "a", 961.6), line(32, "H", "b", 979.2), line(8, "P", "c", 900.0)])
    best = report.best_per_shape(frame)
    assert sorted(best["shape"]) == ["512x7168x2048x32 (H)", "512x7168x2048x8 (H)", "512x7168x2048x8 (P)"]
    assert sorted(report.ranked(frame, 1)["name"]) == ["a", "b", "c"]


def _table(tmp_path, edit) -> Path:
    import pandas as pd

    frame = pd.read_csv(SWEEP)
    path = tmp_path / "sweep_x.csv"
    edit(frame).to_csv(path, index=False)
    return path


def test_a_cell_that_is_not_a_number_is_named_by_line_and_column(tmp_path, capsys):
    def garble(frame):
        frame["tflops"] = frame["tflops"].astype(object)
        frame.loc[3, "tflops"] = "fast"
        return frame

    with pytest.raises(SystemExit) as exited:
        report.main([str(_table(tmp_path, garble)), "--no-plots"])
    assert exited.value.code == 2 and "line 5: tflops 'fast' is not a number" in capsys.readouterr().err


def test_an_ok_row_without_a_time_is_not_ranked(tmp_path):
    import pandas as pd

    def untime(frame):
        ours = frame.index[(frame["status"] == "ok") & ~frame["family"].isin(report.PEERS)]
        frame.loc[ours, "tflops"] = float("nan")
        frame.loc[ours[0], "name"] = "untimed_variant"
        return frame

    frame = report.read_sweep_table(_table(tmp_path, untime))
    assert "untimed_variant" not in set(report.best_per_shape(frame)["name"])
    assert (frame.loc[frame["name"] == "untimed_variant", "status"] == "untimed").all()
    assert not pd.isna(report.best_per_shape(frame)["tflops"]).any()


def test_plots_into_a_file_are_refused_and_several_gpus_are_named(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert report.main([str(SWEEP), "--out", str(a_file)]) == 2
    assert f"--out {a_file} is a file" in capsys.readouterr().err
    pytest.importorskip("matplotlib")

    def two_gpus(frame):
        import pandas as pd

        return pd.concat([frame, frame.assign(gpu="NVIDIA H100 80GB HBM3")], ignore_index=True)

    assert report.main([str(_table(tmp_path, two_gpus)), "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "NVIDIA H100 80GB HBM3" in printed and "NVIDIA H200" in printed
