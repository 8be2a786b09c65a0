"""The table of all-reduce algorithms: name -> schedule, pure (no MPI, no torch), for executors and models alike.

An algorithm is a module with ``NAME`` and ``schedule(spec)`` (see
:mod:`scalerepro.comm.schedule`); ``EXECUTOR`` and ``DEVICE`` pin the
library collectives to their library (``native``: MPI; ``gloo``: torch on
the CPU; ``nccl``: torch on CUDA); a library collective's ``model(spec)``,
where it has one, is what the simulator and the cost model run in its
place (else its executor's default model,
:data:`scalerepro.comm.costmodel.LIBRARY_MODEL`). This table imports the algorithm
modules; they never import it. To add an algorithm: write its module and
list it in ``MODULES``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from scalerepro.comm import (
    gloo,
    hierarchical,
    multicolor,
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
    multiring,
    torus2d,
    torus2d_3phase,
    torus2d_4link,
    hierarchical,
)
AUTO = "auto"  # not a schedule: picks one of the others per size (scalerepro.comm.auto)


@dataclass(frozen=True)
class Algorithm:
    """A registered algorithm: its schedule, the executor and device kind it is pinned to (None: any), and
    the schedule that models a library collective (None: its executor's default model)."""

    name: str
    schedule: Callable[[Spec], Schedule]
    executor: str | None = None
    device: str | None = None
    model: Callable[[Spec], Schedule] | None = None


ALGORITHMS: dict[str, Algorithm] = {
    m.NAME: Algorithm(
        m.NAME, m.schedule, getattr(m, "EXECUTOR", None), getattr(m, "DEVICE", None), getattr(m, "model", None)
    )
    for m in MODULES
}


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
