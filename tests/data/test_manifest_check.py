"""A manifest is checked against its shards wherever data is opened; `stage` without shard folders is named.

A hand-edited manifest (an entry's count lowered or raised, an entry removed) is refused by the loader
(:class:`ShardDataset`), by staging and by ``train --no-stage``'s verification, with one line naming the
manifest, the shard, both counts and the fix, from footers alone.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from scalerepro.data import stage
from scalerepro.data.loader import ShardDataset
from scalerepro.data.shards import ShardReader, read_manifest
from scalerepro.errors import UserError
from tests.support import cli, refused_one, train_args

pytestmark = pytest.mark.faults


@pytest.fixture
def shards(tiny_shards, tmp_path) -> Path:
    """A copy of the tiny shards (train: 4 shards, val: 2) to edit."""
    dst = tmp_path / "shards"
    shutil.copytree(tiny_shards, dst)
    return dst


def edit(folder: Path, change: Any) -> dict[str, Any]:
    """Apply ``change`` to ``folder``'s manifest.json (as a person with an editor would); return the original."""
    path = folder / "manifest.json"
    original = json.loads(path.read_text())
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))
    return original


def opened_everywhere(folder: Path, tmp_path: Path, match: str) -> None:
    """The loader, staging and in-place verification each refuse ``folder`` with ``match``."""
    with pytest.raises(UserError, match=match) as err:
        ShardDataset(folder)
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match=match):
        stage.stage_split(folder, str(tmp_path / "shm"))
    with pytest.raises(UserError, match=match):
        stage.verify_in_place(folder, trust=True)


@pytest.mark.parametrize("delta", [-1, 1])
def test_an_entry_whose_count_was_edited_is_named_with_both_counts(shards, tmp_path, delta):
    """Case 6: an entry's count lowered (part of the data) or raised (past the shard's end) is named."""
    folder = shards / "train"
    original = edit(folder, lambda m: m["shards"][1].update(samples=m["shards"][1]["samples"] + delta))
    held = original["shards"][1]["samples"]
    assert len(ShardReader(folder / "shard-00001.srs")) == held
    opened_everywhere(
        folder,
        tmp_path,
        rf"{folder / 'manifest.json'} says shard-00001.srs holds {held + delta} samples but the shard holds "
        rf"{held} .*re-run `scalerepro shard`",
    )


def test_an_entry_whose_count_and_total_were_edited_is_still_named(shards, tmp_path):
    """Case 6: the totals made to agree by hand do not hide the shard's own count."""
    folder = shards / "train"
    original = edit(folder, lambda m: m["shards"][1].update(samples=1) or m.update(samples=m["samples"] - 5))
    held = original["shards"][1]["samples"]
    opened_everywhere(folder, tmp_path, rf"says shard-00001.srs holds 1 samples but the shard holds {held} ")


def test_a_removed_entry_is_named_by_its_unlisted_shard(shards, tmp_path):
    """Case 6: an entry removed (the rest of the data, under the whole dataset's hash) is named by its shard."""
    folder = shards / "train"
    edit(folder, lambda m: m["shards"].pop(1))
    opened_everywhere(
        folder,
        tmp_path,
        rf"{folder} holds 1 shard file\(s\) that {folder / 'manifest.json'} does not list \(shard-00001.srs\).*"
        r"re-run `scalerepro shard`",
    )


def test_a_removed_entry_whose_shard_was_deleted_is_named_by_the_numbering(shards, tmp_path):
    """Case 6: with the shard file gone too, the gap in the numbering tells."""
    folder = shards / "train"
    edit(folder, lambda m: m["shards"].pop(1))
    (folder / "shard-00001.srs").unlink()
    opened_everywhere(folder, tmp_path, r"lists shard-00002.srs as shard 1 of 3, where shard-00001.srs belongs")


def test_the_last_entry_removed_with_its_shard_is_named_by_the_recorded_totals(shards, tmp_path):
    """Case 6: the total `scalerepro shard` recorded, and the source files it counted, tell the list is short."""
    folder = shards / "train"
    original = edit(folder, lambda m: m["shards"].pop())
    (folder / "shard-00003.srs").unlink()
    total, held = original["samples"], sum(e["samples"] for e in original["shards"][:3])
    opened_everywhere(folder, tmp_path, rf"records {total} samples in all but its 3 shard entries add up to {held} ")
    edit(folder, lambda m: m.update(samples=held))
    files = original["source"]["files"]
    opened_everywhere(folder, tmp_path, rf"counts {files} source files but its shard entries hold {held} samples")


