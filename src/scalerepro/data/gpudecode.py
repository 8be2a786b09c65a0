"""GPU decode (``loader.decode: gpu``): workers hand compressed crops to the rank, which decodes a batch at once.

Worker side (a loader worker, CPU only): :class:`TrainCrops` and
:class:`EvalCrops` read the JPEG header, choose the box with the same
random draws in the same order as :class:`~scalerepro.data.augment.TrainPipeline`
and :class:`~scalerepro.data.augment.EvalPipeline` (so a sample's crop and flip
are the CPU path's), and, for a row-indexed JPEG
(:mod:`scalerepro.data.jpegrows`), cut out the MCU rows the box needs as a
smaller JPEG, moving the box's top by the cut's first pixel row; any other
JPEG goes whole. No pixel is decoded. :meth:`PackedCrops.pack` puts a batch
into four tensors (all JPEG bytes in one uint8 tensor, made in shared memory
in a worker, plus offsets, boxes and flips), which cross DataLoader's queue as
shared-memory handles, not pickled bytes.

Rank side: :func:`decode_batch` decodes the list with
``torchvision.io.decode_jpeg(..., device=device)``: on CUDA one call for the
batch through nvJPEG (its inputs must stay in host memory, so only the
decoded pixels live on the GPU; boxes and flips are read on the host), on the
CPU one libjpeg decode per image. Each crop is converted to float (CUDA's
antialiased resize takes float only; the CPU runs the same code, which is what
the tests exercise) and resized to size x size (bilinear, antialiased, like
the CPU path); flips and normalisation run once on the whole batch.

Pixels against the CPU path, in 0-255 levels, over 3,904 samples (24, 64,
112 and 224 px; train and eval; smooth random fields and noisy gradients,
plain and row-indexed, from ``tests/data/test_gpudecode.py``, and 64 of the
loader bench's synthetic photos): mean |difference| 0.54-0.88 per set,
99th percentile 4.5-11.6. Where the CPU path decodes the crop at full
scale, every pixel is within 1.0 (its uint8 resize rounds; torchvision's
libjpeg decodes bit-identically to simplejpeg's, and a row-cut JPEG's crop
exactly like the whole JPEG's). Where it decodes at 1/2, 1/4 or 1/8 DCT
scale a single sample differs by up to 17.7 on average: the scaled IDCT
averages blocks and the box snaps to the reduced grid. This path is the
exact one: against the crop as torchvision's transforms make it on PIL
(decode whole, crop, bilinear resize) every pixel is within 1.0 at every
scale. The tests bound the full-scale pixels at 1.5, each set's mean at 2
and 99th percentile at 20, and the PIL reference at 1.5; a flip, a box one
pixel off or a resize without antialiasing breaks them.

Worker cost per 224 px training image on the loader bench's JPEGs
(``bench_dataset(Path('/tmp/gd'), 300, 0)``, 400-500 px, 70 kB; the first
256; one torch thread; medians of 15 passes on a shared 2-core VM):
:class:`TrainCrops` 0.023 ms for a plain JPEG, 0.062-0.066 ms for a
row-indexed one (the cut copies and joins the rows: 77% of the bytes are
handed on), packing a batch of 256 0.006-0.008 ms, against 1.13-1.28 ms
for the CPU path (TrainPipeline and normalise_into): 17-40x less. On the
CPU, :func:`decode_batch` takes about 2 ms per image (tests only).
"""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from scalerepro.data.augment import Box, centre_box, cut_rows, jpeg_size, random_resized_box
from scalerepro.data.tensors import SCALE, SHIFT, batch_tensor
from scalerepro.errors import UserError


class Crop(NamedTuple):
    """A compressed crop: JPEG bytes, the box (top, left, height, width) in that JPEG's pixels, and the flip."""

    jpeg: memoryview | bytes
    box: Box
    flip: bool


def box_rows(data: memoryview | bytes, height: int, box: Box) -> tuple[memoryview | bytes, Box]:
    """The rows of the JPEG that ``box`` needs (:func:`~scalerepro.data.augment.cut_rows`) and the box in them."""
    top, left, h, w = box
    jpeg, _, start = cut_rows(data, height, top, top + h)
    return jpeg, (top - start, left, h, w)


@dataclass(frozen=True)
class TrainCrops:
    """TrainPipeline's RandomResizedCrop box and flip, handed on compressed."""

    size: int
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)

    def __call__(self, data: memoryview | bytes, rng: np.random.Generator) -> Crop:
        """The crop TrainPipeline would make from ``data`` with ``rng`` (the same draws, in the same order)."""
        height, width = jpeg_size(data)
        jpeg, box = box_rows(data, height, random_resized_box(height, width, self.scale, self.ratio, rng))
        return Crop(jpeg, box, bool(rng.random() < 0.5))


