"""Sharding: every sample once, labels kept, quirks normalised, bad files named, deterministic."""

from __future__ import annotations

import io
import os
import shutil
from collections import Counter

import pytest
from PIL import Image

from scalerepro.data import pack
from scalerepro.data.pack import PILLOW_MAX_PIXELS, shard_split
from scalerepro.data.shards import ShardReader, read_manifest
from scalerepro.errors import UserError
from tests.support import SMALL


def all_records(folder):
    manifest = read_manifest(folder)
    out = []
    for e in manifest["shards"]:
        reader = ShardReader(folder / e["file"])
        out += [(name, *reader.record(i)) for i, name in enumerate(reader.names())]
    return manifest, out


def test_every_sample_once_with_its_label(tiny_shards):
    manifest, records = all_records(tiny_shards / "train")
    names = [n for n, _, _ in records]
    assert len(names) == len(set(names)) == 10 * SMALL.train_per_class == manifest["samples"]
    wnid_of = {c["index"]: c["wnid"] for c in manifest["classes"]}
    assert all(name.split("/")[1] == wnid_of[label] for name, _, label in records)


def test_quirks_become_rgb_jpeg(tiny_shards):
    manifest, records = all_records(tiny_shards / "train")
    assert manifest["converted"] == {"as-is": 114, "cmyk": 2, "grayscale": 2, "png": 2}
    for _, data, _ in records:
        assert bytes(data[:3]) == b"\xff\xd8\xff"
        assert Image.open(io.BytesIO(bytes(data))).mode == "RGB"


def test_manifest_entries_match_files(tiny_shards):
    from scalerepro.data.shards import sha256_file

    manifest = read_manifest(tiny_shards / "val")
    for e in manifest["shards"]:
        path = tiny_shards / "val" / e["file"]
        assert sha256_file(path) == e["sha256"]
        assert path.stat().st_size == e["bytes"]
    assert sum(e["samples"] for e in manifest["shards"]) == 10 * SMALL.val_per_class


def test_rerun_gives_identical_shards(tiny_dataset, tiny_shards, tmp_path):
    again = shard_split(tiny_dataset, "train", tmp_path / "train", 4, 0)
    assert [e["sha256"] for e in again["shards"]] == [
        e["sha256"] for e in read_manifest(tiny_shards / "train")["shards"]
    ]


def test_shards_are_balanced_and_mixed(tiny_shards):
    manifest, _ = all_records(tiny_shards / "train")
    sizes = [e["samples"] for e in manifest["shards"]]
    assert max(sizes) - min(sizes) <= 1
    labels = Counter(ShardReader(tiny_shards / "train" / manifest["shards"][0]["file"]).labels().tolist())
    assert len(labels) > 3


@pytest.fixture
def copy_of(tiny_dataset, tmp_path):
    dst = tmp_path / "ds"
    shutil.copytree(tiny_dataset, dst)
    return dst


@pytest.mark.faults
def test_truncated_file_fails_with_its_path(copy_of, tmp_path):
    victim = max((copy_of / "train" / "n90000005").glob("*.JPEG"))
    victim.write_bytes(victim.read_bytes()[:300])
    with pytest.raises(UserError, match=victim.name) as err:
        shard_split(copy_of, "train", tmp_path / "out", 2, 0)
    assert "--skip-bad" in str(err.value)
    assert_nothing_looks_done(tmp_path / "out")


def assert_nothing_looks_done(out):
    """After a failure: no manifest, no partial shard; each finished shard has the record a retry keeps it by."""
    assert not (out / "manifest.json").exists()
    assert not list(out.glob("*.partial"))
    assert all((out / f".{p.name}.done.json").is_file() for p in out.glob("*.srs"))


@pytest.mark.faults
def test_skip_bad_lists_the_file(copy_of, tmp_path):
    victim = max((copy_of / "train" / "n90000005").glob("*.JPEG"))
    victim.write_bytes(b"not an image at all")
    manifest = shard_split(copy_of, "train", tmp_path / "out", 2, 0, skip_bad=True)
    assert [s["path"] for s in manifest["skipped"]] == [str(victim.relative_to(copy_of))]
    assert manifest["samples"] == 10 * SMALL.train_per_class - 1


def declaring(jpeg: bytes, width: int, height: int) -> bytes:
    """``jpeg`` with its frame header (SOF) patched to declare ``width`` x ``height``: a few hundred bytes that
    claim billions of pixels."""
    at = next(i for i in range(len(jpeg) - 1) if jpeg[i] == 0xFF and jpeg[i + 1] in (0xC0, 0xC1, 0xC2))
    return jpeg[: at + 5] + height.to_bytes(2, "big") + width.to_bytes(2, "big") + jpeg[at + 9 :]


