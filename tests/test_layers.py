"""Imports run one way: each unit of the package imports only its own modules and units of lower layers."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import scalerepro

SRC = Path(scalerepro.__file__).parent

# Lowest first; units on one layer do not import each other (data and comm stay independent).
LAYERS: list[set[str]] = [
    {"errors", "shm"},
    {"io"},
    {"mpi", "oversubscription", "netmod", "sources"},
    {"provenance", "papers", "distributed"},
    {"baselines"},
    {"data", "comm"},
    {"config", "sim"},
    {"train"},
    {"analysis"},
    {"cli"},
]
LAYER = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def unit(module: str) -> str:
    """The unit a dotted module belongs to: its subpackage or its top-level module (``scalerepro.comm.ring``: comm)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every scalerepro module imported by a file, at any depth (function-level imports too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}:{node.lineno}: relative import; write scalerepro.<...> in full")
        if isinstance(node, ast.ImportFrom) and node.module == "scalerepro":
            found += [(node.lineno, f"scalerepro.{a.name}") for a in node.names if a.name != "__version__"]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return [(line, m) for line, m in found if m.startswith("scalerepro.")]


def violations(src: Path = SRC) -> list[str]:
    """Every import of a unit on the same or a higher layer than the importer's, as 'file:line: a -> b'."""
    bad = []
    for path in sorted(src.rglob("*.py")):
        own = unit(".".join(("scalerepro", *path.relative_to(src).with_suffix("").parts)))
        if own == "__init__":
            continue
        for line, module in imports(path):
            target = unit(module)
            if target != own and LAYER[target] >= LAYER[own]:
                bad.append(f"{path.relative_to(src.parent)}:{line}: {own} (layer {LAYER[own]}) imports {module}")
    return bad


def test_every_unit_has_a_layer():
    units = {
        p.stem if p.is_file() else p.name for p in SRC.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    assert units - {"__init__"} == set(LAYER)


def test_imports_run_one_way():
    assert violations() == []


def test_the_package_root_imports_nothing_of_its_own():
    """``import scalerepro`` stays cheap and free of side effects."""
    assert imports(SRC / "__init__.py") == []


def test_the_check_catches_an_upward_import(tmp_path):
    """The check is live: a train module importing analysis is reported."""
    fake = tmp_path / "scalerepro"
    (fake / "train").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "train" / "bad.py").write_text("def f():\n    from scalerepro.analysis.analyze import analyze\n")
    expected = f"scalerepro/train/bad.py:2: train (layer {LAYER['train']}) imports scalerepro.analysis.analyze"
    assert violations(fake) == [expected]


def module_name(path: Path, src: Path = SRC) -> str:
    """``scalerepro.comm.ring`` for ``src/scalerepro/comm/ring.py`` (a package: its ``__init__``'s name)."""
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(("scalerepro", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def modules_imported(path: Path, modules: set[str]) -> set[str]:
    """The package's modules a file imports: ``from scalerepro.data import b`` is ``scalerepro.data.b`` where that
    is a module, else the package ``scalerepro.data`` (the name is then something its ``__init__`` defines)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("scalerepro"):
            found |= {
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names
            }
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("scalerepro.")}
    return found & modules


def circles(src: Path = SRC) -> list[list[str]]:
    """Every import circle between modules (imports at any depth count: a lazy import is still a dependency),
    each as the modules around it, found by depth-first search."""
    paths = {module_name(p, src): p for p in sorted(src.rglob("*.py"))}
    graph = {name: modules_imported(path, set(paths)) for name, path in paths.items()}
    found, done = [], set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            found.append(path[path.index(node) :])
            return
        if node in done or node not in graph:
            return
        for target in sorted(graph[node]):
            visit(target, [*path, node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])
    return found


def test_no_module_imports_itself_round_a_circle():
    assert circles() == []


def test_the_circle_check_is_live(tmp_path):
    pkg = tmp_path / "scalerepro" / "data"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from scalerepro.data import b\n")
    (pkg / "b.py").write_text("def f():\n    from scalerepro.data.a import x\n")
    assert circles(tmp_path / "scalerepro") == [["scalerepro.data.a", "scalerepro.data.b"]]


def test_reading_results_starts_no_mpi():
    """Analysis, the cost model, the tuner and validation read bench and run files without starting MPI."""
    readers = ["scalerepro.analysis." + p.stem for p in (SRC / "analysis").glob("*.py") if p.stem != "__init__"] + [
        "scalerepro.comm.benchfile",
        "scalerepro.comm.costterms",
        "scalerepro.comm.costfit",
        "scalerepro.comm.costprojection",
        "scalerepro.comm.costtable",
        "scalerepro.comm.auto",
        "scalerepro.sim.validate",
    ]
    check = f"import sys; import {', '.join(readers)}; print(sorted({{'mpi4py.MPI', 'torch'}} & set(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


MAX_FUNCTION_LINES = 80


def long_functions(src: Path = SRC, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Every function or method in ``src`` longer than ``limit`` lines, as 'file:line name (n lines)'."""
    found = []
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > limit:
                    found.append(f"{path.relative_to(src.parent)}:{node.lineno} {node.name} ({n} lines)")
    return found


def test_no_function_is_longer_than_80_lines():
    assert long_functions() == []


def test_the_length_check_is_live(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n" + "    x = 1\n" * 80)
    assert long_functions(tmp_path) == [f"{tmp_path.name}/m.py:1 f (81 lines)"]
