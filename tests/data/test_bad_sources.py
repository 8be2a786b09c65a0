"""Bad source files at shard time: what `scalerepro shard` stores is what the loader decodes, or the file is named.

Each case: the one-line message (exit 2, no traceback) or, where the file can be recovered, stored bytes the
loader's decoder accepts.
"""

from __future__ import annotations

import io
import os
import re
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
from PIL import Image

from scalerepro.data.augment import EvalPipeline, TrainPipeline
from scalerepro.data.pack import loader_refuses, normalise, shard_split
from scalerepro.data.shards import ShardReader, read_manifest
from scalerepro.errors import UserError
from tests.support import cli, refused_one

pytestmark = pytest.mark.faults


def jpeg(seed: int = 0, size: tuple[int, int] = (64, 80)) -> bytes:
    """A valid RGB JPEG of smooth random colours."""
    rng = np.random.default_rng(seed)
    small = Image.fromarray((rng.random((8, 10, 3)) * 255).astype(np.uint8))
    out = io.BytesIO()
    small.resize(size[::-1], Image.Resampling.BILINEAR).save(out, format="JPEG", quality=90)
    return out.getvalue()


def extraneous_bytes(data: bytes) -> bytes:
    """``data`` with bytes inserted before its end marker (libjpeg: 'N extraneous bytes before marker 0xd9')."""
    end = data.rfind(b"\xff\xd9")
    return data[:end] + bytes(8) + b"\xff" + data[end:]


def taller_header(data: bytes) -> bytes:
    """``data`` with its SOF height doubled: the scan holds half the rows (libjpeg: 'premature end of data')."""
    sof = data.find(b"\xff\xc0")
    height = int.from_bytes(data[sof + 5 : sof + 7], "big")
    return data[: sof + 5] + (2 * height).to_bytes(2, "big") + data[sof + 7 :]


def dataset(root: Path, per_class: int = 2) -> Path:
    """train/ and val/ with two classes of ``per_class`` valid JPEGs each."""
    for split in ("train", "val"):
        for c, wnid in enumerate(("n0", "n1")):
            folder = root / split / wnid
            folder.mkdir(parents=True)
            for i in range(per_class):
                (folder / f"{wnid}_{i}.JPEG").write_bytes(jpeg(10 * c + i))
    return root


