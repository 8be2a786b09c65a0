"""MPICH's node shared-memory segments, which a job that does not finalize would leave in /dev/shm.

MPICH (the ``mpich`` wheel) opens one named POSIX segment per node and job for its intra-node messages
(``/dev/shm/mpich_shm_<world id>_<node>``; ``mpich_vci_...`` when it runs several virtual channels) and
unlinks it only in ``MPI_Finalize``. A job that aborts, or whose ranks are killed (a dead rank makes the
launcher kill the rest), never finalizes, so its segments (1 MiB per rank) would stay in node memory until
someone deleted them. Two places keep them from outliving the job:

- :func:`release_bootstrap`, on every rank once MPI is up: the name of the bootstrap segment is needed only
  while the node's ranks open it, and MPICH's POSIX bootstrap waits until every local rank has mapped it
  before ``MPI_Init`` returns; unlinked then, the memory lives exactly as long as the last rank mapping it,
  however the job ends (the pattern UCX uses for its own segments), and ``MPI_Finalize``'s unlink finds
  nothing, silently.
- :func:`remove_orphans`, in ``scalerepro supervise`` after a failed launch: the segments made while it ran
  that no process maps any longer (a job killed before its ranks reached the release, or a virtual-channel
  segment made later).
"""

from __future__ import annotations

import os
from pathlib import Path

SHM = Path("/dev/shm")
PREFIXES = ("mpich_shm_", "mpich_vci_")


def _ours(path: str) -> bool:
    """Whether ``path`` names one of MPICH's segments in /dev/shm."""
    p = Path(path)
    return p.parent == SHM and p.name.startswith(PREFIXES)


def mapped(pid: int | str = "self") -> set[Path]:
    """The MPICH segments process ``pid`` maps (empty if its maps cannot be read)."""
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return set()
    fields = (line.split(maxsplit=5) for line in lines)
    return {Path(f[5].removesuffix(" (deleted)")) for f in fields if len(f) == 6 and _ours(f[5])}


BOOTSTRAP = "mpich_shm_"


def release_bootstrap() -> list[Path]:
    """Unlink the bootstrap segment this rank maps (every rank of the node has mapped it by the time MPI is
    initialised; the first rank to get here removes it, the others find it gone); the ones removed."""
    removed = []
    for path in sorted(p for p in mapped() if p.name.startswith(BOOTSTRAP)):
        try:
            path.unlink()
            removed.append(path)
        except OSError:  # another rank of the node was first
            pass
    return removed


def segments() -> dict[Path, int]:
    """MPICH's segments in /dev/shm owned by this user, with their modification times (ns)."""
    out = {}
    try:
        entries = list(os.scandir(SHM))
    except OSError:
        return {}
    for entry in entries:
        if entry.name.startswith(PREFIXES):
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_uid == os.getuid():
                out[SHM / entry.name] = st.st_mtime_ns
    return out


def remove_orphans(since_ns: int) -> list[Path]:
    """Remove this user's segments made at or after ``since_ns`` that no process maps; the ones removed."""
    fresh = {p for p, mtime in segments().items() if mtime >= since_ns}
    if not fresh:
        return []
    in_use = set().union(*(mapped(proc.name) for proc in Path("/proc").iterdir() if proc.name.isdigit()))
    removed = []
    for path in sorted(fresh - in_use):
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
    return removed
