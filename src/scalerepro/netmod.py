"""MPICH's network module for ranks started by SLURM's PMI-2 (``srun --mpi=pmi2``), chosen before MPI starts.

The ``mpich`` wheel carries two network modules, UCX and OFI (libfabric),
and starts UCX when nothing says otherwise. Under ``srun --mpi=pmi2`` on
more than one node, UCX's worker addresses cross SLURM's PMI-2 server as
segmented values that the server does not parse (slurmstepd: "mpi/pmi2:
value not properly terminated in client request"); ``MPI_Init`` then ends
in "Destination is unreachable" on one rank while the others wait in PMI
for ever. OFI's addresses fit one PMI value. So under SLURM's PMI-2
:mod:`scalerepro.distributed` sets ``MPIR_CVAR_CH4_NETMOD=ofi`` before MPI
starts, unless the variable is already set (``ucx`` there brings UCX
back). Other launchers (Hydra's ``mpiexec``, ``srun --mpi=pmix``) are
left alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

NETMOD = "MPIR_CVAR_CH4_NETMOD"
PMI2_NETMOD = "ofi"


def under_slurm_pmi2(env: Mapping[str, str]) -> bool:
    """Whether this process is a task that ``srun --mpi=pmi2`` started (SLURM sets the PMI type and PMI_FD)."""
    return env.get("SLURM_MPI_TYPE") == "pmi2" and "PMI_FD" in env


def netmod_env(env: Mapping[str, str]) -> dict[str, str]:
    """The netmod to add to ``env``: OFI under SLURM's PMI-2, nothing elsewhere or where the user chose one."""
    return {NETMOD: PMI2_NETMOD} if under_slurm_pmi2(env) and NETMOD not in env else {}


def choose_netmod(env: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Add the netmod setting to ``env`` (default: this process's) where it applies; return what was added."""
    target = os.environ if env is None else env
    added = netmod_env(target)
    target.update(added)
    return added