def shard_cli(root: Path, out: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``scalerepro shard`` of ``root``'s val split into one shard."""
    return cli(
        "shard", "--dataset", str(root), "--split", "val", "--out", str(out), "--set", "shard.val_shards=1", *flags
    )


def decoded_by_the_loader(folder: Path) -> int:
    """Every stored record through the loader's train and eval pipelines; how many there were."""
    manifest = read_manifest(folder)
    count = 0
    for entry in manifest["shards"]:
        reader = ShardReader(folder / entry["file"])
        for i in range(len(reader)):
            data, _ = reader.record(i)
            assert TrainPipeline(16)(data, np.random.default_rng(i)).shape == (3, 16, 16)
            assert EvalPipeline(16)(data).shape == (3, 16, 16)
            count += 1
    return count


@pytest.mark.parametrize(
    ("surgery", "warning"),
    [(extraneous_bytes, "extraneous bytes before marker 0xd9"), (taller_header, "premature end of data segment")],
)
def test_a_jpeg_the_loader_would_refuse_is_re_encoded_so_it_decodes(tmp_path, surgery, warning):
    """Case 1: Pillow decodes it, the loader's decoder (simplejpeg, strict) does not; shard stores a re-encoding."""
    bad = surgery(jpeg())
    assert Image.open(io.BytesIO(bad)).convert("RGB").size  # Pillow lets the warning pass
    with pytest.raises(ValueError, match=warning):
        simplejpeg.decode_jpeg(bad, colorspace="RGB")  # the loader's decode call (augment.decode_scaled)
    assert warning in loader_refuses(bad)
    data, how = normalise(bad, "x.JPEG")
    assert how == "repaired"
    assert not loader_refuses(data)
    assert normalise(jpeg(), "y.JPEG") == (jpeg(), "as-is")  # a clean JPEG is kept byte for byte
    root = dataset(tmp_path / "ds")
    (root / "val" / "n1" / "n1_0.JPEG").write_bytes(bad)
    proc = shard_cli(root, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    manifest = read_manifest(tmp_path / "out" / "val")
    assert manifest["converted"] == {"as-is": 3, "repaired": 1}
    assert decoded_by_the_loader(tmp_path / "out" / "val") == 4  # jpegtran's row index, where installed, too


def test_a_16_bit_png_is_scaled_to_8_bits_not_clipped(tmp_path):
    """Case 2: levels / 257, so the stored image's mean is the source's mean / 257."""
    rng = np.random.default_rng(1)
    levels = (rng.random((6, 8)) * 60000).astype(np.uint16)
    source = np.asarray(Image.fromarray(levels).resize((80, 64), Image.Resampling.BILINEAR), dtype=np.uint16)
    png = io.BytesIO()
    Image.fromarray(source).save(png, format="PNG")
    assert Image.open(io.BytesIO(png.getvalue())).mode.startswith("I")  # Pillow's 16-bit grayscale
    data, how = normalise(png.getvalue(), "x.png")
    assert how == "png"
    stored = simplejpeg.decode_jpeg(data, colorspace="RGB")
    assert abs(stored.mean() - source.mean() / 257) < 1.0, (stored.mean(), source.mean() / 257)
    root = dataset(tmp_path / "ds")
    (root / "val" / "n0" / "n0_0.JPEG").unlink()
    (root / "val" / "n0" / "deep.png").write_bytes(png.getvalue())
    manifest = shard_split(root, "val", tmp_path / "out", 1, 0)
    assert manifest["converted"] == {"as-is": 3, "png": 1}


def make_fifo(path: Path) -> str:
    os.mkfifo(path)
    return "a named pipe (FIFO), not a regular file"


def make_folder(path: Path) -> str:
    path.mkdir()
    return "a folder, not a regular file"


def make_broken_link(path: Path) -> str:
    path.symlink_to(path.with_name("gone.JPEG"))
    return "cannot be read (No such file or directory); it is a symbolic link to"


def make_socket(path: Path) -> str:
    if len(str(path)) > 100:
        pytest.skip("socket path longer than sun_path allows")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()  # the socket file stays
    return "a socket, not a regular file"


@pytest.mark.parametrize("make", [make_fifo, make_folder, make_broken_link, make_socket])
def test_only_regular_files_are_read_others_are_named(tmp_path, make):
    """Case 3: a FIFO, socket, folder or broken link named .JPEG is named, or skipped with skip_bad."""
    root = dataset(tmp_path / "ds")
    victim = root / "val" / "n0" / "x.JPEG"
    what = make(victim)
    with pytest.raises(UserError, match=rf"x\.JPEG: {re.escape(what)}.*--skip-bad"):
        shard_split(root, "val", tmp_path / "out", 1, 0)
    manifest = shard_split(root, "val", tmp_path / "out", 1, 0, skip_bad=True)
    assert [s["path"] for s in manifest["skipped"]] == ["val/n0/x.JPEG"]
    assert what in manifest["skipped"][0]["reason"]
    assert manifest["samples"] == 4


def test_a_fifo_is_named_by_the_cli_and_skipped_with_skip_bad_and_a_link_to_a_file_is_read(tmp_path):
    """Case 3 through `scalerepro shard`: exit 2 naming the FIFO (within the timeout: no read blocks on it),
    --skip-bad lists it; a link to a regular file is read."""
    root = dataset(tmp_path / "ds")
    os.mkfifo(root / "val" / "n0" / "x.JPEG")
    (root / "val" / "n1" / "link.JPEG").symlink_to(root / "train" / "n1" / "n1_0.JPEG")
    refused_one(shard_cli(root, tmp_path / "out"), "x.JPEG: a named pipe (FIFO), not a regular file", "--skip-bad")
    proc = shard_cli(root, tmp_path / "out", "--skip-bad")
    assert proc.returncode == 0, proc.stderr
    manifest = read_manifest(tmp_path / "out" / "val")
    assert [s["path"] for s in manifest["skipped"]] == ["val/n0/x.JPEG"]
    assert "val/n1/link.JPEG" in ShardReader(tmp_path / "out" / "val" / "shard-00000.srs").names()


def test_a_class_folder_name_with_a_newline_is_refused_naming_it(tmp_path):
    """Case 4: the shard's names section is newline-separated; such a name is refused before any work."""
    root = dataset(tmp_path / "ds")
    for split in ("train", "val"):
        (root / split / "n1").rename(root / split / "n1\nx")
    refused_one(shard_cli(root, tmp_path / "out"), "class folder ", "n1\\nx", "control character", "rename it")
    assert not (tmp_path / "out" / "val" / "manifest.json").exists()


def test_a_file_name_with_a_newline_is_a_bad_file(tmp_path):
    """Case 4, a file: named (its name escaped, on one line), or left out and listed with --skip-bad."""
    root = dataset(tmp_path / "ds")
    (root / "val" / "n0" / "n0_0.JPEG").rename(root / "val" / "n0" / "a\nb.JPEG")
    with pytest.raises(UserError, match=r"a\\nb\.JPEG': its name holds a control character.*--skip-bad") as err:
        shard_split(root, "val", tmp_path / "out", 1, 0)
    assert "\n" not in str(err.value)
    manifest = shard_split(root, "val", tmp_path / "out", 1, 0, skip_bad=True)
    assert [s["path"] for s in manifest["skipped"]] == ["val/n0/a\nb.JPEG"]
    names = ShardReader(tmp_path / "out" / "shard-00000.srs").names()
    assert len(names) == manifest["samples"] == 3
