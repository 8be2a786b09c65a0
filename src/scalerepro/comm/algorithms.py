"""The table of all-reduce algorithms: name -> schedule, pure (no MPI, no torch), for executors and models alike.

An algorithm is a module with ``NAME`` and ``schedule(spec)`` (see
:mod:`scalerepro.comm.schedule`) that describes itself: ``EXECUTOR`` and
``DEVICE`` pin the library collectives to their library (``native``: MPI;
``gloo``: torch on the CPU; ``nccl``: torch on CUDA); ``GRID_DIMS``, where
present, says it lays the ranks on ``comm.grid`` and how many dimensions
that grid needs (None: any); ``COLLECTIVES = True`` says its schedule
holds library all-reduces (a schedule of point-to-point messages only
is the default); a library collective's ``model(spec)``, where it has one,
is what the simulator and the cost model run in its place (else its
executor's default model, :data:`scalerepro.comm.costterms.LIBRARY_MODEL`).
This table imports the algorithm modules; they never import it. To add an
algorithm: write its module and list it in ``MODULES``; the tests, the
schema's list, the cost model and the simulator take it from here.

A command that runs an all-reduce by name (``train --algo``, ``bench
--algos``) resolves the name here once, with :func:`select`, into a
:class:`Selection`: the algorithm and the executor that runs it, which it
hands down to the executors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from scalerepro.comm import (
    dbtree,
    gloo,
    hierarchical,
    multicolor,
    multicolor_ring,
    multiring,
    native,
    nccl,
    rabenseifner,
    ring,
    torus2d,
    torus2d_3phase,
    torus2d_4link,
)
from scalerepro.comm.schedule import Schedule, Spec
from scalerepro.errors import UserError

MODULES: tuple[ModuleType, ...] = (
    native,
    gloo,
    nccl,
    ring,
    rabenseifner,
    multicolor,
    multicolor_ring,
    multiring,
    torus2d,
    torus2d_3phase,
    torus2d_4link,
    hierarchical,
    dbtree,
)
AUTO = "auto"  # not a schedule: picks one of the others per size (scalerepro.comm.auto)


@dataclass(frozen=True)
class Algorithm:
    """A registered algorithm: its schedule, the executor and device kind it is pinned to (None: any), the
    schedule that models a library collective (None: its executor's default model), whether it lays the ranks
    on comm.grid (``grid``, of ``grid_dims`` dimensions, None: any), and whether its schedule holds library
    collectives."""

    name: str
    schedule: Callable[[Spec], Schedule]
    executor: str | None = None
    device: str | None = None
    model: Callable[[Spec], Schedule] | None = None
    grid: bool = False
    grid_dims: int | None = None
    collectives: bool = False

    @property
    def point_to_point(self) -> bool:
        """Its schedule is messages between ranks only (no library collective inside)."""
        return not self.collectives

    def takes_grid(self, dims: int) -> bool:
        """It lays the ranks on a grid of ``dims`` dimensions."""
        return self.grid and self.grid_dims in (None, dims)


def _described(m: ModuleType) -> Algorithm:
    """The table's entry for algorithm module ``m``, from what the module says of itself."""
    return Algorithm(
        m.NAME,
        m.schedule,
        getattr(m, "EXECUTOR", None),
        getattr(m, "DEVICE", None),
        getattr(m, "model", None),
        grid=hasattr(m, "GRID_DIMS"),
        grid_dims=getattr(m, "GRID_DIMS", None),
        collectives=bool(getattr(m, "COLLECTIVES", False) or hasattr(m, "EXECUTOR")),
    )


ALGORITHMS: dict[str, Algorithm] = {m.NAME: _described(m) for m in MODULES}


def names(device: str | None = None) -> list[str]:
    """Every algorithm name ``allreduce`` takes, ``auto`` included, sorted; with ``device`` (cpu, cuda) only
    those that sum buffers there."""
    usable = [a.name for a in ALGORITHMS.values() if device is None or a.device in (None, device)]
    return sorted([*usable, AUTO])


def get(name: str) -> Algorithm | None:
    """The algorithm called ``name`` (None for ``auto``, which chooses per call); the error lists the known ones."""
    if name == AUTO:
        return None
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise UserError(f"unknown all-reduce algorithm {name!r}; choose one of: {', '.join(names())}") from None


def check_named(entry: Mapping[str, Any], where: str, keys: tuple[str, ...] = ("algorithm", "over")) -> None:
    """The algorithms a config entry names under ``keys`` exist; else an error: ``where`` (its file and entry, up
    to the key's prefix), the key, the name and the known ones."""
    for key in keys:
        if key in entry and entry[key] not in ALGORITHMS:
            known = ", ".join(sorted(ALGORITHMS))
            raise UserError(f"{where}{key} {entry[key]!r} is not an algorithm; known: {known}")


def executor_for(algo: Algorithm, device: str, setting: str = "auto") -> str:
    """The executor (``mpi`` or ``torch``) that runs ``algo`` on buffers on ``device`` under ``comm.executor``
    ``setting``: its library's where it is pinned to one, else the setting, else torch for CUDA, MPI for the
    CPU; a UserError naming the fix where the algorithm cannot sum buffers there."""
    if algo.device is not None and algo.device != device:
        other = {"cuda": "nccl", "cpu": "gloo"}.get(device, "ring")
        raise UserError(
            f"{algo.name} sums {algo.device.upper()} buffers, but this one is on {device}; use {other} "
            "there (or put the buffer on the other device: train.device)"
        )
    return algo.executor or unpinned_executor(device, setting)


def unpinned_executor(device: str, setting: str = "auto") -> str:
    """The executor of an algorithm pinned to no library: ``comm.executor`` ``setting``, else (``auto``) torch
    for CUDA buffers and MPI for CPU ones."""
    if setting != "auto":
        return setting
    return "torch" if device == "cuda" else "mpi"


@dataclass(frozen=True)
class Selection:
    """An all-reduce named once and resolved: the algorithm, the device kind (cpu, cuda) of the buffers it sums,
    and the executor that runs them (``mpi`` or ``torch``).

    ``auto`` has no algorithm of its own (``algorithm`` None): it picks one
    per message size when a buffer is resolved, and :meth:`pick` is the
    selection of that pick. Its ``executor`` is the one an algorithm not
    pinned to a library runs on. ``name`` is what records hold: the name as
    the command gave it, so ``auto`` stays ``auto``.
    """

    name: str
    algorithm: Algorithm | None
    executor: str
    device: str

    def pick(self, algo: Algorithm) -> Selection:
        """The selection of ``algo``, ``auto``'s choice for one size, on this selection's device and executor."""
        return Selection(algo.name, algo, executor_for(algo, self.device, self.executor), self.device)


def select(name: str, device: str = "cpu", executor: str = "auto") -> Selection:
    """Resolve the all-reduce called ``name`` for buffers on ``device`` under ``comm.executor`` ``executor``;
    UserErrors name an unknown algorithm and a library collective on the wrong device."""
    algo = get(name)
    if algo is None:
        return Selection(AUTO, None, unpinned_executor(device, executor), device)
    return Selection(algo.name, algo, executor_for(algo, device, executor), device)


def on_grid(name: str, dims: int) -> bool:
    """Algorithm ``name`` (``auto`` or an unknown name: no) lays the ranks on a grid of ``dims`` dimensions."""
    algo = ALGORITHMS.get(name)
    return algo is not None and algo.takes_grid(dims)


def check_config_grid(grid: tuple[int, ...], ranks: dict[str, list[int]], algorithms: dict[str, list[str]]) -> None:
    """A fixed comm.grid fits every rank count of every section that runs a grid algorithm; else name the keys."""
    if not grid:
        return
    for section, counts in ranks.items():
        users = [a for a in algorithms[section] if a in ALGORITHMS and ALGORITHMS[a].grid]
        wrong_dims = [a for a in users if not ALGORITHMS[a].takes_grid(len(grid))]
        if wrong_dims:
            raise UserError(
                f"invalid configuration:\n  comm.grid {list(grid)} has {len(grid)} dimensions but "
                f"{section}.algorithms {wrong_dims} need {ALGORITHMS[wrong_dims[0]].grid_dims}"
            )
        misfit = [p for p in counts if math.prod(grid) != p]
        if users and misfit:
            raise UserError(
                f"invalid configuration:\n  comm.grid {list(grid)} holds {math.prod(grid)} ranks, but "
                f"{section}.ranks has {misfit} for {users}; leave comm.grid empty (the shape then comes "
                f"from the rank count and node layout) or run only {math.prod(grid)} ranks"
            )
