"""GPU decode, run on the CPU: the CPU path's crops and flips, its pixels within a stated tolerance, cheap packing.

Tolerance, in 0-255 levels (see :mod:`scalerepro.data.gpudecode` for the measurements):

- where the CPU path decodes the crop at full scale (DCT factor 1), every
  pixel within 1.5 (measured at most 1.0: its uint8 resize rounds);
- over all samples of a set (full and 1/2-1/8 DCT scale), mean below 2
  (measured 0.53-0.71) and 99th percentile below 20 (measured 6.1-12.7):
  the CPU path's scaled decode averages 8x8 blocks and snaps the box to
  the reduced grid, so at reduced scale single samples differ more;
- against the reference the CPU path approximates (the whole JPEG decoded
  by PIL, the box resized with PIL's bilinear filter, as torchvision's
  transforms do), every pixel within 1.5 at every scale (measured at most 1.0).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from scalerepro.data.augment import EvalPipeline, TrainPipeline, dct_factor, jpeg_size, random_resized_box
from scalerepro.data.gpudecode import Crop, EvalCrops, PackedCrops, TrainCrops, box_rows, decode_batch
from scalerepro.data.jpegrows import add_row_restarts, jpegtran, row_index, with_row_index
from scalerepro.data.tensors import SCALE, SHIFT, normalise_into
from scalerepro.errors import UserError

TOOL = jpegtran()
needs_jpegtran = pytest.mark.skipif(TOOL is None, reason="jpegtran (libjpeg-turbo-progs) not installed")
SHAPES = ((480, 500), (401, 453), (97, 130), (333, 470))
SIZES = (224, 64, 24)  # the CPU path's DCT factors 1 to 8
FULL_SCALE_MAX, MEAN_MAX, P99_MAX, REFERENCE_MAX = 1.5, 2.0, 20.0, 1.5


def encode(pixels: np.ndarray) -> bytes:
    """JPEG (quality 90, 4:2:0) of (H, W, 3) uint8 pixels."""
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def smooth(h: int, w: int, seed: int) -> bytes:
    """Random noise smoothed: a random colour field on a 32 px grid, bicubic-interpolated, plus a little noise."""
    rng = np.random.default_rng(seed)
    low = Image.fromarray((rng.random((h // 32 + 2, w // 32 + 2, 3)) * 255).astype(np.uint8))
    field = np.asarray(low.resize((w, h), Image.Resampling.BICUBIC), dtype=np.float64)
    return encode(np.clip(field + rng.normal(0, 4, field.shape), 0, 255).astype(np.uint8))


def photo(h: int, w: int, seed: int) -> bytes:
    """Noise over gradients (test_jpegrows' content): detail in every MCU row."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // w, y * 255 // h, (x ^ y) & 255], axis=-1)
    return encode(np.clip(base + rng.normal(0, 30, (h, w, 3)), 0, 255).astype(np.uint8))


def indexed(data: bytes) -> bytes:
    """``data`` as ``scalerepro shard`` stores it when jpegtran is present."""
    out = with_row_index(add_row_restarts(data, TOOL))
    assert out is not None
    return out


def levels(images: torch.Tensor) -> torch.Tensor:
    """Normalised images back in 0-255 units."""
    return (images - SHIFT) / SCALE


def cpu_path(pipeline: Callable[..., torch.Tensor], data: bytes, seed: int, size: int) -> torch.Tensor:
    """One image through the CPU path, normalised as the loader does."""
    out = torch.empty(3, size, size)
    normalise_into(out, pipeline(data, np.random.default_rng(seed)))
    return out


def pil_reference(crop: Crop, size: int) -> torch.Tensor:
    """The crop as torchvision's transforms make it on PIL: decode whole, crop, resize (bilinear), flip."""
    top, left, h, w = crop.box
    image = Image.open(io.BytesIO(bytes(crop.jpeg))).convert("RGB").crop((left, top, left + w, top + h))
    out = image.resize((size, size), Image.Resampling.BILINEAR)
    pixels = torch.from_numpy(np.asarray(out, dtype=np.float32)).permute(2, 0, 1)
    return pixels.flip(2) if crop.flip else pixels


def jpegs(content: Callable[[int, int, int], bytes]) -> list[bytes]:
    """Each shape plain and (with jpegtran) row-indexed."""
    plain = [content(h, w, k) for k, (h, w) in enumerate(SHAPES)]
    return plain + ([indexed(d) for d in plain] if TOOL else [])


@pytest.mark.parametrize("content", [smooth, photo])
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_pixels_match_the_cpu_path_and_the_reference(content, train):
    full, every, reference = [], [], []
    for k, data in enumerate(jpegs(content)):
        for size in SIZES:
            cpu, gpu = (TrainPipeline(size), TrainCrops(size)) if train else (EvalPipeline(size), EvalCrops(size))
            seeds = [100 * k + s for s in range(6 if train else 1)]
            crops = [gpu(data, np.random.default_rng(s)) for s in seeds]
            got = levels(decode_batch(PackedCrops.pack(crops), size, "cpu"))
            for seed, crop, image in zip(seeds, crops, got, strict=True):
                diff = (image - levels(cpu_path(cpu, data, seed, size))).abs()
                every.append(diff.flatten())
                if dct_factor(crop.box, size) == 1:
                    full.append(diff.flatten())
                reference.append((image - pil_reference(crop, size)).abs().max())
    assert full, "no sample decoded at full scale by the CPU path"
    every_diff = torch.cat(every)
    stats = {
        "full-scale max": torch.cat(full).max().item(),
        "mean": every_diff.mean().item(),
        "p99": every_diff.quantile(0.99).item(),
        "reference max": max(reference).item(),
    }
    assert stats["full-scale max"] <= FULL_SCALE_MAX, stats
    assert stats["mean"] < MEAN_MAX, stats
    assert stats["p99"] < P99_MAX, stats
    assert stats["reference max"] <= REFERENCE_MAX, stats


@pytest.mark.parametrize("content", [smooth, photo])
def test_crops_draw_like_the_cpu_path(content):
    """The box and flip TrainPipeline draws from the same generator, which is left in the same state."""
    data = content(401, 453, 7)
    flips = []
    for seed in range(40):
        a, b, c = (np.random.default_rng(seed) for _ in range(3))
        crop = TrainCrops(32)(data, a)
        TrainPipeline(32)(data, b)
        assert crop.box == random_resized_box(401, 453, (0.08, 1.0), (3 / 4, 4 / 3), c)
        assert crop.flip == (c.random() < 0.5)
        assert a.random() == b.random()
        assert crop.jpeg is data  # not row-indexed: handed on as it is, no copy
        flips.append(crop.flip)
    assert 0 < sum(flips) < len(flips)


@needs_jpegtran
@pytest.mark.parametrize("subsampling", [0, 2])  # 8 and 16 px MCU rows
@pytest.mark.parametrize("size", [224, 32])
def test_row_cut_crops_decode_to_the_whole_jpegs_pixels(subsampling, size):
    buf = io.BytesIO()
    Image.open(io.BytesIO(photo(480, 500, 3))).save(buf, format="JPEG", quality=90, subsampling=subsampling)
    data = indexed(buf.getvalue())
    h, w = jpeg_size(data)
    mcu = row_index(data).mcu_height
    cut = 0
    for seed in range(16):
        crop = TrainCrops(size)(data, np.random.default_rng(seed))
        rng = np.random.default_rng(seed)
        box = random_resized_box(h, w, (0.08, 1.0), (3 / 4, 4 / 3), rng)
        whole = Crop(data, box, bool(rng.random() < 0.5))
        assert crop.box[1:] == box[1:]
        assert crop.flip == whole.flip
        shift = box[0] - crop.box[0]
        assert shift in (0, max(0, box[0] // mcu - 1) * mcu)  # cut from one MCU row above the crop, or not cut
        cut += len(crop.jpeg) < len(data)
        assert torch.equal(decode_batch(PackedCrops.pack([crop]), size), decode_batch(PackedCrops.pack([whole]), size))
    assert cut > 0


@needs_jpegtran
def test_eval_crops_are_cut_too():
    data = indexed(photo(480, 300, 5))
    crop = EvalCrops(224)(data)
    assert len(crop.jpeg) < len(data)
    assert crop.flip is False
    expected = levels(cpu_path(EvalPipeline(224), data, 0, 224))
    got = levels(decode_batch(PackedCrops.pack([crop]), 224))[0]
    assert (got - expected).abs().max() <= FULL_SCALE_MAX


def test_a_jpeg_without_a_valid_index_goes_whole():
    data = photo(200, 240, 1)
    box = (50, 10, 100, 120)
    assert box_rows(data, 200, box) == (data, box)
    fake = data[:2] + b"\xff\xef\x00\x14scalerepro-rows\x00" + data[2:]  # the tag without a usable index
    assert box_rows(fake, 200, box) == (fake, box)


def test_packing_round_trip():
    crops = [
        Crop(b"\xff\xd8abc", (1, 2, 3, 4), True),
        Crop(memoryview(b"xyz" * 100), (5, 6, 7, 8), False),
        Crop(b"", (0, 0, 1, 1), True),
        Crop(bytearray(b"\x00\xff"), (9, 10, 11, 12), False),
    ]
    packed = PackedCrops.pack(crops)
    assert packed.data.dtype == torch.uint8
    assert packed.data.dim() == 1
    assert packed.offsets.tolist() == [0, 5, 305, 305, 307]
    assert packed.boxes.dtype == torch.int64
    assert packed.boxes.tolist() == [list(c.box) for c in crops]
    assert packed.flips.tolist() == [True, False, True, False]
    views = packed.jpegs()
    assert [bytes(v.numpy()) for v in views] == [bytes(c.jpeg) for c in crops]
    assert all(v.untyped_storage().data_ptr() == packed.data.untyped_storage().data_ptr() for v in views)
    again = pickle.loads(pickle.dumps(packed))
    assert type(again) is PackedCrops
    assert all(torch.equal(a, b) for a, b in zip(again, packed, strict=True))


class Packs(Dataset[PackedCrops]):
    """Item b: a packed batch of two crops of ``data``, built in a loader worker."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __len__(self) -> int:
        return 3

    def __getitem__(self, b: int) -> PackedCrops:
        return PackedCrops.pack([TrainCrops(48)(self.data, np.random.default_rng([b, j])) for j in range(2)])


def test_a_packed_batch_crosses_the_loader_queue_in_shared_memory():
    data = photo(120, 160, 2)
    loader = DataLoader(Packs(data), batch_size=None, num_workers=1)
    for b, packed in enumerate(loader):
        assert type(packed) is PackedCrops
        assert packed.data.is_shared()
        expected = decode_batch(Packs(data)[b], 48)
        assert torch.equal(decode_batch(packed, 48), expected)


def test_empty_and_one_image_batches():
    empty = decode_batch(PackedCrops.pack([]), 32, "cpu")
    assert empty.shape == (0, 3, 32, 32)
    assert empty.dtype == torch.float32
    data = smooth(97, 130, 1)
    one = decode_batch(PackedCrops.pack([TrainCrops(32)(data, np.random.default_rng(4))]), 32, torch.device("cpu"))
    assert one.shape == (1, 3, 32, 32)
    again = decode_batch(PackedCrops.pack([TrainCrops(32)(data, np.random.default_rng(4))] * 3), 32)
    assert all(torch.equal(one[0], image) for image in again)


def test_a_jpeg_that_does_not_decode_names_its_sample():
    good = smooth(97, 130, 1)
    bad = good[: len(good) // 2]  # the header reads, the pixels do not
    crops = [TrainCrops(32)(d, np.random.default_rng(0)) for d in (good, bad, good)]
    packed = PackedCrops.pack(crops)
    with pytest.raises(UserError, match=r"sample 17 \(\d+ bytes\) does not decode as a JPEG on cpu"):
        decode_batch(packed, 32, ids=torch.tensor([5, 17, 9]))
    with pytest.raises(UserError, match="image 1 of the batch"):
        decode_batch(packed, 32)
