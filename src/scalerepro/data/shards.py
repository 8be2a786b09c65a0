"""Shard file format: packed JPEG bytes with labels, one self-describing file per shard.

Layout of ``shard-NNNNN.srs`` (all integers little-endian)::

    [record 0 bytes][record 1 bytes]...          JPEG bytes, back to back
    [index: count x (u64 offset, u32 length, u32 label)]
    [names: UTF-8 relative source paths joined by '\\n']
    [footer: b"SRSHARD1", u64 count, u64 index_offset, u64 names_offset]

A reader reads the footer and index once and each record with ``pread``
(no mapping: see :class:`ShardReader`); the manifest
(``manifest.json`` beside the shards) holds each shard's sha256, size and
sample count, the class index and the source dataset's hash.

A manifest is checked against its shards wherever data is opened (staging,
``train --no-stage``, the loader; :func:`check_manifest`), from footers
only: each entry's count against its shard's own, the entries against the
totals ``scalerepro shard`` recorded, the shard files in the folder against
the entries. A hand-edited manifest then cannot train on part of the data
(or index past a shard's end) while the run records the whole dataset's
hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from scalerepro.errors import UserError

MAGIC = b"SRSHARD1"
FOOTER = struct.Struct("<8sQQQ")
INDEX_DTYPE = np.dtype([("offset", "<u8"), ("length", "<u4"), ("label", "<u4")])
FORMAT = "scalerepro-shards/1"
MANIFEST = "manifest.json"


def shard_name(k: int) -> str:
    """File name of shard ``k``."""
    return f"shard-{k:05d}.srs"


class ShardWriter:
    """Streams records into one shard file under a temporary name; ``close`` renames it."""

    def __init__(self, path: Path) -> None:
        """Open ``path`` + '.partial' for writing."""
        self.path = path
        self._tmp = path.with_name(path.name + ".partial")
        self._fh: BinaryIO = self._tmp.open("wb")  # stays open across add(); close() or abort() closes it
        self._hash = hashlib.sha256()
        self._index: list[tuple[int, int, int]] = []
        self._names: list[str] = []
        self._pos = 0

    def _write(self, data: bytes) -> None:
        """Append bytes, hashing as we go."""
        self._fh.write(data)
        self._hash.update(data)
        self._pos += len(data)

    def add(self, data: bytes, label: int, name: str) -> None:
        """Append one record."""
        self._index.append((self._pos, len(data), label))
        self._names.append(name)
        self._write(data)

    def close(self) -> dict[str, Any]:
        """Write index, names and footer; fsync; rename; return the manifest entry."""
        index_offset = self._pos
        self._write(np.array(self._index, dtype=INDEX_DTYPE).tobytes())
        names_offset = self._pos
        self._write("\n".join(self._names).encode())
        self._write(FOOTER.pack(MAGIC, len(self._index), index_offset, names_offset))
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        self._tmp.replace(self.path)
        return {
            "file": self.path.name,
            "sha256": self._hash.hexdigest(),
            "bytes": self._pos,
            "samples": len(self._index),
        }

    def abort(self) -> None:
        """Drop the partial file."""
        self._fh.close()
        self._tmp.unlink(missing_ok=True)


def read_footer(path: Path, fd: int) -> tuple[int, int, int, int]:
    """(record count, index offset, names offset, file size) from the footer of shard ``path`` open as ``fd``;
    an error naming the file if it is not a whole shard."""
    size = os.fstat(fd).st_size
    if size == 0:
        raise UserError(f"shard {path} is empty; re-run `scalerepro shard` to rebuild it")
    if size < FOOTER.size:
        raise UserError(f"shard {path} is truncated; re-run `scalerepro shard` to rebuild it")
    magic, count, index_offset, names_offset = FOOTER.unpack(os.pread(fd, FOOTER.size, size - FOOTER.size))
    if (
        magic != MAGIC
        or index_offset + count * INDEX_DTYPE.itemsize != names_offset
        or names_offset > size - FOOTER.size
    ):
        raise UserError(
            f"shard {path} has no valid footer (not a scalerepro shard, or corrupted); "
            "re-run `scalerepro shard` to rebuild it"
        )
    return int(count), int(index_offset), int(names_offset), size


def shard_count(path: Path) -> int:
    """Records in shard ``path``, from its footer alone (one read)."""
    with path.open("rb") as fh:
        return read_footer(path, fh.fileno())[0]


@dataclass
class ShardReader:
    """Read access to one shard file: footer and index read once, each record read with ``pread``.

    Records are read, not memory-mapped: a mapping would count the node's staged copy (in tmpfs or the page
    cache either way) in the memory of every process that maps it, where a read leaves it with the kernel,
    as a loader of JPEG files leaves its images; the copy costs microseconds against milliseconds of decode.
    The file is opened per read, so no descriptor is held (a node may hold a thousand shards, each read by
    every loader worker).
    """

    path: Path

    def __post_init__(self) -> None:
        """Read the footer and the index; an error naming the file if it is not a whole shard."""
        with self.path.open("rb") as fh:
            _, index_offset, names_offset, size = read_footer(self.path, fh.fileno())
            self.index = np.frombuffer(os.pread(fh.fileno(), names_offset - index_offset, index_offset), INDEX_DTYPE)
        self._names_span = (names_offset, size - FOOTER.size)

    def _read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset``; an error naming the file if it has shrunk since it was indexed."""
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.pread(fd, length, offset)
        finally:
            os.close(fd)
        if len(data) != length:
            raise UserError(f"shard {self.path} is truncated; re-run `scalerepro stage` (or `scalerepro shard`)")
        return data

    def __len__(self) -> int:
        """Number of records."""
        return len(self.index)

    def record(self, i: int) -> tuple[bytes, int]:
        """Record ``i`` as (JPEG bytes, label)."""
        off, length, label = self.index[i]
        return self._read(int(off), int(length)), int(label)

    def names(self) -> list[str]:
        """Source relative paths, in record order."""
        lo, hi = self._names_span
        return self._read(lo, hi - lo).decode().split("\n") if hi > lo else []

    def labels(self) -> npt.NDArray[np.int64]:
        """Labels of all records."""
        return self.index["label"].astype(np.int64)


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


