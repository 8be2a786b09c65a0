"""Row-indexed JPEGs: lossless, found again at load, decoded crops bit-identical to whole-image decodes."""

from __future__ import annotations

import io

import numpy as np
import pytest
import simplejpeg
import torch
from PIL import Image

from scalerepro.data.augment import crop_resize, jpeg_size, random_resized_box
from scalerepro.data.jpegrows import add_row_restarts, jpegtran, row_index, rows_jpeg, scan_rows, with_row_index
from scalerepro.data.pack import shard_split
from scalerepro.data.shards import ShardReader, read_manifest

TOOL = jpegtran()
needs_jpegtran = pytest.mark.skipif(TOOL is None, reason="jpegtran (libjpeg-turbo-progs) not installed")


def photo(h: int, w: int, seed: int, subsampling: int = 2, progressive: bool = False) -> bytes:
    """A textured JPEG (noise over gradients: every MCU row has real entropy-coded detail)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // w, y * 255 // h, (x ^ y) & 255], axis=-1)
    pixels = np.clip(base + rng.normal(0, 30, (h, w, 3)), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=90, subsampling=subsampling, progressive=progressive)
    return buf.getvalue()


def indexed(data: bytes) -> bytes:
    """``data`` as scalerepro shard stores it when jpegtran is present."""
    out = with_row_index(add_row_restarts(data, TOOL))
    assert out is not None
    return out


@needs_jpegtran
@pytest.mark.parametrize("subsampling", [0, 1, 2])  # 4:4:4 (8 px MCU rows), 4:2:2, 4:2:0 (16 px)
def test_row_index_is_lossless_and_found_again(subsampling):
    plain = photo(333, 470, 1, subsampling)
    data = indexed(plain)
    assert np.array_equal(simplejpeg.decode_jpeg(data), simplejpeg.decode_jpeg(plain))
    rows = row_index(data)
    assert rows == scan_rows(data)
    assert len(rows.starts) == -(-333 // rows.mcu_height)
    assert row_index(plain) is None
    assert row_index(add_row_restarts(plain, TOOL)) is None  # no index: whole decode


@needs_jpegtran
@pytest.mark.parametrize("subsampling", [0, 2])
def test_some_rows_decode_to_exactly_those_rows(subsampling):
    data = indexed(photo(300, 410, 2, subsampling))
    rows, whole = row_index(data), simplejpeg.decode_jpeg(data)
    mh = rows.mcu_height
    for first, stop in ((0, 3), (4, 9), (len(rows.starts) - 3, len(rows.starts))):
        part = simplejpeg.decode_jpeg(rows_jpeg(data, rows, first, stop))
        lo, hi = (first + (first > 0)) * mh, min(300, (stop - (stop < len(rows.starts))) * mh)  # inside the margins
        assert np.array_equal(part[lo - first * mh : hi - first * mh], whole[lo:hi])


@needs_jpegtran
def test_crops_are_bit_identical_to_the_whole_image_path():
    rng = np.random.default_rng(0)
    for seed, (h, w) in enumerate([(480, 500), (401, 453), (97, 130)]):
        plain = photo(h, w, seed)
        data = indexed(plain)
        for size in (224, 64, 24):  # DCT scales 1 to 1/8
            for _ in range(12):
                box = random_resized_box(h, w, (0.08, 1.0), (3 / 4, 4 / 3), rng)
                assert torch.equal(crop_resize(data, h, w, box, size), crop_resize(plain, h, w, box, size)), (seed, box)
        assert jpeg_size(data) == (h, w)


@needs_jpegtran
def test_an_index_that_does_not_match_the_markers_is_ignored():
    data = bytearray(indexed(photo(200, 200, 3)))
    rows = row_index(bytes(data))
    at = 6 + len(b"scalerepro-rows\0") + 4  # the second row's offset
    data[at : at + 4] = (rows.starts[1] + 1).to_bytes(4, "big")
    assert row_index(bytes(data)) is None


@needs_jpegtran
def test_a_progressive_jpeg_is_rewritten_sequential_and_indexed_losslessly():
    plain = photo(200, 240, 4, progressive=True)
    assert row_index(plain) is None
    assert scan_rows(plain) is None  # several scans: decoded whole
    data = indexed(plain)  # jpegtran writes sequential output unless told -progressive
    assert row_index(data) is not None
    assert np.array_equal(simplejpeg.decode_jpeg(data), simplejpeg.decode_jpeg(plain))


@needs_jpegtran
def test_shard_indexes_the_rows_and_says_so(tiny_dataset, tmp_path):
    manifest = shard_split(tiny_dataset, "val", tmp_path / "val", 2, 0)
    assert manifest["row_index"] == {"tool": TOOL, "images": manifest["samples"]}
    entry = manifest["shards"][0]
    data = bytes(ShardReader(tmp_path / "val" / entry["file"]).record(0)[0])
    assert row_index(data) is not None
    assert read_manifest(tmp_path / "val")["row_index"]["images"] > 0


def test_shard_without_jpegtran_stores_the_jpegs_as_they_are(tiny_dataset, tmp_path, monkeypatch):
    monkeypatch.setattr("scalerepro.data.pack.jpegtran", lambda: None)
    manifest = shard_split(tiny_dataset, "val", tmp_path / "val", 2, 0)
    assert manifest["row_index"] == {"tool": None, "images": 0}
    data = bytes(ShardReader(tmp_path / "val" / manifest["shards"][0]["file"]).record(0)[0])
    assert row_index(data) is None


@needs_jpegtran
def test_shard_can_be_told_not_to_index_rows_where_jpegtran_is(tiny_dataset, tmp_path):
    manifest = shard_split(tiny_dataset, "val", tmp_path / "val", 2, 0, row_index=False)
    assert manifest["row_index"] == {"tool": None, "images": 0}
    data = bytes(ShardReader(tmp_path / "val" / manifest["shards"][0]["file"]).record(0)[0])
    assert row_index(data) is None
