"""Per-image pipelines on JPEG bytes: crop chosen from the header, scaled decode, one uint8 resize.

The crop is chosen from the JPEG header's size before any pixel is decoded.
libjpeg-turbo (through ``simplejpeg``) then decodes at the smallest
power-of-two DCT scale (1/2, 1/4, 1/8: its fast reduced IDCTs; the other
M/8 scales measured slower than a full decode) that still leaves the crop
at least as large as the output, and, for a JPEG that ``scalerepro shard``
row-indexed, decodes only the MCU rows around the crop
(:mod:`scalerepro.data.jpegrows`; the same pixels). One antialiased bilinear resize of
the uint8 crop (torch's vectorised kernel, which matches PIL's filter)
makes the output. The crop distribution is torchvision's
``RandomResizedCrop`` (same algorithm, same scale and ratio ranges);
evaluation is its ``Resize(size / 0.875)`` + ``CenterCrop(size)``.
Randomness comes from a generator the caller derives from (seed, epoch,
sample), so a sample's crop does not depend on which worker decodes it.
Images come out as uint8 (3, size, size) tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import simplejpeg
import torch
import torch.nn.functional as F

from scalerepro.data.jpegrows import crop_rows, has_row_index, row_index, rows_jpeg

Box = tuple[int, int, int, int]  # top, left, height, width
DCT_FACTORS = (8, 4, 2)


def jpeg_size(data: memoryview | bytes) -> tuple[int, int]:
    """(height, width) from the JPEG header, without decoding pixels."""
    height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    return int(height), int(width)


def dct_factor(box: Box, size: int) -> int:
    """The largest of 8, 4, 2 that keeps the box at least ``size`` a side after scaling; else 1."""
    _, _, h, w = box
    return next((k for k in DCT_FACTORS if h // k >= size and w // k >= size), 1)


def decode_scaled(data: memoryview | bytes, height: int, width: int, factor: int) -> npt.NDArray[np.uint8]:
    """RGB pixels decoded at 1/factor of (height, width), rounded up as libjpeg-turbo does."""
    pixels: npt.NDArray[np.uint8]  # simplejpeg has no type information; it returns (H, W, 3) uint8
    if factor == 1:
        pixels = simplejpeg.decode_jpeg(data, colorspace="RGB")
    else:
        pixels = simplejpeg.decode_jpeg(
            data, colorspace="RGB", min_height=math.ceil(height / factor), min_width=math.ceil(width / factor)
        )
    return pixels


def random_resized_box(
    height: int, width: int, scale: tuple[float, float], ratio: tuple[float, float], rng: np.random.Generator
) -> Box:
    """torchvision's RandomResizedCrop.get_params: 10 tries at area and aspect, then a centre crop."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        h, w = height, round(height * max(ratio))
    else:
        h, w = height, width
    return (height - h) // 2, (width - w) // 2, h, w


def centre_box(height: int, width: int, size: int, resize: int) -> Box:
    """The region of the original that Resize(short side -> resize) + CenterCrop(size) keeps."""
    short, long_ = min(height, width), max(height, width)
    new_long = int(resize * long_ / short)
    new_h, new_w = (resize, new_long) if height <= width else (new_long, resize)
    sy, sx = height / new_h, width / new_w
    top, left = round((new_h - size) / 2.0), round((new_w - size) / 2.0)
    return (round(top * sy), round(left * sx), max(1, round(size * sy)), max(1, round(size * sx)))


def cut_rows(data: memoryview | bytes, height: int, top: int, bottom: int) -> tuple[memoryview | bytes, int, int]:
    """The MCU rows of a row-indexed JPEG (``height`` rows) that rows [top, bottom) need, as a smaller JPEG, with
    its height and the image row it starts at; any other JPEG, or rows that need all of it: (data, height, 0)."""
    raw = bytes(data) if has_row_index(data) else None  # jpegrows parses bytes (a no-op copy for bytes)
    rows = row_index(raw) if raw is not None else None
    if raw is not None and rows is not None:
        first, stop = crop_rows(rows, top, bottom)
        if stop - first < len(rows.starts):
            start = first * rows.mcu_height
            return rows_jpeg(raw, rows, first, stop), min(height, stop * rows.mcu_height) - start, start
    return data, height, 0


def decode_rows(
    data: memoryview | bytes, height: int, width: int, factor: int, top: int, bottom: int
) -> tuple[npt.NDArray[np.uint8], int]:
    """Pixels holding rows [top, bottom) of the image at 1/factor scale, and the scaled row they start at.

    With a restart marker after every MCU row (:mod:`scalerepro.data.jpegrows`)
    only the MCU rows around [top, bottom) are decoded (:func:`cut_rows`); otherwise the whole image.
    """
    jpeg, rows, start = cut_rows(data, height, top, bottom)
    return decode_scaled(jpeg, rows, width, factor), start // factor


def crop_resize(data: memoryview | bytes, height: int, width: int, box: Box, size: int) -> torch.Tensor:
    """Decode just enough of the (height x width) JPEG for ``box``; resize that region to uint8 (3, size, size)."""
    factor = dct_factor(box, size)
    top, left, h, w = box
    pixels, offset = decode_rows(data, height, width, factor, top, top + h)
    sy, sx = math.ceil(height / factor) / height, math.ceil(width / factor) / width  # the whole image's scale
    y0, x0 = round(top * sy), round(left * sx)
    y1, x1 = max(y0 + 1, round((top + h) * sy)), max(x0 + 1, round((left + w) * sx))
    region = torch.from_numpy(pixels[y0 - offset : y1 - offset, x0:x1]).permute(2, 0, 1).unsqueeze(0)  # a view
    return F.interpolate(region, size=(size, size), mode="bilinear", antialias=True, align_corners=False)[0]


@dataclass(frozen=True)
class TrainPipeline:
    """RandomResizedCrop(size, scale, ratio) + horizontal flip with probability 1/2."""

    size: int
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)

    def __call__(self, data: memoryview | bytes, rng: np.random.Generator) -> torch.Tensor:
        """One augmented image (uint8, 3 x size x size)."""
        height, width = jpeg_size(data)
        box = random_resized_box(height, width, self.scale, self.ratio, rng)
        out = crop_resize(data, height, width, box, self.size)
        return out.flip(2) if rng.random() < 0.5 else out


@dataclass(frozen=True)
class EvalPipeline:
    """Resize the short side to size / crop_fraction, then centre-crop size x size."""

    size: int
    crop_fraction: float = 0.875

    def __call__(self, data: memoryview | bytes, rng: np.random.Generator | None = None) -> torch.Tensor:  # noqa: ARG002  # rng: TrainPipeline's call signature
        """One evaluation image (uint8, 3 x size x size); ``rng`` is unused."""
        height, width = jpeg_size(data)
        resize = round(self.size / self.crop_fraction)
        return crop_resize(data, height, width, centre_box(height, width, self.size, resize), self.size)
