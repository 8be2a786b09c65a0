"""Staging: verified copies, warm-node skip, corruption detected, capacity checked first."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import namedtuple
from pathlib import Path

import pytest

from scalerepro.data import stage
from scalerepro.data.shards import read_manifest
from scalerepro.errors import UserError


def test_copies_then_skips_when_warm(tiny_shards, tmp_path):
    first = stage.stage_split(tiny_shards / "train", str(tmp_path))
    assert first["copied"] == 4
    assert first["already_present"] == 0
    second = stage.stage_split(tiny_shards / "train", str(tmp_path))
    assert second["copied"] == 0
    assert second["already_present"] == 4
    assert read_manifest(tmp_path / first["dest"]) == read_manifest(tiny_shards / "train")


@pytest.mark.faults
def test_corrupted_staged_shard_is_replaced(tiny_shards, tmp_path):
    dest = stage.stage_split(tiny_shards / "train", str(tmp_path))["dest"]
    victim = min(p for p in (tmp_path / dest).iterdir() if p.suffix == ".srs")
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))
    # a later write; a coarse file-system clock could stamp it within the same few ms as the staging
    os.utime(victim, ns=(victim.stat().st_atime_ns, victim.stat().st_mtime_ns + 1_000_000))
    again = stage.stage_split(tiny_shards / "train", str(tmp_path))
    assert again["copied"] == 1
    assert again["already_present"] == 3


@pytest.mark.faults
def test_corrupted_source_shard_fails(tiny_shards, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(tiny_shards / "val", src)
    victim = min(src.glob("*.srs"))
    data = bytearray(victim.read_bytes())
    data[10] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(UserError, match=victim.name):
        stage.stage_split(src, str(tmp_path / "shm"))
    assert not list((tmp_path / "shm").rglob("*.partial"))


@pytest.mark.faults
def test_missing_source_shard_is_named_before_any_copy(tiny_shards, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(tiny_shards / "train", src)
    (src / "shard-00002.srs").unlink()
    with pytest.raises(UserError, match=r"1 shard\(s\) listed in its manifest.json are missing \(shard-00002.srs\)"):
        stage.stage_split(src, str(tmp_path / "shm"))
    assert not (tmp_path / "shm").exists()


@pytest.mark.faults
def test_manifest_of_another_dataset_is_refused_before_any_copy(tiny_shards, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(tiny_shards / "train", src)
    shutil.copy(tiny_shards / "val" / "manifest.json", src / "manifest.json")  # 2 val shards' entries over train's
    with pytest.raises(UserError, match=r"differ in size from its manifest\.json .* belongs to another dataset"):
        stage.stage_split(src, str(tmp_path / "shm"))
    assert not (tmp_path / "shm").exists()


@pytest.mark.faults
def test_capacity_shortfall_fails_before_copying(tiny_shards, tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(stage.shutil, "disk_usage", lambda _p: usage(100, 90, 10))
    with pytest.raises(UserError, match=r"needs .* MiB .* only 0.0 MiB is free"):
        stage.stage_split(tiny_shards / "train", str(tmp_path / "shm"))
    assert not (tmp_path / "shm").exists()


def test_unset_variable_in_root_is_named(tiny_shards, monkeypatch):
    monkeypatch.delenv("SLURM_TMPDIR", raising=False)
    with pytest.raises(UserError, match="SLURM_TMPDIR"):
        stage.stage_split(tiny_shards / "val", "$SLURM_TMPDIR/x")


def test_clean_removes_what_this_node_staged_and_nothing_else(tiny_shards, tmp_path):
    other = tmp_path / "n2" / "keep-me"
    other.mkdir(parents=True)
    first = stage.stage_split(tiny_shards / "val", str(tmp_path), name="n1")
    assert Path(first["dest"]).is_relative_to(tmp_path / "n1")
    assert stage.clean(str(tmp_path), "n1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n2"]
    assert other.is_dir()


def test_clean_only_named_folders(tiny_shards, tmp_path):
    dest = Path(stage.stage_split(tiny_shards / "val", str(tmp_path), name="n1")["dest"])
    (tmp_path / "n1" / "another-dataset").mkdir()
    removed = stage.clean(str(tmp_path), "n1", [dest.parent.name])
    assert removed == [str(dest.parent)]
    assert [p.name for p in (tmp_path / "n1").iterdir()] == ["another-dataset"]


def _record(root: Path, *nodes: tuple[str, str]) -> dict:
    """A stage.json as stage_on_nodes writes it: (node name, dest) per node."""
    return {
        "root": str(root),
        "world_size": 2,
        "nodes": [
            {"host": "h", "name": name, "node": k, "splits": [{"split": "train", "dest": dest}]}
            for k, (name, dest) in enumerate(nodes)
        ],
    }


def test_staged_by_sweep_groups_dataset_folders_per_node(tmp_path):
    records = [
        _record(tmp_path, ("n1", f"{tmp_path}/n1/ds-a/train"), ("n2", f"{tmp_path}/n2/ds-a/train")),
        _record(tmp_path, ("n1", f"{tmp_path}/n1/ds-b/train")),
    ]
    assert stage.staged_by_sweep(records) == {str(tmp_path): {"n1": ["ds-a", "ds-b"], "n2": ["ds-a"]}}


def test_clean_sweep_here_removes_this_nodes_folders_and_names_the_others(tiny_shards, tmp_path, monkeypatch):
    monkeypatch.setattr(stage, "this_node", lambda: "n1")
    dest = stage.stage_split(tiny_shards / "val", str(tmp_path), name="n1")["dest"]
    records = [_record(tmp_path, ("n1", dest), ("n9", dest.replace("/n1/", "/n9/")))]
    kept = stage.clean_sweep(records, keep=True, launcher="mpiexec")
    assert kept["kept"]
    assert not kept["cleaned"]
    assert Path(dest).is_dir()
    outcome = stage.clean_sweep(records, keep=False, launcher="mpiexec")
    assert outcome["cleaned"][0]["removed"] == [str(Path(dest).parent)]
    assert not Path(dest).exists()
    assert outcome["unreachable"] == [{"root": str(tmp_path), "node": "n9"}]


def test_clean_sweep_under_slurm_runs_one_srun_task_per_node(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(
        stage.subprocess,
        "run",
        lambda cmd, **_kw: calls.append(cmd) or subprocess.CompletedProcess(cmd, 1, "", "n2 is down"),
    )
    records = [_record(tmp_path, ("n1", f"{tmp_path}/n1/ds-a/train"), ("n2", f"{tmp_path}/n2/ds-a/train"))]
    outcome = stage.clean_sweep(records, keep=False, launcher="srun --mpi=pmi2")
    assert calls
    assert calls[0][:4] == ["srun", "--nodelist=n1,n2", "--nodes=2", "--ntasks-per-node=1"]
    assert calls[0][-4:] == ["--root", str(tmp_path), "--only", "ds-a"]
    assert outcome["failed"][0]["error"] == "n2 is down"
    assert not outcome["cleaned"]  # reported, not raised


def test_stage_cli_under_mpi(run_mpi, tiny_shards, tmp_path):
    proc = run_mpi(
        2,
        [
            "-m",
            "scalerepro.cli",
            "stage",
            "--shards",
            str(tiny_shards / "train"),
            str(tiny_shards / "val"),
            "--root",
            str(tmp_path / "shm"),
            "--log",
            str(tmp_path / "stage.json"),
        ],
    )
    import json

    record = json.loads((tmp_path / "stage.json").read_text())
    assert record["world_size"] == 2
    assert len(record["nodes"]) == 1  # one copier per node
    assert [s["copied"] for s in record["nodes"][0]["splits"]] == [4, 2], proc.stderr


def test_each_node_copies_only_its_shards(tiny_shards, tmp_path):
    first = stage.stage_split(tiny_shards / "train", str(tmp_path / "a"), node=1, nodes=2)
    assert first["shards"] == ["shard-00001.srs", "shard-00003.srs"]
    assert first["copied"] == 2
    staged = sorted(p.name for p in (tmp_path / "a" / first["dest"]).glob("*.srs"))
    assert staged == first["shards"]


def test_capacity_is_checked_for_every_split_before_any_copy(tiny_shards, tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    need_train = sum(e["bytes"] for e in read_manifest(tiny_shards / "train")["shards"])
    monkeypatch.setattr(stage.shutil, "disk_usage", lambda _p: usage(10**12, 0, need_train + 10))
    with pytest.raises(UserError, match="needs"):
        stage.stage_splits([tiny_shards / "train", tiny_shards / "val"], str(tmp_path / "shm"))
    assert not list((tmp_path / "shm").rglob("*.srs"))  # train alone would fit, but nothing was copied


def test_a_warm_restart_trusts_staged_shards_by_their_record_without_rehashing(tiny_shards, tmp_path, monkeypatch):
    """The second staging reads no staged byte: size, sha256 and mtime recorded when it was verified suffice."""
    root = str(tmp_path / "shm")
    stage.stage_split(tiny_shards / "train", root)
    hashed = []
    real = stage.sha256_file
    monkeypatch.setattr(stage, "sha256_file", lambda p: hashed.append(p) or real(p))
    again = stage.stage_split(tiny_shards / "train", root)
    assert again["copied"] == 0
    assert again["already_present"] > 0
    assert hashed == []
    victim = Path(again["dest"]) / again["shards"][0]
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes, a later modification time
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(victim.stat().st_atime_ns, victim.stat().st_mtime_ns + 1_000_000))
    third = stage.stage_split(tiny_shards / "train", root)
    assert third["copied"] == 1
    assert victim in hashed  # re-hashed, found wrong, copied again
