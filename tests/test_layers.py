"""Imports run one way: each unit of the package imports only its own modules and units of lower layers."""

from __future__ import annotations

import ast
from pathlib import Path

import scalerepro

SRC = Path(scalerepro.__file__).parent

# Lowest first; units on one layer do not import each other (data and comm stay independent).
LAYERS: list[set[str]] = [
    {"errors", "shm"},
    {"io"},
    {"mpi", "oversubscription", "netmod", "sources"},
    {"provenance", "baselines"},
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
