"""``scalerepro stage``: copy shards into node memory, verified, inside the training allocation.

Launched with the same launcher as training (``mpiexec -n N`` or
``srun --mpi=pmi2``); ranks are grouped by node (SLURM's node name under
SLURM, and MPI's shared-memory split) and the first rank of each node copies
just the shards its node's ranks read (shard k on node k mod nodes) into the
node's own folder, ``<stage.root>/<node>/``; the others wait. Free capacity
for every split is checked before the first byte is copied. Each shard
is copied to a temporary name, verified against the manifest's sha256 and
only then renamed, so a half-copied shard is never taken as valid; a shard
already present and verified is skipped, so a warm node starts fast. The
manifest is checked against the shards first (their footers:
:func:`~scalerepro.data.shards.check_manifest`), and the staged folder
keeps only shards the manifest lists (one left from a sharding with more
shards of the same source is removed), so the loader's check of the staged
copy holds.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalerepro.data.shards import MANIFEST, check_manifest, node_shards, open_shards, read_manifest, sha256_file
from scalerepro.errors import UserError
from scalerepro.io import write_json_atomic
from scalerepro.mpi import agree, node_layout, this_node


def node_root(root: str, node: str) -> Path:
    """A node's own folder under ``stage.root``: ``<root>/<node>`` (two SLURM nodes on one host share its memory)."""
    expanded = os.path.expandvars(Path(root).expanduser())
    if "$" in expanded:
        raise UserError(f"stage.root {root!r} names an unset environment variable; set it or choose another folder")
    return Path(expanded) / node


def staged_folder(root: str, manifest: dict[str, Any], node: str) -> Path:
    """Where a split's shards live on ``node``: ``<root>/<node>/<dataset>-<source hash>/<split>``."""
    split: str = manifest["split"]
    return node_root(root, node) / f"{manifest['dataset']}-{manifest['source']['sha256'][:12]}" / split


def _verified(path: Path, entry: dict[str, Any]) -> bool:
    """True if ``path`` exists with the manifest's size and sha256."""
    return path.is_file() and path.stat().st_size == entry["bytes"] and sha256_file(path) == entry["sha256"]


def _record_path(path: Path) -> Path:
    """Where staging records the shard it verified: ``.<file>.staged`` beside it."""
    return path.with_name(f".{path.name}.staged")


