"""``scalerepro stage``: copy shards into node memory, verified, inside the training allocation.

Launched with the same launcher as training (``mpiexec -n N`` or
``srun --mpi=pmi2``); ranks are grouped by node through MPI's shared-memory
split and the first rank of each node copies, the others wait. Each shard
is copied to a temporary name, verified against the manifest's sha256 and
only then renamed, so a half-copied shard is never taken as valid; a shard
already present and verified is skipped, so a warm node starts fast.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from scalerepro.data.shards import MANIFEST, read_manifest, sha256_file
from scalerepro.errors import UserError
from scalerepro.mpi import agree, node_comm


def staged_folder(root: str, manifest: dict[str, Any]) -> Path:
    """Where a split's shards live on a node: ``<root>/<dataset>-<source hash>/<split>``."""
    expanded = os.path.expandvars(os.path.expanduser(root))
    if "$" in expanded:
        raise UserError(f"stage.root {root!r} names an unset environment variable; set it or choose another folder")
    return Path(expanded) / f"{manifest['dataset']}-{manifest['source']['sha256'][:12]}" / manifest["split"]


def _verified(path: Path, entry: dict[str, Any]) -> bool:
    """True if ``path`` exists with the manifest's size and sha256."""
    return path.is_file() and path.stat().st_size == entry["bytes"] and sha256_file(path) == entry["sha256"]


def check_capacity(dest: Path, needed: int) -> None:
    """Fail with the numbers if ``needed`` bytes do not fit in ``dest``'s file system."""
    probe = dest
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if needed > free:
        raise UserError(
            f"staging needs {needed / 2**20:.1f} MiB in {dest} but only {free / 2**20:.1f} MiB is free; "
            "free memory there or set stage.root to a larger node-local folder"
        )


def stage_split(shard_dir: Path, root: str) -> dict[str, Any]:
    """Copy one split's shards from ``shard_dir`` into node memory; return what was done."""
    t0 = time.perf_counter()
    manifest = read_manifest(shard_dir)
    dest = staged_folder(root, manifest)
    present = [e for e in manifest["shards"] if _verified(dest / e["file"], e)]
    missing = [e for e in manifest["shards"] if e not in present]
    check_capacity(dest, sum(e["bytes"] for e in missing))
    dest.mkdir(parents=True, exist_ok=True)
    for entry in missing:
        src, final = Path(shard_dir) / entry["file"], dest / entry["file"]
        tmp = dest / f".{entry['file']}.{os.getpid()}.partial"
        shutil.copyfile(src, tmp)
        if not _verified(tmp, entry):
            tmp.unlink(missing_ok=True)
            raise UserError(f"{src} does not match its manifest entry (sha256/size); re-run `scalerepro shard`")
        os.replace(tmp, final)
    shutil.copyfile(Path(shard_dir) / MANIFEST, dest / f".{MANIFEST}.partial")
    os.replace(dest / f".{MANIFEST}.partial", dest / MANIFEST)
    return {
        "split": manifest["split"],
        "dest": str(dest),
        "copied": len(missing),
        "already_present": len(present),
        "bytes_copied": sum(e["bytes"] for e in missing),
        "seconds": round(time.perf_counter() - t0, 4),
    }


def clean(root: str) -> list[str]:
    """Remove everything staged under ``root``; return what was removed."""
    base = Path(os.path.expandvars(os.path.expanduser(root)))
    removed = []
    if base.is_dir():
        for child in sorted(base.iterdir()):
            shutil.rmtree(child) if child.is_dir() else child.unlink()
            removed.append(str(child))
    return removed


def stage_on_nodes(comm: Any, shard_dirs: list[Path], root: str) -> dict[str, Any]:
    """Stage every split on every node (first rank per node copies); the record is complete on rank 0."""
    node = node_comm(comm)
    done = agree(comm, lambda: [stage_split(d, root) for d in shard_dirs] if node.rank == 0 else None)
    gathered = comm.gather({"host": socket.gethostname(), "splits": done}, root=0) or []
    return {"nodes": [g for g in gathered if g["splits"] is not None], "world_size": comm.size, "root": root}


def clean_on_nodes(comm: Any, root: str) -> list[str]:
    """Remove the staged folders on every node (first rank per node)."""
    node = node_comm(comm)
    return agree(comm, lambda: clean(root) if node.rank == 0 else [])


def describe(record: dict[str, Any]) -> str:
    """One line per node and split, for people."""
    return "\n".join(
        f"{n['host']}: {s['split']} -> {s['dest']}: copied {s['copied']}, already there {s['already_present']}, "
        f"{s['seconds']:.2f} s"
        for n in record["nodes"] for s in n["splits"]
    )
