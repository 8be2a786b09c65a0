"""The shard reader: records read, not mapped; errors that name a damaged file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from scalerepro.data.shards import ShardReader, read_manifest
from scalerepro.errors import UserError


def first_shard(tiny_shards, tmp_path):
    """A private copy of the tiny val split's first shard (tests may damage it)."""
    entry = read_manifest(tiny_shards / "val")["shards"][0]
    path = tmp_path / entry["file"]
    shutil.copyfile(tiny_shards / "val" / entry["file"], path)
    return path


def test_records_are_read_without_mapping_or_holding_the_file(tiny_shards, tmp_path):
    path = first_shard(tiny_shards, tmp_path)
    fds = len(list(Path("/proc/self/fd").iterdir()))
    reader = ShardReader(path)
    records = [reader.record(i) for i in range(len(reader))]
    assert all(data[:2] == b"\xff\xd8" and data[-2:] == b"\xff\xd9" for data, _ in records)  # whole JPEGs
    assert [label for _, label in records] == reader.labels().tolist()
    assert len(reader.names()) == len(reader)
    assert str(path) not in Path("/proc/self/maps").read_text()
    assert len(list(Path("/proc/self/fd").iterdir())) == fds


def test_a_shard_truncated_after_it_was_indexed_is_named(tiny_shards, tmp_path):
    path = first_shard(tiny_shards, tmp_path)
    reader = ShardReader(path)
    last = len(reader) - 1
    offset = int(reader.index[last]["offset"])
    os.truncate(path, offset + 10)
    assert reader.record(0)[0][:2] == b"\xff\xd8"
    with pytest.raises(UserError, match=rf"{path.name} is truncated.*scalerepro stage"):
        reader.record(last)


@pytest.mark.parametrize(
    ("damage", "message"),
    [(lambda _: b"", "is empty"), (lambda b: b[:20], "is truncated"), (lambda b: b[:-1], "has no valid footer")],
)
def test_a_damaged_shard_is_named_with_the_fix(tiny_shards, tmp_path, damage, message):
    path = first_shard(tiny_shards, tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(UserError, match=rf"{path.name} {message}.*scalerepro shard"):
        ShardReader(path)