def _record(path: Path, entry: dict[str, Any]) -> None:
    """Note that ``path`` was verified against ``entry``: its sha256, size, modification time and inode."""
    st = path.stat()
    write_json_atomic(
        _record_path(path),
        {"sha256": entry["sha256"], "bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino},
    )


def _trusted(path: Path, entry: dict[str, Any]) -> bool:
    """True if ``path`` holds ``entry``'s shard: by its size and the record staging wrote when it verified it
    (unchanged since: same size, modification time and inode), else by hashing it again (and recording that).
    A restart then does not re-read every staged shard (hundreds of GB per node at ImageNet scale)."""
    if not path.is_file():
        return False
    st = path.stat()
    try:
        noted = json.loads(_record_path(path).read_text())
    except (OSError, ValueError):
        noted = {}
    if (
        noted == {"sha256": entry["sha256"], "bytes": entry["bytes"], "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}
        and st.st_size == entry["bytes"]
    ):
        return True
    if not _verified(path, entry):
        return False
    _record(path, entry)
    return True


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


@dataclass
class StagePlan:
    """One split on one node: where it goes, which of the node's shards are there and which to copy."""

    shard_dir: Path
    manifest: dict[str, Any]
    dest: Path
    present: list[dict[str, Any]]
    missing: list[dict[str, Any]]


def plan_split(shard_dir: Path, root: str, node: int = 0, nodes: int = 1, name: str = "local") -> StagePlan:
    """What staging one split onto node ``node`` (called ``name``) of ``nodes`` needs (shard k goes to node
    k mod nodes); the manifest checked against the shard folder first."""
    manifest = read_manifest(shard_dir)
    dest = staged_folder(root, manifest, name)
    mine = [manifest["shards"][k] for k in node_shards(len(manifest["shards"]), node, nodes)]
    present = [e for e in mine if _trusted(dest / e["file"], e)]
    missing = [e for e in mine if e not in present]
    _check_sources(Path(shard_dir), missing)
    check_manifest(Path(shard_dir), manifest, mine)
    return StagePlan(Path(shard_dir), manifest, dest, present, missing)


def _check_sources(shard_dir: Path, entries: list[dict[str, Any]]) -> None:
    """Before any copy: every shard to copy exists with its manifest size (else name them and the fix)."""
    absent = [e["file"] for e in entries if not (shard_dir / e["file"]).is_file()]
    if absent:
        raise UserError(
            f"{shard_dir}: {len(absent)} shard(s) listed in its {MANIFEST} are missing ({', '.join(absent[:5])}); "
            f"restore them or re-run `scalerepro shard`"
        )
    resized = [e["file"] for e in entries if (shard_dir / e["file"]).stat().st_size != e["bytes"]]
    if resized:
        raise UserError(
            f"{shard_dir}: {len(resized)} of {len(entries)} shards differ in size from its {MANIFEST} "
            f"({', '.join(resized[:5])}): the manifest belongs to another dataset or the shards were "
            f"rewritten; re-run `scalerepro shard`"
        )


def copy_split(plan: StagePlan) -> dict[str, Any]:
    """Copy a planned split's missing shards (temporary name, verify, rename), then its manifest."""
    t0 = time.perf_counter()
    plan.dest.mkdir(parents=True, exist_ok=True)
    for entry in plan.missing:
        src, final = plan.shard_dir / entry["file"], plan.dest / entry["file"]
        tmp = plan.dest / f".{entry['file']}.{os.getpid()}.partial"
        shutil.copyfile(src, tmp)
        if not _verified(tmp, entry):
            tmp.unlink(missing_ok=True)
            raise UserError(f"{src} does not match its manifest entry (sha256/size); re-run `scalerepro shard`")
        tmp.replace(final)
        _record(final, entry)
    _drop_unlisted(plan.dest, plan.manifest)
    shutil.copyfile(plan.shard_dir / MANIFEST, plan.dest / f".{MANIFEST}.partial")
    (plan.dest / f".{MANIFEST}.partial").replace(plan.dest / MANIFEST)
    return {
        "split": plan.manifest["split"],
        "dest": str(plan.dest),
        "shards": [e["file"] for e in plan.present + plan.missing],
        "copied": len(plan.missing),
        "already_present": len(plan.present),
        "bytes_copied": sum(e["bytes"] for e in plan.missing),
        "seconds": round(time.perf_counter() - t0, 4),
    }


def _drop_unlisted(dest: Path, manifest: dict[str, Any]) -> None:
    """Remove staged shards (and their records) the manifest does not list: left from another sharding of the
    same source, they would waste node memory and make the staged copy disagree with its manifest."""
    listed = {e["file"] for e in manifest["shards"]}
    for path in dest.glob("shard-*.srs"):
        if path.name not in listed:
            path.unlink()
            _record_path(path).unlink(missing_ok=True)


def stage_splits(
    shard_dirs: list[Path], root: str, node: int = 0, nodes: int = 1, name: str = "local"
) -> list[dict[str, Any]]:
    """Stage this node's shards of every split; capacity for all of them is checked before any copy."""
    if not shard_dirs:
        raise UserError(
            "no shard folders to stage; give --shards with the shard folders (e.g. --shards "
            "shards/train shards/val, each holding a manifest.json)"
        )
    plans = [plan_split(d, root, node, nodes, name) for d in shard_dirs]
    check_capacity(plans[0].dest, sum(e["bytes"] for p in plans for e in p.missing))
    return [copy_split(p) for p in plans]


def stage_split(shard_dir: Path, root: str, node: int = 0, nodes: int = 1, name: str = "local") -> dict[str, Any]:
    """Stage one split (see :func:`stage_splits`)."""
    return stage_splits([shard_dir], root, node, nodes, name)[0]


def clean(root: str, node: str, only: list[str] | None = None) -> list[str]:
    """Remove what ``node`` staged under ``root`` (or just the dataset folders named in ``only``); return what went."""
    base = node_root(root, node)
    removed = []
    if base.is_dir():
        for child in sorted(base.iterdir()):
            if only is not None and child.name not in only:
                continue
            shutil.rmtree(child) if child.is_dir() else child.unlink()
            removed.append(str(child))
        if not any(base.iterdir()):
            base.rmdir()
    return removed


def verify_in_place(shard_dir: Path, node: int = 0, nodes: int = 1, trust: bool = False) -> None:
    """A split read where it lies (``train --no-stage``): this node's shards exist with their manifest sizes and
    whole footers, the manifest agrees with the shards (:func:`~scalerepro.data.shards.check_manifest`), and
    (unless ``trust``) their sha256 is the manifest's, as staging checks; else name the shards and the fix."""
    manifest = read_manifest(shard_dir)
    mine = [manifest["shards"][k] for k in node_shards(len(manifest["shards"]), node, nodes)]
    _check_sources(shard_dir, mine)
    check_manifest(shard_dir, manifest, mine)
    open_shards(shard_dir, mine)  # each footer and index
    if trust:
        return
    changed = [e["file"] for e in mine if sha256_file(shard_dir / e["file"]) != e["sha256"]]
    if changed:
        raise UserError(
            f"{shard_dir}: {len(changed)} shard(s) differ from the sha256 in its {MANIFEST} "
            f"({', '.join(changed[:5])}): damaged or rewritten since `scalerepro shard` wrote them; re-run it (or "
            "pass --trust-shards to read them unchecked)"
        )


def verify_on_nodes(comm: Any, shard_dirs: list[Path], trust: bool) -> None:
    """:func:`verify_in_place` for every split on every node (first rank per node); the error on every rank."""
    at = node_layout(comm)

    def verify() -> None:
        if at.local_rank == 0:
            for d in shard_dirs:
                verify_in_place(d, at.node, at.nodes, trust)

    agree(comm, verify)


def stage_on_nodes(comm: Any, shard_dirs: list[Path], root: str) -> dict[str, Any]:
    """Stage every split on every node (first rank per node copies); the record is complete on rank 0."""
    at, name = node_layout(comm), this_node()
    done = agree(comm, lambda: stage_splits(shard_dirs, root, at.node, at.nodes, name) if at.local_rank == 0 else None)
    gathered = comm.gather({"host": socket.gethostname(), "name": name, "node": at.node, "splits": done}, root=0) or []
    return {"nodes": [g for g in gathered if g["splits"] is not None], "world_size": comm.size, "root": root}


def clean_on_nodes(comm: Any, root: str, only: list[str] | None = None) -> list[str]:
    """Remove the staged folders on every node (first rank per node); ``only``: just these dataset folders."""
    first_on_node = node_layout(comm).local_rank == 0
    removed = agree(comm, lambda: clean(root, this_node(), only) if first_on_node else [])
    return [path for paths in comm.allgather(removed) for path in paths]


def describe(record: dict[str, Any]) -> str:
    """One line per node and split, for people."""
    return "\n".join(
        f"{n['name']}: {s['split']} -> {s['dest']}: copied {s['copied']}, already there {s['already_present']}, "
        f"{s['seconds']:.2f} s"
        for n in record["nodes"]
        for s in n["splits"]
    )


def staged_by_sweep(records: list[dict[str, Any]]) -> dict[str, dict[str, list[str]]]:
    """What a sweep's stage records say was staged: stage root -> node name -> dataset folders."""
    where: dict[str, dict[str, set[str]]] = {}
    for record in records:
        for node in record["nodes"]:
            name = node.get("name", node["host"])
            folders = where.setdefault(record["root"], {}).setdefault(name, set())
            folders.update(Path(split["dest"]).parent.name for split in node["splits"])
    return {root: {name: sorted(f) for name, f in sorted(nodes.items())} for root, nodes in sorted(where.items())}


def srun_clean(root: str, nodes: dict[str, list[str]], timeout_s: int = 600) -> dict[str, Any]:
    """Clean ``nodes`` (name -> dataset folders) with one srun task per node; a node SLURM cannot give within two
    minutes (down, or busy with another job) is reported, not waited for."""
    folders = sorted({f for fs in nodes.values() for f in fs})
    cmd = [
        "srun",
        f"--nodelist={','.join(nodes)}",
        f"--nodes={len(nodes)}",
        "--ntasks-per-node=1",
        "--immediate=120",
        "--time=10",
        "--job-name=scalerepro-clean-stage",
        "scalerepro",
        "stage",
        "--clean",
        "--root",
        root,
        "--only",
        ",".join(folders),
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"command": cmd, "ok": False, "error": str(exc)}
    return {"command": cmd, "ok": done.returncode == 0, "error": done.stderr.strip()[-2000:] if done.returncode else ""}


def clean_sweep(records: list[dict[str, Any]], keep: bool, launcher: str) -> dict[str, Any]:
    """Remove what a sweep staged, on every node that staged it (srun under SLURM, else this node only), unless
    ``keep``. Failures are reported in the record (a leftover folder loses no result), not raised."""
    staged = staged_by_sweep(records)
    outcome: dict[str, Any] = {"staged": staged, "kept": keep, "cleaned": [], "failed": [], "unreachable": []}
    if keep:
        return outcome
    for root, nodes in staged.items():
        if launcher.split()[:1] == ["srun"]:
            result = srun_clean(root, nodes)
            (outcome["cleaned"] if result["ok"] else outcome["failed"]).append(
                {"root": root, **result, "nodes": sorted(nodes)}
            )
            continue
        here = this_node()
        outcome["unreachable"] += [{"root": root, "node": name} for name in nodes if name != here]
        if here in nodes:
            outcome["cleaned"].append({"root": root, "nodes": [here], "removed": clean(root, here, nodes[here])})
    return outcome
