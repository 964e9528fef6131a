"""The package's layers import downward only, and `import cutlass_ext` stays cheap.

Layers, bottom up (docs/design-notes.md, the house): base (toolchain, cache, config, device facts, pure numerics
references) → build (compiler, codegen, the families registry) → families (each family's config, grammar, render,
filters, space loader) → dispatch (per-device state, tuned tables, loaded libraries) → public API (gemm,
gemm_fp8, nn, numerics, lowbit, optim, …) → tools (CLIs, benchmarks, peers, the families' sweep measurements).
Every import statement of every module, at module level or inside a function, is read with `ast`; an import of a
higher layer, or a cycle, fails. A package's `__init__` re-exporting its own submodules is not an edge for the
cycle check (the submodules import the package's names). `if __name__ == "__main__":` blocks run only as scripts.
"""

import ast
import fnmatch
import subprocess
import sys
from pathlib import Path

import cutlass_ext

ROOT = Path(cutlass_ext.__file__).resolve().parent
LAYERS = ["base", "build", "families", "dispatch", "api", "tools"]
# First match wins; module names are fnmatch patterns.
LAYER_OF = [
    ("tools", ["cutlass_ext.explain", "cutlass_ext.prebuild", "cutlass_ext.benchmark", "cutlass_ext.peers*"]),
    ("families", ["cutlass_ext.families.*.filters", "cutlass_ext.families.*.space"]),
    # sweep plug-ins: measurement anywhere, and a package's own filters and space loader (they may use its API)
    ("tools", ["cutlass_ext.*.measure", "cutlass_ext.*.measure_*", "cutlass_ext.*.filters", "cutlass_ext.*.space"]),
    (
        "base",
        [
            "cutlass_ext.toolchain",
            "cutlass_ext.arguments",
            "cutlass_ext.batched",
            "cutlass_ext.cache",
            "cutlass_ext.compiling",
            "cutlass_ext.config",
            "cutlass_ext.device",
            "cutlass_ext.once",
            "cutlass_ext.lowbit.format",
            "cutlass_ext.lowbit.reference",
            "cutlass_ext.lowbit.ste",
            "cutlass_ext.optim.reference",
            "cutlass_ext.optim.philox",
            "cutlass_ext.ozaki.reference",
            "cutlass_ext.requirements",
        ],
    ),
    (
        "build",
        [
            "cutlass_ext.build",
            "cutlass_ext.nvcc_steps",
            "cutlass_ext.cubin_build",
            "cutlass_ext.codegen",
            "cutlass_ext.families",
            "cutlass_ext.variants",
        ],
    ),
    ("families", ["cutlass_ext.families.*", "cutlass_ext.*.config", "cutlass_ext.optim.family"]),
    ("families", ["cutlass_ext.fp8_block.family", "cutlass_ext.ozaki.family"]),
    ("dispatch", ["cutlass_ext.registry", "cutlass_ext.native", "cutlass_ext.tuned"]),
    ("api", ["cutlass_ext", "cutlass_ext.*"]),
]
# Not on the runtime import path: `import cutlass_ext` must not load them.
HEAVY = ("pandas", "torch._dynamo", "triton", "matplotlib", "yaml")


def layer(module: str) -> str:
    return next(name for name, patterns in LAYER_OF if any(fnmatch.fnmatchcase(module, p) for p in patterns))


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = ("cutlass_ext",) + path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _is_script_block(node) -> bool:
    test = getattr(node, "test", None)
    return (
        isinstance(node, ast.If)
        and isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
    )


def imports(module: str, path: Path, known: dict) -> set[str]:
    """The cutlass_ext modules `module` imports anywhere in its file (script blocks aside)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    pending = list(ast.parse(path.read_text()).body)
    while pending:
        node = pending.pop()
        if _is_script_block(node):
            continue
        pending.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in known and name != module)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {module: imports(module, path, known) for module, path in known.items()}


def test_every_module_has_a_layer_and_imports_downward_only():
    edges = graph()
    upward = [
        f"{module} ({layer(module)}) imports {target} ({layer(target)})"
        for module, targets in edges.items()
        for target in sorted(targets)
        if LAYERS.index(layer(target)) > LAYERS.index(layer(module))
    ]
    assert upward == []
    assert {layer(m) for m in edges} == set(LAYERS)


def test_no_import_cycle_even_inside_functions():
    edges = {
        module: {t for t in targets if not (modules()[module].name == "__init__.py" and t.startswith(module + "."))}
        for module, targets in graph().items()
    }
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(module):  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in edges[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(10000)
    for module in edges:
        if module not in index:
            visit(module)
    assert cycles == []


def test_the_package_never_imports_the_sweep_or_the_benchmarks():
    """sweeps/ and python/ use the package; it never reaches up into them (not even inside a function)."""
    reaching = []
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            reaching += [f"{module} imports {n}" for n in names if n.split(".")[0] in ("sweeps", "python")]
    assert reaching == []


def test_the_walk_sees_imports_inside_functions(tmp_path):
    """The walk is not blind: a function-level import of a higher layer is an edge it reports."""
    known = {"cutlass_ext.build": None, "cutlass_ext.gemm": None}
    source = tmp_path / "build.py"
    source.write_text("def main():\n    from .gemm import gemm\n\nif __name__ == '__main__':\n    import cutlass_ext\n")
    assert imports("cutlass_ext.build", source, known) == {"cutlass_ext.gemm"}


def test_every_module_imports_in_a_fresh_interpreter_and_the_package_loads_nothing_heavy():
    """(The time `import cutlass_ext` adds to `import torch` is checked on a quiet machine: tests/gpu/
    test_import_cost.py; this one's two shared cores time it at 0.4-0.7 s with or without the package's code.)"""
    code = (
        "import importlib, sys\n"
        "import cutlass_ext\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        f"for name in {sorted(modules())!r}:\n"
        "    importlib.import_module(name)\n"
        "print(heavy)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "[]"
