"""The user-facing docs stay true to the tree: links and anchors resolve, the commands name files that exist, the
Python examples parse, and the README's headline GEMM table is the committed CSV's numbers."""

import ast
import csv
import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "sweeps" / "results").glob("*/README.md")), *sorted(ROOT.glob("docs/*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_and_anchors_resolve(doc):
    broken = []
    for target in LINK.findall(doc.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        resolved = (doc.parent / path).resolve() if path else doc
        if not resolved.exists() or (anchor and anchor not in anchors(resolved)):
            broken.append(target)
    assert broken == []


def test_commands_name_scripts_and_configs_that_exist():
    text = (ROOT / "README.md").read_text()
    named = set(re.findall(r"python (python/[\w/]+\.(?:py|sh))", text))
    named |= set(re.findall(r"bash (python/[\w/]+\.sh)", text))
    named |= set(re.findall(r"(configs/[\w/]+\.yaml)", text))
    assert named, "the README names no scripts"
    assert sorted(path for path in named if not (ROOT / path).exists()) == []


def test_python_examples_parse():
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.DOTALL)
    assert blocks
    for block in blocks:
        ast.parse(block)


def test_headline_gemm_table_is_the_committed_csv():
    """Each `ext.gemm` and peer row of the FP32 table: TFLOP/s at 4096³ and 8192³ and relres at 8192³ as measured."""
    text = (ROOT / "README.md").read_text()
    source = re.search(r"\[`(gemm_modes_[\w]+\.csv)`\]", text).group(1)
    with (ROOT / "sweeps" / "results" / "h100" / source).open() as file:
        rows = {(r["family"], r["mode"], int(r["m"])): r for r in csv.DictReader(file) if r["layouts"] == "rr"}
    labels = {
        "cuBLAS SGEMM": ("cublas", "fp32"),
        "Triton `tf32x3`": ("triton", "tf32x3"),
        "CUTLASS 3xTF32": ("cutlass", "3xtf32"),
        "cuBLAS TF32": ("cublas", "tf32"),
        **{
            f'`ext.gemm(mode="{mode}")`': ("cutlass_ext", mode) for mode in ("tf32tf32", "halfhalf", "markidis", "tf32")
        },
    }
    checked = 0
    for line in text.splitlines():
        cells = [cell.strip().strip("*") for cell in line.strip("|").split("|")]
        key = next((labels[label] for label in labels if len(cells) == 4 and cells[0].startswith(label)), None)
        if key is None:
            continue
        small, large = rows[(*key, 4096)], rows[(*key, 8192)]
        # Rounded to the digits shown: within half a unit of the last digit.
        assert abs(float(cells[1]) - float(small["tflops"])) <= 0.05 + 1e-9, line
        assert abs(float(cells[2]) - float(large["tflops"])) <= 0.05 + 1e-9, line
        shown = float(cells[3])
        assert abs(shown - float(large["relres"])) <= 0.05 * 10 ** math.floor(math.log10(shown)) + 1e-15, line
        checked += 1
    assert checked == len(labels)
