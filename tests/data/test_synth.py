"""The synthetic dataset: deterministic bytes, ImageNet layout, quirks, learnable classes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from scalerepro.data.synth import CLASSES, SynthSpec, generate, render
from scalerepro.errors import UserError
from tests.support import REPO, SMALL


def tree_hash(root: Path) -> str:
    """sha256 over every file's relative path and bytes."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def test_same_seed_same_bytes(tiny_dataset, tmp_path):
    assert tree_hash(generate(SMALL, tmp_path)) == tree_hash(tiny_dataset)


def test_other_seed_other_bytes(tiny_dataset, tmp_path):
    other = SynthSpec(**{**SMALL.__dict__, "seed": 1})
    assert tree_hash(generate(other, tmp_path)) != tree_hash(tiny_dataset)


def test_layout_and_class_list(tiny_dataset):
    wnids = sorted(p.name for p in (tiny_dataset / "train").iterdir())
    assert wnids == [w for w, _ in CLASSES]
    assert sorted(p.name for p in (tiny_dataset / "val").iterdir()) == wnids
    mapping = (tiny_dataset / "LOC_synset_mapping.txt").read_text().splitlines()
    assert mapping[0] == "n90000001 disk"
    assert len(list((tiny_dataset / "train").rglob("*.JPEG"))) == 10 * SMALL.train_per_class
    assert len(list((tiny_dataset / "val").rglob("*.JPEG"))) == 10 * SMALL.val_per_class


def test_quirks_present(tiny_dataset):
    kinds = {"png": 0, "L": 0, "CMYK": 0, "RGB": 0}
    for p in (tiny_dataset / "train").rglob("*.JPEG"):
        data = p.read_bytes()
        if data.startswith(b"\x89PNG"):
            kinds["png"] += 1
        else:
            kinds[Image.open(io.BytesIO(data)).mode] += 1
    assert kinds["png"] == kinds["L"] == kinds["CMYK"] == SMALL.quirks_per_kind


def test_sizes_within_range(tiny_dataset):
    sizes = [Image.open(p).size for p in (tiny_dataset / "train").rglob("*.JPEG")]
    assert min(min(s) for s in sizes) >= SMALL.min_size
    assert max(max(s) for s in sizes) <= SMALL.max_size
    assert len(set(sizes)) > len(sizes) // 2  # sizes vary


def test_render_is_pure():
    assert render(SMALL, "train", 3, 5).tobytes() == render(SMALL, "train", 3, 5).tobytes()
    assert render(SMALL, "train", 3, 5).tobytes() != render(SMALL, "train", 3, 6).tobytes()


@pytest.mark.parametrize(("field", "value"), [("classes", 11), ("classes", 0), ("min_size", 8), ("train_per_class", 0)])
def test_bad_spec_names_field(field, value):
    with pytest.raises(UserError, match=field):
        SynthSpec(**{field: value})


def test_fixed_quality_is_used_for_every_image(tmp_path):
    spec = SynthSpec(
        name="q90",
        classes=2,
        train_per_class=3,
        val_per_class=1,
        min_size=64,
        max_size=96,
        quirks_per_kind=0,
        quality=90,
    )
    out = generate(spec, tmp_path)
    reference = io.BytesIO()
    Image.new("RGB", (16, 16)).save(reference, format="JPEG", quality=90)
    tables = Image.open(reference).quantization
    assert all(Image.open(p).quantization == tables for p in out.rglob("*.JPEG"))
    assert json.loads((out / "dataset.json").read_text())["spec"]["quality"] == 90
    with pytest.raises(UserError, match="quality"):
        SynthSpec(quality=0)


def test_replaces_a_partial_previous_run(tmp_path):
    (tmp_path / ".tiny.partial" / "junk").mkdir(parents=True)
    out = generate(SMALL, tmp_path)
    assert not (tmp_path / ".tiny.partial").exists()
    assert (out / "dataset.json").is_file()


def test_committed_data_dvc_matches_fresh_generation(tmp_path):
    """`scalerepro make-dataset` with the default config reproduces data.dvc exactly: `dvc status` is clean."""
    for name in ("data.dvc", "dvc.yaml", ".dvcignore"):
        shutil.copy(REPO / name, tmp_path / name)
    env = {**os.environ, "DVC_NO_ANALYTICS": "true", "DVC_SITE_CACHE_DIR": str(tmp_path / "dvc-site")}
    bindir = Path(sys.executable).parent
    run = lambda *cmd: subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # noqa: E731
    assert run("git", "init", "-q").returncode == 0
    assert run(str(bindir / "dvc"), "init", "-q").returncode == 0
    gen = run(str(bindir / "scalerepro"), "make-dataset", "--config", str(REPO / "config" / "config.yaml"))
    assert gen.returncode == 0, gen.stderr
    (tmp_path / "data" / "synth10" / ".snakemake_timestamp").touch()  # as a Snakemake run leaves it
    added = run(str(bindir / "dvc"), "add", "-q", "data")  # hashes the fresh folder into the cache
    assert added.returncode == 0, added.stderr
    assert (tmp_path / "data.dvc").read_text() == (REPO / "data.dvc").read_text()
    status = run(str(bindir / "dvc"), "status", "data.dvc")
    assert status.returncode == 0, status.stderr
    assert "up to date" in status.stdout, status.stdout
    (tmp_path / "data" / "synth10" / "val" / "n90000001" / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"x")
    assert "modified" in run(str(bindir / "dvc"), "status", "data.dvc").stdout
