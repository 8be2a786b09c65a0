"""The MPI world: communicator access, node grouping and the one rank-0 side-effect helper."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar, cast

from mpi4py import MPI

from scalerepro import shm
from scalerepro.errors import UserError

T = TypeVar("T")

shm.release_bootstrap()  # MPI is up (mpi4py initialises it on import): see scalerepro.shm


def _intra(comm: MPI.Comm) -> MPI.Intracomm:
    """A split of an intracommunicator, typed as one (mpi4py's stubs return Comm from Split and Split_type)."""
    return cast(MPI.Intracomm, comm)


def world() -> MPI.Intracomm:
    """COMM_WORLD (MPI is initialised on import; a plain `python` run is a world of one)."""
    return MPI.COMM_WORLD


def exit_now(code: int) -> NoReturn:
    """End this rank at once: flush, finalize MPI, and skip the interpreter's teardown.

    With torch loaded, Python's teardown (freeing every module's objects)
    costs about a second of CPU per process, paid by every rank of every run
    after its results are written. Call it only when nothing is left to tear
    down: files closed and renamed, loader workers and threads joined.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    if MPI.Is_initialized() and not MPI.Is_finalized():
        MPI.Finalize()
    os._exit(code)


ABORT_GRACE_S = 0.5  # what a rank printed reaches the launcher before MPI_Abort tears the job's stdio down


def abort_job(code: int) -> NoReturn:
    """End every rank of the job with ``code`` from this one: flush what this rank printed, give the launcher
    time to forward the output, then ``MPI_Abort``."""
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(ABORT_GRACE_S)
    MPI.COMM_WORLD.Abort(code)
    os._exit(code)  # Abort does not return; for the type checker, and should it ever


def this_node() -> str:
    """This process's node: SLURM's node name under SLURM (two slurmd on one host are two nodes), else the host."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def node_comm(comm: MPI.Intracomm) -> MPI.Intracomm:
    """Ranks on this rank's node: the same SLURM node (when under SLURM) and the same shared-memory domain."""
    names = comm.allgather(os.environ.get("SLURMD_NODENAME", ""))
    if len(set(names)) == 1:
        return _intra(comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank))
    by_name = comm.Split(sorted(set(names)).index(names[comm.rank]), key=comm.rank)
    node = by_name.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    by_name.Free()
    return _intra(node)


def block_ordered(comm: MPI.Intracomm) -> MPI.Intracomm:
    """The same ranks renumbered node by node (a round-robin placement, as MPICH's emulated nodes are, made block)."""
    node = node_comm(comm)
    leader, local = node.bcast(comm.rank, root=0), node.rank
    node.Free()
    return _intra(comm.Split(0, key=leader * comm.size + local))


@dataclass(frozen=True)
class Layout:
    """Where a rank sits: its node, the node count, its rank on the node and every node's rank count."""

    node: int = 0
    local_rank: int = 0
    ranks_per_node: tuple[int, ...] = (1,)

    @property
    def nodes(self) -> int:
        """Number of nodes."""
        return len(self.ranks_per_node)

    @property
    def local_size(self) -> int:
        """Ranks on this rank's node."""
        return self.ranks_per_node[self.node]


def node_layout(comm: MPI.Intracomm) -> Layout:
    """This rank's :class:`Layout`: nodes numbered by their first rank, ranks by their world rank."""
    node = node_comm(comm)
    local_rank = node.rank
    first = comm.allgather(node.allgather(comm.rank)[0])
    node.Free()
    leaders = sorted(set(first))
    sizes = tuple(first.count(r) for r in leaders)
    return Layout(node=leaders.index(first[comm.rank]), local_rank=local_rank, ranks_per_node=sizes)


def nodes_of_ranks(comm: MPI.Intracomm) -> tuple[int, ...]:
    """The node of every rank, numbered as :func:`node_layout` numbers them (collective)."""
    return tuple(comm.allgather(node_layout(comm).node))


def node_table(comm: MPI.Intracomm) -> list[dict[str, Any]]:
    """Every node of the run (as :func:`node_layout` numbers them): its name and its world ranks (collective)."""
    at = node_layout(comm)
    placed = comm.allgather((at.node, this_node()))
    return [
        {
            "node": k,
            "name": next(name for n, name in placed if n == k),
            "ranks": [r for r, (n, _) in enumerate(placed) if n == k],
        }
        for k in range(at.nodes)
    ]


def hosts(comm: MPI.Intracomm) -> list[str]:
    """Host name of every rank, in rank order."""
    return comm.allgather(socket.gethostname())


def processes(comm: MPI.Intracomm) -> list[dict[str, Any]]:
    """Rank, host, node (:func:`this_node`) and pid of every rank, in rank order (what ``scalerepro supervise``
    watches)."""
    placed = comm.allgather((socket.gethostname(), this_node(), os.getpid()))
    return [{"rank": r, "host": h, "node": n, "pid": p} for r, (h, n, p) in enumerate(placed)]


def library_version() -> str:
    """The MPI library's version string, first line."""
    return MPI.Get_library_version().strip().splitlines()[0]


def on_root(comm: MPI.Intracomm, fn: Callable[[], T]) -> T | None:
    """Run a side effect on rank 0 only; an error there is raised on every rank (a UserError as one shared error,
    printed once)."""
    result, error = None, None
    if comm.rank == 0:
        try:
            result = fn()
        except Exception as exc:  # re-raised below, on all ranks
            error = exc
    user = str(error) if isinstance(error, UserError) else None
    other = f"{type(error).__name__}: {error}" if error is not None and user is None else None
    user, other = comm.bcast((user, other), root=0)
    if error is not None and user is None:
        raise error  # with its traceback, on rank 0; the other ranks stop with the shared line below
    if user is not None or other is not None:
        raise UserError(user if user is not None else f"rank 0 failed: {other}", shared=True)
    return result


def agree(comm: MPI.Intracomm, fn: Callable[[], T]) -> T:
    """Run ``fn`` on every rank; if any rank fails, raise one clear error on all of them."""
    result: T | None = None
    error: str | None = None
    try:
        result = fn()
    except UserError as exc:
        error = str(exc)
    errors = comm.allgather(error)
    bad = [(r, e) for r, e in enumerate(errors) if e is not None]
    if bad:
        rank, message = bad[0]
        raise UserError(message if comm.size == 1 else f"rank {rank}: {message}", shared=True)
    return cast(T, result)  # fn returned on every rank
