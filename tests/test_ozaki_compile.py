"""The Ozaki-II kernels without a GPU: their arithmetic (kernels/ozaki_arith.cuh) compiled into a host program
equals the reference bit for bit, and the rendered library compiles for sm_90a and exports its launchers."""

import os
import shutil
import subprocess
import zlib

import pytest
import torch

from cutlass_ext import toolchain
from cutlass_ext.numerics import exp_rand
from cutlass_ext.ozaki import reference as ref
from cutlass_ext.ozaki.config import OzakiConfig

have_nvcc = shutil.which("nvcc") is not None or os.path.exists("/usr/local/cuda/bin/nvcc")
have_cxx = shutil.which("g++") is not None


@pytest.fixture(scope="module")
def arith_check(tmp_path_factory):
    if not have_cxx:
        pytest.skip("needs g++")
    binary = tmp_path_factory.mktemp("ozaki") / "arith_check"
    source = toolchain.kernels_dir() / "ozaki_arith_check.cpp"
    subprocess.run(
        ["g++", "-O2", "-std=c++17", f"-I{toolchain.kernels_dir()}", str(source), "-o", str(binary)], check=True
    )

    def ask(lines):
        result = subprocess.run(
            [str(binary)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True
        )
        return result.stdout.split("\n")[: len(lines)]

    return ask


@pytest.fixture
def generator(request):
    """Inputs of their own for each test, the same on every run (a failure replays)."""
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def test_shift_matches_reference(arith_check, generator):
    x = exp_rand((200, 33), -120, 120, generator)
    x[5] = 0.0
    x[7] = 2.0**-149  # subnormal squares vanish in FP32 but not in FP64
    squares = x.double().square().sum(-1)
    answers = arith_check([f"shift {float(s).hex()} {ref.shift_budget(8)}" for s in squares])
    assert [int(a) for a in answers] == ref.row_shifts(x, 8).tolist()


def test_non_finite_sums_of_squares_give_the_marker(arith_check):
    budget = ref.shift_budget(8)
    answers = arith_check([f"shift {v} {budget}" for v in ("inf", "nan", "0x1.fffffffffffffp+1023")])
    assert [int(a) for a in answers[:2]] == [ref.NON_FINITE_SHIFT] * 2
    assert int(answers[2]) != ref.NON_FINITE_SHIFT


@pytest.mark.parametrize("count", [8, 9])
def test_recombination_of_a_marked_row_or_column_is_nan(arith_check, count):
    marker, products = ref.NON_FINITE_SHIFT, " ".join(["0"] * count)
    lines = [
        f"recombine {count} {balanced} {sa} {sb} {products}"
        for balanced in (0, 1)
        for sa, sb in ((marker, 3), (3, marker), (marker, marker))
    ]
    assert arith_check(lines) == ["7fc00000"] * len(lines)


@pytest.mark.parametrize("count", [3, 8, 9, 14])
def test_residues_match_reference(arith_check, count, generator):
    x = torch.cat([exp_rand((400,), -149 + 23, 127, generator), torch.tensor([0.0, -0.0, 2.0**-149, -(2.0**-149)])])
    # Shifts that put the scaled values anywhere from far below 1/2 (rounded to 0) up to the budget's 2^t.
    shifts = ref.shift_budget(count) - torch.floor(torch.log2(x.abs().clamp(min=2.0**-149))).to(torch.int32) - 1
    shifts -= torch.randint(0, 40, shifts.shape, generator=generator, dtype=torch.int32)
    expected = ref.residues(x.reshape(-1, 1), shifts.reshape(-1), count)[:, :, 0].T
    answers = arith_check([f"residues {count} {float(v).hex()} {int(s)}" for v, s in zip(x, shifts)])
    assert [[int(r) for r in a.split()] for a in answers] == expected.tolist()


def test_epilogue_residues_match_reference(arith_check, generator):
    """The GEMM epilogue's reduction of INT32 products, over the whole INT32 range and at the halfway points."""
    values = torch.randint(-(2**31), 2**31, (300,), generator=generator, dtype=torch.int64).tolist()
    values += [2**31 - 1, -(2**31), 0, 128, -128, 384, -384, 127, 129, 255 * 1000 + 127, -(255 * 1000 + 128)]
    lines, wanted = [], []
    for m in ref.moduli(ref.MAX_MODULI):
        for v in values:
            lines.append(f"epilogue {v} {m}")
            wanted.append(str(int(ref.balanced(torch.tensor(v), m))))
    assert arith_check(lines) == wanted


@pytest.mark.parametrize("balanced", [0, 1])
@pytest.mark.parametrize("count", [3, 7, 8, 9, 14])
def test_recombination_matches_reference(arith_check, count, balanced, generator):
    """Products of real residue planes (so C' is in range), as INT32 products or as the epilogue's INT8 residues."""
    a, b = exp_rand((6, 50), -40, 40, generator), exp_rand((50, 5), -40, 40, generator)
    shifts_a, shifts_b = ref.row_shifts(a, count), ref.row_shifts(b.T, count)
    products = ref.residue_products(ref.residues(a, shifts_a, count), ref.residues(b.T, shifts_b, count).mT)
    if balanced:
        products = torch.stack([ref.balanced(p.long(), m) for p, m in zip(products, ref.moduli(count))]).int()
    expected = ref.recombine(products, shifts_a, shifts_b, count).view(torch.int32)
    lines, wanted = [], []
    for i in range(6):
        for j in range(5):
            values = " ".join(str(int(products[modulus, i, j])) for modulus in range(count))
            lines.append(f"recombine {count} {balanced} {int(shifts_a[i])} {int(shifts_b[j])} {values}")
            wanted.append(f"{int(expected[i, j]) & 0xFFFFFFFF:08x}")
    assert arith_check(lines) == wanted


def test_recombination_of_an_fp32_tie_near_2_to_62(arith_check):
    """Where FP64 Horner would round twice: the exact C' rounded once, in the kernels and the reference alike."""
    a = torch.tensor([[1.3623046875, 1.3623046875, 2.0**-26]])
    b = torch.tensor([[1.00421142578125], [1.00421142578125], [-3 * 2.0**-28]])
    shifts_a, shifts_b = ref.row_shifts(a, 8), ref.row_shifts(b.T, 8)
    products = ref.residue_products(ref.residues(a, shifts_a, 8), ref.residues(b.T, shifts_b, 8).mT)
    values = " ".join(str(int(p)) for p in products[:, 0, 0])
    answer = arith_check([f"recombine 8 0 {int(shifts_a[0])} {int(shifts_b[0])} {values}"])
    assert answer == ["402f1c00"] == [f"{int(ref.recombine(products, shifts_a, shifts_b, 8).view(torch.int32)):08x}"]


@pytest.mark.slow  # ~1 minute alone, 5-8 on a shared two-core machine
@pytest.mark.skipif(not have_nvcc, reason="needs nvcc")
def test_library_compiles_for_sm90a(tmp_path):
    from cutlass_ext.ozaki.family import FAMILY, render_instance

    config = OzakiConfig()
    source = tmp_path / "ozaki.cu"
    source.write_text(
        FAMILY.template.read_text()
        .replace("${names}", config.name)
        .replace("${defines}", "")
        .replace("${instances}", render_instance(config))
    )
    library = tmp_path / "libozaki.so"
    includes = [f"-I{d}" for d in toolchain.include_dirs()]
    command = [
        toolchain.nvcc(),
        *toolchain.NVCC_FLAGS,
        toolchain.gencode("90a"),
        *includes,
        str(source),
        "-o",
        str(library),
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    symbols = subprocess.run(["nm", "-D", str(library)], capture_output=True, text=True, check=True).stdout
    for launcher in ("ozaki_scale", "ozaki_gemm", "ozaki_gemm_workspace_size", "ozaki_recombine"):
        assert f"{config.name}_{launcher}" in symbols
