"""Distributed set-up, in the one order that works: MPI's environment, then MPI, then torch's process group.

1. **Environment, before MPI starts** (:func:`prepare_environment`, and
   :func:`start_mpi` for what only a command's config knows). MPICH reads
   its settings once, when ``MPI_Init`` runs, and ``mpi4py`` runs it when
   ``mpi4py.MPI`` is imported; a variable set after that changes nothing.
   The settings are MPICH's yield settings for more ranks than cores
   (:func:`scalerepro.oversubscription.tune`), the network module under
   SLURM's PMI-2 (:func:`scalerepro.netmod.choose_netmod`), and emulated nodes,
   MPICH's cliques (:func:`scalerepro.oversubscription.emulate_nodes`). A
   command module may import MPI at its top, so the CLI's ``main`` calls
   :func:`prepare_environment` before it imports the command's module;
   ``train`` knows its emulated node count only from its config, so it
   imports nothing that starts MPI before it calls :func:`start_mpi`.
2. **MPI** (:func:`start_mpi`): importing :mod:`scalerepro.mpi` starts it
   and releases MPICH's node segments (:mod:`scalerepro.shm`); the world
   communicator is what every later step runs over.
3. **torch's process group, only where the torch executor runs**
   (:func:`start_process_group`): torch.distributed meets over MPI (rank 0
   announces its store's address through the communicator, so MPI must be
   up), and torch in a process slows MPI's small messages, so the group is
   made on first use, by the comm context that needs it
   (:meth:`scalerepro.comm.context.Context.process_groups`), not up front.

As torchvision's ``init_distributed_mode`` does for its references, this
module owns the sequence; callers call it rather than repeating a step.
Importing it starts neither MPI nor torch (``scalerepro --help`` and the
supervisor import the CLI without either). A launcher of ranks that do
not go through the CLI (the tests' ``run_mpi``) passes
:func:`scalerepro.oversubscription.launch_env` to ``mpiexec`` instead of
step 1.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from scalerepro.errors import UserError
from scalerepro.netmod import choose_netmod
from scalerepro.oversubscription import emulate_nodes
from scalerepro.oversubscription import tune as tune_mpi_progress

if TYPE_CHECKING:
    from mpi4py import MPI


def prepare_environment(env: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Step 1: MPICH's settings for this node and launcher into ``env`` (default: this process's), where they
    apply and the user set none; what was added. Call it before anything imports ``mpi4py.MPI``."""
    return {**tune_mpi_progress(env), **choose_netmod(env)}


def start_mpi(emulated_nodes: int = 0) -> MPI.Intracomm:
    """Steps 1 and 2: the environment (``emulated_nodes`` > 1: split this node's ranks into that many MPICH
    cliques), then MPI; the world communicator. Once MPI runs, later calls only return the world."""
    prepare_environment()  # adds nothing once added: the CLI's main has usually run it
    emulate_nodes(emulated_nodes)
    from scalerepro.mpi import world  # mpi4py starts MPI on import

    return world()


def rendezvous(comm: Any, host: str, timeout: dt.timedelta) -> Any:
    """torch.distributed's key-value store: rank 0 binds it on a free port first, then announces host and port
    through MPI (a port picked, closed and announced could be taken by another job in between)."""
    import torch.distributed as dist

    server = None
    if comm.rank == 0:
        server = dist.TCPStore(host, 0, comm.size, True, timeout=timeout, wait_for_workers=False)  # type: ignore[attr-defined]  # exported by torch.distributed, not listed in its __all__
    addr, port = comm.bcast((host, server.port) if server is not None else None, root=0)
    return server if server is not None else dist.TCPStore(addr, port, comm.size, False, timeout=timeout)  # type: ignore[attr-defined]  # as above


def start_process_group(comm: Any, timeout_s: float) -> ProcessGroups:
    """Step 3: torch.distributed's default process group over MPI communicator ``comm`` (collective; rank 0's
    host, or ``SCALEREPRO_GLOO_HOST``, and a free port broadcast through MPI); gloo for CPU tensors, and NCCL
    for CUDA tensors where CUDA is present."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        raise UserError(
            "torch.distributed is already initialised in this process; scalerepro sets up its own "
            "process group (one comm Context per process owns it)"
        )
    timeout = dt.timedelta(seconds=timeout_s)
    store = rendezvous(comm, os.environ.get("SCALEREPRO_GLOO_HOST") or socket.gethostname(), timeout)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, store=store, rank=comm.rank, world_size=comm.size, timeout=timeout)
    return ProcessGroups(comm, backend)


class ProcessGroups:
    """The process's torch.distributed world (made by :func:`start_process_group`) over an MPI communicator,
    and the sub-groups of its ranks that the torch executor's collectives run on."""

    def __init__(self, comm: Any, backend: str) -> None:
        """The default group, set up over ``comm`` with ``backend``."""
        self.comm = comm
        self.backend = backend
        self.groups: dict[tuple[int, ...], Any] = {}

    def group(self, ranks: tuple[int, ...]) -> Any:
        """The process group of ``ranks`` (global ranks; None for the whole world), made on first use."""
        import torch.distributed as dist

        if len(ranks) == self.comm.size:
            return None
        if ranks not in self.groups:
            self.groups[ranks] = dist.new_group(list(ranks), use_local_synchronization=True)
        return self.groups[ranks]

    def close(self) -> None:
        """Destroy the process groups."""
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
