"""Shard file format: packed JPEG bytes with labels, one self-describing file per shard.

Layout of ``shard-NNNNN.srs`` (all integers little-endian)::

    [record 0 bytes][record 1 bytes]...          JPEG bytes, back to back
    [index: count x (u64 offset, u32 length, u32 label)]
    [names: UTF-8 relative source paths joined by '\\n']
    [footer: b"SRSHARD1", u64 count, u64 index_offset, u64 names_offset]

A reader maps the file and slices records without copying; the manifest
(``manifest.json`` beside the shards) holds each shard's sha256, size and
sample count, the class index and the source dataset's hash.
"""

from __future__ import annotations

import hashlib
import json
import mmap
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


@dataclass
class ShardReader:
    """Memory-mapped read access to one shard file."""

    path: Path

    def __post_init__(self) -> None:
        """Map the file and parse its footer and index."""
        with self.path.open("rb") as fh:
            try:
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:
                raise UserError(f"shard {self.path} is empty; re-run `scalerepro shard` to rebuild it") from None
        if len(self._map) < FOOTER.size:
            raise UserError(f"shard {self.path} is truncated; re-run `scalerepro shard` to rebuild it")
        magic, count, index_offset, names_offset = FOOTER.unpack_from(self._map, len(self._map) - FOOTER.size)
        if magic != MAGIC or index_offset + count * INDEX_DTYPE.itemsize != names_offset:
            raise UserError(f"shard {self.path} has no valid footer (not a scalerepro shard, or corrupted)")
        self.index = np.frombuffer(self._map, dtype=INDEX_DTYPE, count=count, offset=index_offset)
        self._names_span = (names_offset, len(self._map) - FOOTER.size)

    def __len__(self) -> int:
        """Number of records."""
        return len(self.index)

    def record(self, i: int) -> tuple[memoryview, int]:
        """Record ``i`` as (JPEG bytes view, label)."""
        off, length, label = self.index[i]
        return memoryview(self._map)[int(off) : int(off) + int(length)], int(label)

    def names(self) -> list[str]:
        """Source relative paths, in record order."""
        lo, hi = self._names_span
        return self._map[lo:hi].decode().split("\n") if hi > lo else []

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


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of a shard folder, with a clear error when missing or unreadable."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise UserError(f"no {MANIFEST} in {folder}; run `scalerepro shard` to create the shards first")
    try:
        manifest: dict[str, Any] = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON ({exc}); re-run `scalerepro shard`") from None
    if manifest.get("format") != FORMAT:
        raise UserError(f"{path} has format {manifest.get('format')!r}, expected {FORMAT!r}; re-run `scalerepro shard`")
    return manifest


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
