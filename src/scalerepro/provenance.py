"""What every result records about where it came from: argv, versions, platform, SLURM job, MPI settings, hosts.

:func:`record` is the one block every result JSON (run, bench, bench-train, bench-loader) starts from.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mpi4py import MPI

PACKAGES = ("scalerepro", "numpy", "torch", "torchvision", "mpi4py", "mpich", "pillow")


def versions() -> dict[str, Any]:
    """Versions of Python, the key packages, the MPI library and the git commit."""
    from scalerepro.mpi import library_version

    out: dict[str, Any] = {"python": platform.python_version(), "mpi_library": library_version()}
    for name in PACKAGES:
        loaded = sys.modules.get(name)
        try:
            out[name] = getattr(loaded, "__version__", None) or metadata.version(name)  # torch: "2.14.1+cu130"
        except metadata.PackageNotFoundError:
            out[name] = None
    out["git_commit"] = git_commit()
    return out


def git_commit() -> str | None:
    """HEAD of the working directory's git repository, if any."""
    try:
        res = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None


def argv() -> list[str]:
    """The command line of this process."""
    return list(sys.argv)


SLURM_KEYS = ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NTASKS", "SLURM_JOB_NUM_NODES", "SLURM_CLUSTER_NAME")


def scheduler() -> dict[str, str]:
    """The SLURM job and step this process runs in (empty outside SLURM); a step id means srun launched it."""
    return {k[len("SLURM_") :].lower(): os.environ[k] for k in SLURM_KEYS if k in os.environ}


MPI_ENV_PREFIXES = ("MPIR_", "MPICH_", "UCX_", "FI_")


def mpi_settings() -> dict[str, str]:
    """The MPI library's settings in this process's environment (MPICH's, UCX's, libfabric's), e.g. the netmod."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(MPI_ENV_PREFIXES)}


def record(comm: MPI.Intracomm | None = None) -> dict[str, Any]:
    """Provenance of a result: argv, versions, platform, SLURM job, and with ``comm`` (collective) every rank's host."""
    out: dict[str, Any] = {
        "argv": argv(),
        "versions": versions(),
        "platform": platform.platform(),
        "slurm": scheduler(),
        "mpi_env": mpi_settings(),
    }
    if comm is not None:
        from scalerepro.mpi import hosts

        out["hosts"] = hosts(comm)
    return out