@dataclass(frozen=True)
class EvalCrops:
    """EvalPipeline's centre box (short side to size / crop_fraction, centre size x size), never flipped."""

    size: int
    crop_fraction: float = 0.875

    def __call__(self, data: memoryview | bytes, rng: np.random.Generator | None = None) -> Crop:  # noqa: ARG002  # rng: TrainCrops' call signature
        """The crop EvalPipeline would make from ``data``; ``rng`` is unused."""
        height, width = jpeg_size(data)
        box = centre_box(height, width, self.size, round(self.size / self.crop_fraction))
        jpeg, box = box_rows(data, height, box)
        return Crop(jpeg, box, False)


class PackedCrops(NamedTuple):
    """A batch of crops as four tensors: bytes (uint8), offsets (N + 1, int64), boxes (N, 4; int64), flips (N; bool)."""

    data: torch.Tensor
    offsets: torch.Tensor
    boxes: torch.Tensor
    flips: torch.Tensor

    @classmethod
    def pack(cls, crops: Sequence[Crop]) -> PackedCrops:
        """Concatenate the crops' JPEGs into one tensor (in shared memory inside a loader worker)."""

        views = [np.frombuffer(c.jpeg, dtype=np.uint8) for c in crops]
        offsets = np.zeros(len(views) + 1, dtype=np.int64)
        np.cumsum([len(v) for v in views], out=offsets[1:])
        data = batch_tensor((int(offsets[-1]),), torch.uint8)
        out = data.numpy()
        for v, start in zip(views, offsets.tolist(), strict=False):
            out[start : start + len(v)] = v
        boxes = torch.tensor([c.box for c in crops], dtype=torch.int64).reshape(-1, 4)
        return cls(data, torch.from_numpy(offsets), boxes, torch.tensor([c.flip for c in crops], dtype=torch.bool))

    def jpegs(self) -> list[torch.Tensor]:
        """Each crop's JPEG bytes as a uint8 tensor (views of ``data``)."""
        bounds = self.offsets.tolist()
        return [self.data[a:b] for a, b in itertools.pairwise(bounds)]


@functools.cache
def normalisation(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The loader's uint8 -> ImageNet-normalised (scale, shift), (3, 1, 1) on ``device``."""

    return SCALE.to(device), SHIFT.to(device)


def decode_jpegs(
    jpegs: list[torch.Tensor], device: torch.device, ids: Sequence[int] | torch.Tensor | None
) -> list[torch.Tensor]:
    """uint8 RGB (3, H, W) images on ``device``; a JPEG that does not decode is a UserError naming its sample."""
    try:
        return _decode(jpegs, device)
    except RuntimeError as exc:
        for j, jpeg in enumerate(jpegs):
            try:
                _decode([jpeg], device)
            except RuntimeError as one:
                what = f"sample {int(ids[j])}" if ids is not None else f"image {j} of the batch"
                raise UserError(
                    f"{what} ({jpeg.numel()} bytes) does not decode as a JPEG on {device}: {str(one).splitlines()[-1]}"
                ) from exc
        raise


def _decode(jpegs: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """torchvision's decode_jpeg on a list (one nvJPEG batch on CUDA), its deprecation warning silenced.

    torchvision is imported here, not at the top: importing it costs each rank about two seconds of CPU
    at start-up (it pulls in torch._dynamo), and a run that decodes on the CPU never calls this.
    """
    from torchvision.io import ImageReadMode, decode_jpeg

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="torchvision")
        images: list[torch.Tensor] = decode_jpeg(jpegs, mode=ImageReadMode.RGB, device=device)
    return images


def resize_crop(image: torch.Tensor, box: Sequence[int], size: int) -> torch.Tensor:
    """The box of a uint8 (3, H, W) image as float, resized (bilinear, antialiased) to (3, size, size)."""
    top, left, h, w = box
    region = image[:, top : top + h, left : left + w].unsqueeze(0).float()
    return F.interpolate(region, size=(size, size), mode="bilinear", antialias=True, align_corners=False)[0]


def decode_batch(
    packed: PackedCrops, size: int, device: torch.device | str = "cpu", ids: Sequence[int] | torch.Tensor | None = None
) -> torch.Tensor:
    """Decode, crop, resize, flip and normalise a packed batch: float32 (N, 3, size, size) on ``device``.

    ``ids`` (the batch's sample ids) only name a sample that fails to decode.
    """
    device = torch.device(device)
    out = torch.empty((len(packed.flips), 3, size, size), dtype=torch.float32, device=device)
    if not len(out):
        return out
    images = decode_jpegs(packed.jpegs(), device, ids)
    for dst, image, box in zip(out, images, packed.boxes.tolist(), strict=True):
        dst.copy_(resize_crop(image, box, size))
    flipped = packed.flips.nonzero().view(-1)  # on the host: no device sync
    if len(flipped):
        flipped = flipped.to(device, non_blocking=True)
        out[flipped] = out[flipped].flip(3)
    scale, shift = normalisation(device)
    return out.mul_(scale).add_(shift)
