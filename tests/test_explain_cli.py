"""`python -m cutlass_ext.explain`: the arguments it refuses, and what it says of a GPU it does not know."""

import pytest

from cutlass_ext import explain


def _explain(capsys, *argv) -> tuple[int, str, str]:
    status = explain.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--op", "gemm_fp8", "--mode", "fast", "--shape", "8x8x7"], "--shape 8x8x7: K=7 must be a multiple of 16"),
        (
            ["--op", "gemm_fp8", "--mode", "block", "--shape", "8x12x16"],
            "--shape 8x12x16: N=12 must be a multiple of 8",
        ),
        (
            ["--op", "gemm_fp8", "--mode", "k_grouped", "--shape", "8x8x7x2"],
            "K=14 must be a multiple of 16 (FP8 rows are read by TMA in 16-byte units); K is 7 tokens x 2 experts",
        ),
        (
            ["--mode", "int8x8", "--shape", "8x8x131072"],
            "--shape 8x8x131072: K=131072 exceeds 131071: INT32 products of INT8 residues would overflow",
        ),
        (["--arch", "sm90a", "--mode", "fp32", "--shape", "8x8x8"], "argument --arch: 'sm90a' is not one of"),
        (["--arch", "99", "--mode", "fp32", "--shape", "8x8x8"], "argument --arch: '99' is not one of"),
    ],
)
def test_shapes_and_archs_the_call_refuses_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        explain.main(["--gpu", "NVIDIA H200", *argv])
    assert exited.value.code == 2 and message in capsys.readouterr().err


def test_the_largest_ozaki_k_and_an_aligned_fp8_shape_are_explained(capsys):
    status, out, _ = _explain(capsys, "--gpu", "NVIDIA H200", "--mode", "int8x8", "--shape", "8x8x131071")
    assert status == 0 and "runs: ozaki_int8x8" in out
    status, out, _ = _explain(capsys, "--gpu", "NVIDIA H200", "--op", "gemm_fp8", "--mode", "fast", "--shape", "8x8x16")
    assert status == 0 and "runs: fp8_" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--mode", "tf32tf32", "--shape", "0x0x0"],
        ["--mode", "fp32", "--shape", "0x64x64"],
        ["--op", "gemm_fp8", "--mode", "fast", "--shape", "16x8192x0"],
        ["--op", "lowbit", "--shape", "64x0x64"],
    ],
)
def test_an_empty_product_runs_no_kernel(argv, capsys):
    status, out, _ = _explain(capsys, "--gpu", "NVIDIA H200", *argv)
    assert status == 0 and out.splitlines()[-1] == "runs: none (an empty product: no kernel runs)"


def test_a_gpu_the_name_does_not_place_is_answered_with_a_note_asking_for_arch(capsys):
    status, out, err = _explain(capsys, "--gpu", "Banana", "--mode", "tf32tf32", "--shape", "64x64x64")
    assert status == 0 and out.startswith("gpu: Banana (sm?)")
    assert err.startswith("note: --gpu 'Banana': the name does not tell its architecture") and "give --arch" in err
    status, out, err = _explain(capsys, "--gpu", "Banana", "--arch", "90a", "--mode", "tf32tf32", "--shape", "64x64x64")
    assert status == 0 and out.startswith("gpu: Banana (sm90a)") and err == ""


def test_arch_wins_over_the_name(capsys):
    argv = ["--gpu", "NVIDIA H200", "--arch", "80", "--op", "gemm_fp8", "--mode", "fast", "--shape", "16x8192x8192"]
    status, out, _ = _explain(capsys, *argv)
    assert status == 0 and out.startswith("gpu: NVIDIA H200 (sm80)") and "Hopper (sm90) GPUs only" in out


H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    "gpu, op, mode, shape, expected",
    [
        (H100, "gemm", "tf32tf32", (8192, 8190, 8192), "path: sm80"),  # the sm90 kernels take N % 4 == 0 only
        (H100, "gemm_fp8", "block", (64, 128, 128), "runs: fp8_e4m3e4m3_bf16_"),  # one k-block: row scales
        (H100, "gemm_fp8", "block", (0, 4096, 7168), explain._NO_KERNEL),
        (H100, "gemm_fp8", "grouped", (128, 4096, 7168, 0), explain._NO_KERNEL),
        (H100, "gemm_fp8", "k_grouped", (4096, 7168, 128, 0), explain._NO_KERNEL),
        ("NVIDIA A100-SXM4-80GB", "gemm", "int8x8", (0, 1024, 1024), explain._NO_KERNEL),  # before the sm_90a check
    ],
)
def test_explain_says_what_dispatch_does(gpu, op, mode, shape, expected):
    lines = explain.explain(gpu, op, mode, shape)
    assert any(line.startswith(expected) for line in lines), lines


def test_a_hopper_arch_given_without_its_suffix_is_the_gpus_and_grouped_modes_need_experts(capsys):
    assert explain.explain(H100, "gemm_fp8", "fast", (64, 4096, 4096), arch="90")[0].endswith("(sm90a)")
    with pytest.raises(SystemExit):
        explain.main(["--gpu", H100, "--op", "gemm_fp8", "--mode", "grouped", "--shape", "512x7168x2048"])
    assert "takes MxNxKxEXPERTS" in capsys.readouterr().err


def test_a_tuned_table_dispatch_cannot_read_is_one_error_line(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("mode,m,n,k,batch,name,tflops,gpu,date\nhalfhalf,1024,1024,1024,1,no_such_variant,1,g,d\n")
    for table, message in ((tmp_path / "none.csv", "cannot be read"), (bad, "no_such_variant")):
        monkeypatch.setenv("CUTLASS_EXT_TUNED_TABLE", str(table))
        argv = ["--gpu", "NVIDIA H200", "--op", "gemm", "--mode", "halfhalf", "--shape", "1024x1024x1024"]
        assert explain.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: tuned table") and message in err and "Traceback" not in err