def test_a_staged_copy_is_checked_with_only_its_nodes_shards(shards, tmp_path):
    """Case 6 on a node's staged copy (shards 1 and 3 of 4): an entry of a shard held elsewhere is caught by the
    totals, a removed entry by the shard left unlisted, and a stale shard is dropped by staging again."""
    record = stage.stage_split(shards / "train", str(tmp_path / "shm"), node=1, nodes=2)
    staged = Path(record["dest"])
    assert sorted(p.name for p in staged.glob("*.srs")) == ["shard-00001.srs", "shard-00003.srs"]
    ShardDataset(staged, node=1, nodes=2)
    original = edit(staged, lambda m: m["shards"][0].update(samples=m["shards"][0]["samples"] - 1))
    with pytest.raises(UserError, match=rf"records {original['samples']} samples in all but its 4 shard entries"):
        ShardDataset(staged, node=1, nodes=2)
    edit(staged, lambda m: m.update(shards=original["shards"][:3], samples=original["samples"]))
    with pytest.raises(UserError, match=r"does not list \(shard-00003.srs\)"):
        ShardDataset(staged, node=1, nodes=2)
    edit(staged, lambda m: m.update(shards=original["shards"]))
    shutil.copy(staged / "shard-00001.srs", staged / "shard-00007.srs")  # left from a sharding with more shards
    with pytest.raises(UserError, match=r"does not list \(shard-00007.srs\): .* left from another sharding"):
        ShardDataset(staged, node=1, nodes=2)
    stage.stage_split(shards / "train", str(tmp_path / "shm"), node=1, nodes=2)
    assert not (staged / "shard-00007.srs").exists()
    assert ShardDataset(staged, node=1, nodes=2).total == original["samples"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda m: m["shards"][1].update(samples="many"), "shard entry 1 has no valid 'samples' (a whole number)"),
        (lambda m: m["shards"][0].pop("file"), "shard entry 0 has no valid 'file' (a file name)"),
        (lambda m: m.update(source="synth10"), "'source' is missing or not an object"),
    ],
)
def test_a_manifest_of_the_wrong_shape_is_named(shards, change, named):
    """A hand edit that breaks a key the readers use: one line, not a KeyError or TypeError."""
    edit(shards / "val", change)
    with pytest.raises(UserError, match=re.escape(named) + r".*re-run `scalerepro shard`"):
        read_manifest(shards / "val")


def test_opening_checks_footers_only(shards, monkeypatch):
    """The check is cheap: no shard's index or records, no sha256 (the loader reads indexes lazily)."""
    monkeypatch.setattr("scalerepro.data.shards.sha256_file", lambda _p: pytest.fail("hashed a shard"))
    monkeypatch.setattr(ShardReader, "__post_init__", lambda _self: pytest.fail("read an index"))
    assert ShardDataset(shards / "train").total == read_manifest(shards / "train")["samples"]


def test_stage_without_shards_names_the_flag(tmp_path):
    """Case 5: `scalerepro stage` with no --shards names the flag."""
    with pytest.raises(UserError, match="give --shards"):
        stage.stage_splits([], str(tmp_path / "shm"))
    refused_one(cli("stage", "--root", str(tmp_path / "shm")), "no shard folders to stage; give --shards")


def test_the_cli_refuses_an_edited_manifest_before_any_work(shards, tmp_path):
    """Case 6 through `scalerepro stage` and `scalerepro train --no-stage`: exit 2 before any copy or step."""
    folder = shards / "train"
    original = edit(folder, lambda m: m["shards"][2].update(samples=m["shards"][2]["samples"] - 3))
    held = original["shards"][2]["samples"]
    named = f"says shard-00002.srs holds {held - 3} samples but the shard holds {held}"
    refused_one(cli("stage", "--shards", str(folder), "--root", str(tmp_path / "shm")), named, "scalerepro shard")
    assert not list((tmp_path / "shm").rglob("*.srs"))
    args = train_args(shards, tmp_path / "run", "train.epochs=1", "train.width=8", "loader.workers=0")
    refused_one(cli(*args[2:]), named, "scalerepro shard")
    assert not (tmp_path / "run" / "run.json").exists()