RESHARD = "re-run `scalerepro shard` to rewrite the manifest with its shards"


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of a shard folder, with a clear error when missing or unreadable."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise UserError(f"no {MANIFEST} in {folder}; run `scalerepro shard` to create the shards first")
    try:
        manifest: dict[str, Any] = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON ({exc}); re-run `scalerepro shard`") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise UserError(f"{path} has format {found!r}, expected {FORMAT!r}; re-run `scalerepro shard`")
    _check_shape(path, manifest)
    return manifest


MANIFEST_KEYS: dict[str, tuple[type, str]] = {
    "dataset": (str, "a name"),
    "split": (str, "a name"),
    "classes": (list, "a list"),
    "source": (dict, "an object"),
    "shards": (list, "a list"),
}
ENTRY_KEYS: dict[str, tuple[type, str]] = {
    "file": (str, "a file name"),
    "sha256": (str, "a hex digest"),
    "bytes": (int, "a whole number"),
    "samples": (int, "a whole number"),
}


def _check_shape(path: Path, manifest: dict[str, Any]) -> None:
    """The keys the readers of a manifest use are there with their types (a hand edit can break them)."""
    for key, (kind, what) in MANIFEST_KEYS.items():
        if not isinstance(manifest.get(key), kind):
            raise UserError(f"{path}: {key!r} is missing or not {what}; {RESHARD}")
    if not isinstance(manifest["source"].get("sha256"), str):
        raise UserError(f"{path}: 'source' has no 'sha256' hex digest; {RESHARD}")
    for k, entry in enumerate(manifest["shards"]):
        for key, (kind, what) in ENTRY_KEYS.items():
            value = entry.get(key) if isinstance(entry, dict) else None
            negative = isinstance(value, int) and value < 0
            if not isinstance(value, kind) or isinstance(value, bool) or negative:
                raise UserError(f"{path}: shard entry {k} has no valid {key!r} ({what}); {RESHARD}")


def check_manifest(folder: Path, manifest: dict[str, Any], entries: Iterable[dict[str, Any]]) -> None:
    """The manifest of ``folder`` agrees with its shards, checked from footers only: each of ``entries`` whose
    file is here holds the samples its entry says (its footer's count); no shard file here is missing from the
    manifest; its entries are shard 0, 1, ... in order; they sum to the total it records, which with the files
    it skipped makes the source files it counted. A staged folder holds only its node's shards, so ``entries``
    are the node's; the copied manifest still lists every shard, so the totals check the whole list there.
    Each failure is one error naming the manifest, what disagrees, both counts and the fix."""
    path = Path(folder) / MANIFEST
    for entry in entries:
        shard = Path(folder) / entry["file"]
        if shard.is_file() and (held := shard_count(shard)) != entry["samples"]:
            raise UserError(
                f"{path} says {entry['file']} holds {entry['samples']} samples but the shard holds {held} "
                f"(the manifest was edited, or belongs to other shards); {RESHARD}"
            )
    _check_listed(Path(folder), path, manifest["shards"])
    _check_totals(path, manifest)


def _check_listed(folder: Path, path: Path, shards: list[dict[str, Any]]) -> None:
    """Every shard file in ``folder`` is listed, and the entries are shards 0 .. n-1 in order."""
    listed = {e["file"] for e in shards}
    unlisted = sorted(p.name for p in folder.glob("shard-*.srs") if p.name not in listed)
    if unlisted:
        raise UserError(
            f"{folder} holds {len(unlisted)} shard file(s) that {path} does not list ({', '.join(unlisted[:5])}): "
            f"an entry was removed from the manifest, or the files are left from another sharding; {RESHARD}"
        )
    for k, entry in enumerate(shards):
        if entry["file"] != shard_name(k):
            raise UserError(
                f"{path} lists {entry['file']} as shard {k} of {len(shards)}, where {shard_name(k)} belongs "
                f"(an entry was removed or reordered); {RESHARD}"
            )


def _check_totals(path: Path, manifest: dict[str, Any]) -> None:
    """The entries sum to the manifest's total, and the total and the skipped files to its source file count."""
    held = sum(int(e["samples"]) for e in manifest["shards"])
    total = manifest.get("samples")
    if total is not None and held != total:
        raise UserError(
            f"{path} records {total} samples in all but its {len(manifest['shards'])} shard entries add up to "
            f"{held} (an entry was edited or removed); {RESHARD}"
        )
    files, skipped = manifest.get("source", {}).get("files"), len(manifest.get("skipped", []))
    if files is not None and held + skipped != files:
        raise UserError(
            f"{path} counts {files} source files but its shard entries hold {held} samples and it lists "
            f"{skipped} skipped (an entry was edited or removed); {RESHARD}"
        )


def open_shards(folder: Path, entries: Iterable[dict[str, Any]]) -> list[ShardReader]:
    """Readers for the manifest's shard entries inside ``folder``."""
    return [ShardReader(Path(folder) / e["file"]) for e in entries]


def node_shards(shards: int, node: int, nodes: int) -> list[int]:
    """Shard numbers a node holds: k with k mod nodes == node."""
    if shards < nodes:
        raise UserError(
            f"{shards} shards cannot be spread over {nodes} nodes; "
            "set shard.train_shards and shard.val_shards to at least the node count"
        )
    return list(range(node, shards, nodes))
