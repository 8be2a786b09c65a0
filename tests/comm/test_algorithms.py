"""The algorithm table is the one list: the config schema, the cost model, auto's choices and grids agree with it."""

from __future__ import annotations

import ast
from importlib import resources
from pathlib import Path

import pytest
import yaml

from scalerepro.comm import auto, costterms
from scalerepro.comm.algorithms import ALGORITHMS, AUTO, MODULES, names, select
from scalerepro.comm.schedule import AllReduce, Recv, Send, Spec, every_rank
from scalerepro.config import schema
from scalerepro.errors import UserError


def test_the_schemas_algorithm_enum_is_the_table():
    """Every config key that names algorithms takes exactly the table's names (and auto where it can run): the
    schema file lists none of its own, the loaded schema takes them from the table."""
    raw = yaml.safe_load(resources.files("scalerepro").joinpath("schemas/config.schema.yaml").read_text())
    assert "enum" not in raw["$defs"]["algorithm"]
    defs = schema()["$defs"]
    assert defs["algorithm"]["enum"] == [*ALGORITHMS, AUTO]
    assert sorted(defs["algorithm"]["enum"]) == names()


def test_every_algorithm_has_a_cost_model_and_known_grid():
    spec = Spec(p=4, rank=0, count=1 << 12, nodes=(0, 0, 1, 1))
    for name in ALGORITHMS:
        alpha, beta, _ = costterms.terms(name, spec)
        assert alpha > 0, name
        assert beta > 0, name
        assert costterms.modelled_as(name) in ALGORITHMS


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_auto_chooses_among_the_table(device):
    chosen = {auto.rule(n, p, device) for n in (1, 1 << 30) for p in (1, 2, 8)}
    assert chosen <= set(names(device)) - {AUTO}


def test_a_name_selects_its_algorithm_and_the_executor_that_runs_it():
    ring = select("ring", "cpu")
    assert (ring.name, ring.algorithm, ring.executor, ring.device) == ("ring", ALGORITHMS["ring"], "mpi", "cpu")
    assert select("ring", "cuda").executor == "torch"  # comm.executor=auto: torch for CUDA buffers
    assert select("ring", "cpu", "torch").executor == "torch"
    assert select("native", "cpu", "torch").executor == "mpi"  # a library collective runs on its library
    assert select("gloo", "cpu").executor == "torch"
    with pytest.raises(UserError, match="nccl sums CUDA buffers, but this one is on cpu; use gloo"):
        select("nccl", "cpu")
    with pytest.raises(UserError, match="unknown all-reduce algorithm 'nope'"):
        select("nope")


def test_auto_selects_no_algorithm_of_its_own_and_picks_with_its_executor():
    chosen = select(AUTO, "cpu", "torch")
    assert (chosen.name, chosen.algorithm, chosen.executor) == (AUTO, None, "torch")
    assert chosen.pick(ALGORITHMS["ring"]) == select("ring", "cpu", "torch")
    assert chosen.pick(ALGORITHMS["native"]).executor == "mpi"
    assert select(AUTO, "cuda").pick(ALGORITHMS["nccl"]) == select("nccl", "cuda")


def _imports(path: Path) -> set[str]:
    """The scalerepro modules a file imports (``from scalerepro.comm import ring`` counts as the module ring)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "scalerepro.comm":
            found |= {f"scalerepro.comm.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m.startswith("scalerepro")}


def test_algorithm_modules_are_leaves():
    """An algorithm module builds on schedules, shapes, trees and other algorithms; never the table, registry or
    executors."""
    allowed = {"scalerepro.comm.schedule", "scalerepro.comm.shapes", "scalerepro.comm.trees", "scalerepro.errors"}
    allowed |= {m.__name__ for m in MODULES}
    for module in MODULES:
        extra = _imports(Path(module.__file__ or "")) - allowed
        assert not extra, f"{module.__name__} imports {sorted(extra)}"


def _op_kinds(name: str, spec: Spec) -> set[type]:
    """The kinds of step (Send, Recv, AllReduce) in every rank's schedule of ``name``."""
    schedules = every_rank(ALGORITHMS[name].schedule, spec)
    return {type(op) for s in schedules for lane in s.lanes for step in lane for op in step}


def test_each_algorithm_says_truly_whether_its_schedule_holds_library_collectives():
    spec = Spec(p=8, rank=0, count=1 << 12, nodes=(0, 0, 0, 0, 1, 1, 1, 1))
    for name, algo in ALGORITHMS.items():
        kinds = _op_kinds(name, spec)
        assert kinds, name
        assert (AllReduce in kinds) == algo.collectives, (name, kinds)
        assert algo.point_to_point == (kinds <= {Send, Recv}), name


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_each_algorithm_says_truly_whether_it_lays_the_ranks_on_comm_grid(name):
    """A grid algorithm refuses a grid of the wrong dimension count or size; any other ignores comm.grid."""
    algo = ALGORITHMS[name]

    def build(grid: tuple[int, ...]) -> None:
        every_rank(algo.schedule, Spec(p=8, rank=0, count=1 << 10, grid=grid, nodes=(0,) * 8))

    if not algo.grid:
        build((3,))  # fits nothing: ignored
        return
    with pytest.raises(UserError, match="comm.grid"):
        build((3, 3))  # 9 ranks, not 8
    for dims, grid in ((1, (8,)), (2, (4, 2)), (3, (2, 2, 2))):
        if algo.takes_grid(dims):
            build(grid)
        else:
            with pytest.raises(UserError, match=f"must have {algo.grid_dims} dimensions"):
                build(grid)


def test_the_algorithms_command_lists_the_table_with_the_cost_models_terms(capsys):
    from scalerepro.cli import main

    assert main(["algorithms"]) == 0
    rows = {line.split("|")[1].strip().strip("`"): line for line in capsys.readouterr().out.splitlines()[2:]}
    assert list(rows) == [*ALGORITHMS, AUTO]
    a, b, g = costterms.terms("rabenseifner", Spec(8, 0, (16 << 20) // 4))
    assert f"| {a:g}, {b / (16 << 20):.3g}, {g / (16 << 20):.3g} |" in rows["rabenseifner"]
    assert "| 2-D |" in rows["torus2d"]
    assert "| library collectives |" in rows["hierarchical"]


def test_the_algorithms_command_prints_one_modules_description(capsys):
    from scalerepro.cli import main

    assert main(["algorithms", "--name", "ring"]) == 0
    assert capsys.readouterr().out.startswith("``ring``: reduce-scatter then all-gather")
    assert main(["algorithms", "--name", "tree"]) == 2
    assert "--name tree: no such algorithm; choose one of: native," in capsys.readouterr().err
