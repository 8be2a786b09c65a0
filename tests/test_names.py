"""Names say what they are: no two modules of the package define a public function or class of one name, except
the names of an interface several modules implement on purpose."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import scalerepro

SRC = Path(scalerepro.__file__).parent

# name -> the modules that implement it as one interface, and what the interface is
INTERFACES: dict[str, tuple[str, str]] = {
    "arguments": ("cli/", "a command module's flags (scalerepro.cli.COMMANDS)"),
    "command": ("cli/", "a command module's work (scalerepro.cli.COMMANDS)"),
    "schedule": ("comm/", "an algorithm module's schedule (scalerepro.comm.algorithms.MODULES)"),
    "default_grid": ("comm/", "a grid algorithm module's grid for a rank count"),
    "compile_plan": ("comm/", "an executor's compiled schedule (scalerepro.comm.mpi_executor, torch_executor)"),
}


def public_names(src: Path = SRC) -> dict[str, list[str]]:
    """Every public top-level function and class name of the package, with the modules that define it."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(src.rglob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and not node.name.startswith(
                "_"
            ):
                found[node.name].append(str(path.relative_to(src)))
    return found


def collisions(src: Path = SRC) -> list[str]:
    """'name: module, module' for every public name defined twice outside its interface's modules."""
    bad = []
    for name, modules in sorted(public_names(src).items()):
        within = INTERFACES.get(name, ("", ""))[0]
        if len(modules) > 1 and not (within and all(m.startswith(within) for m in modules)):
            bad.append(f"{name}: {', '.join(modules)}")
    return bad


def test_no_two_modules_define_one_public_name_outside_an_interface():
    assert collisions() == []


def test_the_name_check_finds_a_second_definition(tmp_path):
    (tmp_path / "comm").mkdir()
    (tmp_path / "a.py").write_text("def load():\n    pass\n")
    (tmp_path / "comm" / "b.py").write_text("class load:\n    pass\n\ndef schedule():\n    pass\n")
    (tmp_path / "comm" / "c.py").write_text("def schedule():\n    pass\n")
    (tmp_path / "d.py").write_text("def schedule():\n    pass\n")
    assert collisions(tmp_path) == ["load: a.py, comm/b.py", "schedule: comm/b.py, comm/c.py, d.py"]
