"""``scalerepro algorithms``: every all-reduce algorithm, as its module describes itself, with its cost terms."""

from __future__ import annotations

import argparse
import inspect

from scalerepro.comm.algorithms import ALGORITHMS, AUTO, MODULES, Algorithm
from scalerepro.comm.costterms import terms
from scalerepro.comm.schedule import Spec
from scalerepro.errors import UserError

DESCRIPTION = (
    "Lists the table of comm/algorithms.py: each algorithm's name, module and one line from its docstring, where "
    "it runs (executor, device), whether it lays the ranks on comm.grid, whether its schedule holds library "
    "collectives, and its cost terms read off its schedule (stages A, bytes per element sent B/n and summed G/n, "
    "unpipelined) at 8 ranks on one node and at 16 ranks on 4 nodes of 4. --name prints one algorithm's whole "
    "docstring: its construction, sources, cost and what it reduces to."
)
EXAMPLE_BYTES = 16 << 20
ONE_NODE = Spec(8, 0, EXAMPLE_BYTES // 4)
FOUR_NODES = Spec(16, 0, EXAMPLE_BYTES // 4, nodes=tuple(r // 4 for r in range(16)))


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro algorithms``."""
    s.add_argument("--name", help="print this algorithm's whole description instead of the table")


def command(args: argparse.Namespace) -> None:
    """The table (markdown), or one algorithm's docstring."""
    modules = {m.NAME: m for m in MODULES}
    if args.name:
        if args.name not in modules:
            raise UserError(f"--name {args.name}: no such algorithm; choose one of: {', '.join(modules)}")
        print(inspect.cleandoc(modules[args.name].__doc__ or ""))
        return
    print(
        "| name | module | what it is | runs on | grid | schedule | 8 ranks, 1 node: A, B/n, G/n | 16 on 4 nodes: A |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, algo in ALGORITHMS.items():
        module = modules[name]
        print(
            f"| `{name}` | `{module.__name__.rsplit('.', 1)[-1]}.py` | {first_sentence(module.__doc__ or '')} | "
            f"{runs_on(algo)} | {grid(algo)} | {'point-to-point' if algo.point_to_point else 'library collectives'} "
            f"| {costs(name, ONE_NODE)} | {costs(name, FOUR_NODES, per_byte=False)} |"
        )
    print(f"| `{AUTO}` | `auto.py` | picks one of the above per message size and rank count | | | | | |")


def first_sentence(doc: str) -> str:
    """The docstring's first line without its ````name``: ```` lead."""
    first = doc.strip().splitlines()[0] if doc.strip() else ""
    return first.split(": ", 1)[1] if ": " in first else first


def runs_on(algo: Algorithm) -> str:
    """The executor and device it is pinned to, or ``either executor``."""
    return " ".join(x for x in (algo.executor, algo.device) if x) or "either executor"


def grid(algo: Algorithm) -> str:
    """The comm.grid it lays the ranks on: its dimension count, ``any``, or nothing."""
    if not algo.grid:
        return ""
    return "any dims" if algo.grid_dims is None else f"{algo.grid_dims}-D"


def costs(name: str, spec: Spec, per_byte: bool = True) -> str:
    """A (and, ``per_byte``, B/n and G/n) of ``name`` on ``spec``: the cost model's terms, or why there are none."""
    try:
        a, b, g = terms(name, spec)
    except UserError as exc:
        return f"n/a ({exc})"
    n = spec.count * spec.itemsize
    return f"{a:g}, {b / n:.3g}, {g / n:.3g}" if per_byte else f"{a:g}"