@pytest.mark.faults
def test_an_image_declaring_too_many_pixels_is_named_before_decoding_and_skippable(copy_of, tmp_path):
    victim = max((copy_of / "train" / "n90000005").glob("*.JPEG"))
    victim.write_bytes(declaring(victim.read_bytes(), 60000, 60000))
    with pytest.raises(UserError, match=rf"{victim.name}: 60000 x 60000 pixels \(3,600,000,000\) is above "
                       r"shard.max_pixels \(89,478,485\).*--skip-bad"):  # fmt: skip
        shard_split(copy_of, "train", tmp_path / "out", 2, 0)
    assert_nothing_looks_done(tmp_path / "out")
    manifest = shard_split(copy_of, "train", tmp_path / "out", 2, 0, skip_bad=True)
    assert [s["path"] for s in manifest["skipped"]] == [str(victim.relative_to(copy_of))]
    assert "above shard.max_pixels" in manifest["skipped"][0]["reason"]


@pytest.mark.faults
def test_the_pixel_limit_is_the_configured_one(copy_of, tmp_path):
    sizes = {Image.open(p).size for p in (copy_of / "val").rglob("*.JPEG")}
    limit = min(w * h for w, h in sizes)  # the smallest image passes, every larger one is left out
    manifest = shard_split(copy_of, "val", tmp_path / "out", 1, 0, skip_bad=True, max_pixels=limit)
    assert manifest["samples"] >= 1
    assert manifest["skipped"]
    assert all(f"above shard.max_pixels ({limit:,})" in s["reason"] for s in manifest["skipped"])
    assert Image.MAX_IMAGE_PIXELS == PILLOW_MAX_PIXELS  # Pillow's own check is back after sharding


@pytest.mark.faults
def test_non_image_file_named_jpeg_fails_with_its_path(copy_of, tmp_path):
    victim = min((copy_of / "val" / "n90000002").glob("*.JPEG"))
    victim.write_text("<html>a saved web page, not a photo</html>")
    with pytest.raises(UserError, match=rf"{victim.name}: not a JPEG or PNG .*--skip-bad"):
        shard_split(copy_of, "val", tmp_path / "out", 1, 0)
    assert_nothing_looks_done(tmp_path / "out")


@pytest.mark.faults
def test_unreadable_file_fails_with_its_path(copy_of, tmp_path):
    victim = copy_of / "val" / "n90000004" / "dangling.JPEG"
    victim.symlink_to(tmp_path / "gone.JPEG")  # a link to nothing: open() fails, as for an unreadable file
    with pytest.raises(UserError, match=rf"{victim.name}: cannot be read \(No such file or directory\).*--skip-bad"):
        shard_split(copy_of, "val", tmp_path / "out", 1, 0)
    manifest = shard_split(copy_of, "val", tmp_path / "out", 1, 0, skip_bad=True)
    assert [s["path"] for s in manifest["skipped"]] == [str(victim.relative_to(copy_of))]


@pytest.mark.faults
def test_empty_class_folder_is_named(copy_of, tmp_path):
    for p in (copy_of / "val" / "n90000003").iterdir():
        p.unlink()
    with pytest.raises(UserError, match="n90000003"):
        shard_split(copy_of, "val", tmp_path / "out", 1, 0)


def test_missing_split_is_named(copy_of, tmp_path):
    shutil.rmtree(copy_of / "val")
    with pytest.raises(UserError, match="val/"):
        shard_split(copy_of, "val", tmp_path / "out", 1, 0)


def test_too_many_shards(tiny_dataset, tmp_path):
    with pytest.raises(UserError, match="shards requested"):
        shard_split(tiny_dataset, "val", tmp_path / "out", 1000, 0)


def _flatten_val(src, dst):
    """Copy ``src`` with val/ flattened as the ILSVRC-2012 archive unpacks, labels in LOC_val_solution.csv."""
    shutil.copytree(src, dst)
    rows = ["ImageId,PredictionString"]
    for class_dir in sorted((dst / "val").iterdir()):
        for image in sorted(class_dir.iterdir()):
            image.rename(dst / "val" / image.name)
            rows.append(f"{image.stem},{class_dir.name} 1 2 30 40 {class_dir.name} 5 6 70 80")
        class_dir.rmdir()
    (dst / "LOC_val_solution.csv").write_text("\n".join(rows) + "\n")


def test_flat_ilsvrc_val_layout_is_labelled_from_the_solution_csv(tiny_dataset, tiny_shards, tmp_path):
    _flatten_val(tiny_dataset, tmp_path / "flat")
    manifest = shard_split(tmp_path / "flat", "val", tmp_path / "out", 2, 0)
    _, foldered = all_records(tiny_shards / "val")
    _, flat = all_records(tmp_path / "out")
    by_file = {name.rsplit("/", 1)[1]: label for name, _, label in foldered}
    assert manifest["samples"] == len(by_file)
    assert all(by_file[n.rsplit("/", 1)[1]] == lab for n, _, lab in flat)


