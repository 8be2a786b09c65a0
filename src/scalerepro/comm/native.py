"""``native``: the MPI library's own MPI_Allreduce (its algorithm choice), the reference peer on host memory."""

from __future__ import annotations

from scalerepro.comm.schedule import Schedule, Spec, world_collective

NAME = "native"
EXECUTOR = "mpi"  # it is MPI's collective: always the MPI executor (CUDA buffers go through host memory)


def schedule(spec: Spec) -> Schedule:
    """One MPI_Allreduce over every rank."""
    return world_collective(spec)
