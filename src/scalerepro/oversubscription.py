"""MPI progress settings for a node running more ranks than it has cores, chosen before MPI starts.

MPICH waits for messages by polling without giving up the core. With more
ranks than cores (the laptop mode: 4 CPU ranks on 2 cores), a rank that
polls for a message from a descheduled peer burns its whole time slice,
and every dependent step of a collective can cost a scheduler tick. MPICH's
own CI runs its oversubscribed tests with the three settings below, which
make a waiting rank yield the core. They must be in the environment when
MPI initialises, so :mod:`scalerepro.distributed` calls :func:`tune` (and
:func:`emulate_nodes`) before MPI starts (importing the package changes
nothing); a launcher of ranks that do not go through the CLI (the tests'
helper) passes :func:`launch_env` to ``mpiexec`` instead.

Settings already in the environment win. ``SCALEREPRO_MPI_YIELD=1`` forces
the settings, ``=0`` keeps MPICH's defaults even when oversubscribed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, MutableMapping

from scalerepro.errors import UserError

YIELD_SETTINGS = {
    "MPIR_CVAR_POLLS_BEFORE_YIELD": "1",
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "true",
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "1",
}
SWITCH = "SCALEREPRO_MPI_YIELD"
# Launchers' names for "ranks on this node": Hydra (mpiexec), Open MPI, srun.
LOCAL_RANKS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")


def local_ranks(env: Mapping[str, str]) -> int:
    """Ranks the launcher put on this node (1 outside a launcher); SLURM's "4(x2),3" reads as 4."""
    for key in LOCAL_RANKS:
        match = re.match(r"\d+", env.get(key, ""))
        if match:
            return int(match.group())
    return 1


def usable_cpus() -> set[int]:
    """The CPUs this process may run on (its affinity: a cgroup, srun --cpus-per-task, taskset), not the machine's."""
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))


def node_cores(env: Mapping[str, str]) -> int:
    """Cores this node's ranks share: SLURM's allocation, else the cores this process may run on."""
    match = re.match(r"\d+", env.get("SLURM_CPUS_ON_NODE", ""))
    if match:
        return int(match.group())
    return len(usable_cpus())


def yield_env(env: Mapping[str, str], cores: int) -> dict[str, str]:
    """The yield settings to add to ``env`` (none unless oversubscribed or forced; never overriding)."""
    switch = env.get(SWITCH, "auto").strip().lower()
    if switch not in ("auto", "0", "1"):
        raise UserError(f"{SWITCH}={env[SWITCH]!r}: use 1 (yield), 0 (MPICH's default polling) or unset (auto)")
    wanted = switch == "1" or (switch == "auto" and local_ranks(env) > cores)
    return {k: v for k, v in YIELD_SETTINGS.items() if wanted and k not in env}


def tune(env: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Add the yield settings to ``env`` (default: this process's) where they apply; return what was added."""
    target = os.environ if env is None else env
    added = yield_env(target, node_cores(target))
    target.update(added)
    return added


def launch_env(ranks: int, env: Mapping[str, str]) -> dict[str, str]:
    """The environment for launching ``ranks`` ranks on this node: ``env`` plus the yield settings they need."""
    return {**env, **yield_env({**env, LOCAL_RANKS[0]: str(ranks)}, node_cores(env))}


CLIQUES = "MPIR_CVAR_NUM_CLIQUES"


def emulate_nodes(count: int, env: MutableMapping[str, str] | None = None) -> None:
    """Split this node's ranks into ``count`` emulated nodes (MPICH cliques); call before MPI starts; <= 1: no-op."""
    if count > 1:
        (os.environ if env is None else env)[CLIQUES] = str(count)