def test_flat_val_without_labels_names_the_file_to_add(tiny_dataset, tmp_path):
    _flatten_val(tiny_dataset, tmp_path / "flat")
    (tmp_path / "flat" / "LOC_val_solution.csv").unlink()
    with pytest.raises(UserError, match=r"LOC_val_solution\.csv"):
        shard_split(tmp_path / "flat", "val", tmp_path / "out", 2, 0)
    rows = ["ImageId,PredictionString", "ILSVRC2012_val_00000001,n90000001 1 2 3 4"]
    (tmp_path / "flat" / "LOC_val_solution.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(UserError, match=r"ILSVRC2012_val_00000002\.JPEG: no row"):
        shard_split(tmp_path / "flat", "val", tmp_path / "out", 2, 0)


def _same_but_the_attempt(a, b):
    """Two manifests equal in everything but this attempt's timing and what it kept."""
    skip = {"seconds", "rate", "kept_from_earlier_attempt"}
    return {k: v for k, v in a.items() if k not in skip} == {k: v for k, v in b.items() if k not in skip}


@pytest.fixture
def prepared(monkeypatch):
    """The sources packed (not kept) in a call, by path; set ``fail_after`` to interrupt the attempt there."""
    seen, real = [], pack._Packer._prepare
    state = {"fail_after": None}

    def counting(self, sample):
        if state["fail_after"] is not None and len(seen) >= state["fail_after"]:
            raise KeyboardInterrupt("the job's time limit")
        seen.append(sample.relpath)
        return real(self, sample)

    monkeypatch.setattr(pack._Packer, "_prepare", counting)
    return seen, state


def test_a_retry_keeps_the_shards_an_interrupted_attempt_finished(copy_of, tmp_path, prepared):
    seen, state = prepared
    whole = shard_split(copy_of, "train", tmp_path / "whole", 4, 0)
    seen.clear()
    state["fail_after"] = whole["shards"][0]["samples"] + whole["shards"][1]["samples"] + 3  # in shard 2
    with pytest.raises(KeyboardInterrupt):
        shard_split(copy_of, "train", tmp_path / "out", 4, 0, threads=1)
    assert_nothing_looks_done(tmp_path / "out")
    seen.clear()
    state["fail_after"] = None
    again = shard_split(copy_of, "train", tmp_path / "out", 4, 0, threads=2)
    assert again["kept_from_earlier_attempt"] == 2
    assert len(seen) == whole["shards"][2]["samples"] + whole["shards"][3]["samples"]
    assert _same_but_the_attempt(again, whole)  # the same shards, source hash and tallies as one whole attempt


def test_a_changed_source_or_shard_is_packed_again(copy_of, tmp_path, prepared):
    seen, _ = prepared
    first = shard_split(copy_of, "val", tmp_path / "out", 2, 0)
    names = [ShardReader(tmp_path / "out" / e["file"]).names() for e in first["shards"]]
    source = copy_of / names[1][0]
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))
    seen.clear()
    again = shard_split(copy_of, "val", tmp_path / "out", 2, 0)
    assert again["kept_from_earlier_attempt"] == 1
    assert sorted(seen) == sorted(names[1])
    shard0 = tmp_path / "out" / first["shards"][0]["file"]
    data = bytearray(shard0.read_bytes())
    data[10] ^= 0xFF
    shard0.write_bytes(bytes(data))
    seen.clear()
    third = shard_split(copy_of, "val", tmp_path / "out", 2, 0)
    assert third["kept_from_earlier_attempt"] == 1
    assert sorted(seen) == sorted(names[0])
    assert _same_but_the_attempt(third, first)


def test_another_plan_packs_everything_and_drops_the_old_shards(copy_of, tmp_path, prepared):
    seen, _ = prepared
    shard_split(copy_of, "val", tmp_path / "out", 4, 0)
    seen.clear()
    again = shard_split(copy_of, "val", tmp_path / "out", 2, 0)
    assert again["kept_from_earlier_attempt"] == 0
    assert len(seen) == again["samples"]
    assert sorted(p.name for p in (tmp_path / "out").glob("*.srs")) == ["shard-00000.srs", "shard-00001.srs"]
    assert len(list((tmp_path / "out").glob(".*.done.json"))) == 2


def test_the_manifest_gives_the_rate_per_cpu_and_the_imagenet_projection(tiny_dataset, tmp_path):
    rate = shard_split(tiny_dataset, "val", tmp_path / "val", 2, 0, threads=2)["rate"]
    assert rate["threads"] == 2
    assert rate["images"] == 10 * SMALL.val_per_class
    assert rate["images_per_s_per_cpu"] > 0
    p = rate["projection"]
    expected = pack.IMAGENET_TRAIN["images"] / (rate["images_per_s_per_cpu"] * pack.PROJECTION_CPUS) / 60
    assert p["cpus"] == 32
    assert p["minutes_by_images"] == pytest.approx(expected, rel=0.02, abs=0.1)
    assert p["minutes"] == max(p["minutes_by_images"], p["minutes_by_bytes"])
    assert "projected for ILSVRC-2012" in pack.describe_rate(rate)
