"""Deterministic synthetic ImageNet-layout dataset for the laptop profile.

Ten learnable classes (five shapes drawn on a noisy background, five
full-frame textures) with random size, position, scale, colours and noise.
Every image is drawn with integer arithmetic only (PIL rasterisation and
integer noise from NumPy's PCG64), and PNG files are written uncompressed,
so the bytes depend on the seed and the pinned Pillow build alone, not on
the CPU's SIMD paths. Like real ILSVRC-2012 it holds a few grayscale JPEGs,
a few CMYK JPEGs and a few PNG files named ``.JPEG``.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from scalerepro.errors import UserError
from scalerepro.io import write_bytes_atomic

GENERATOR_VERSION = 1

# (wnid, human-readable name); wnids are outside ImageNet's n0*-n1* range.
CLASSES: tuple[tuple[str, str], ...] = (
    ("n90000001", "disk"),
    ("n90000002", "square"),
    ("n90000003", "triangle"),
    ("n90000004", "plus sign"),
    ("n90000005", "ring"),
    ("n90000006", "horizontal stripes"),
    ("n90000007", "vertical stripes"),
    ("n90000008", "checkerboard"),
    ("n90000009", "diagonal stripes"),
    ("n90000010", "polka dots"),
)

QUIRKS = ("grayscale", "cmyk", "png")
SPLITS = {"train": 0, "val": 1}


@dataclass(frozen=True)
class SynthSpec:
    """What to generate: counts, sizes, quirk counts and the seed."""

    name: str = "synth10"
    seed: int = 0
    classes: int = 10
    train_per_class: int = 120
    val_per_class: int = 100
    min_size: int = 64
    max_size: int = 500
    quirks_per_kind: int = 3
    quality: int | None = None  # JPEG quality of every image; None: drawn per image from 75-95

    def __post_init__(self) -> None:
        """Check ranges; errors name the field and the allowed values."""
        if not 1 <= self.classes <= len(CLASSES):
            raise UserError(f"dataset.classes={self.classes}: must be between 1 and {len(CLASSES)}")
        if self.train_per_class < 1 or self.val_per_class < 1:
            raise UserError("dataset.train_per_class and dataset.val_per_class must be >= 1")
        if not 16 <= self.min_size <= self.max_size:
            raise UserError(
                f"dataset.min_size={self.min_size}, max_size={self.max_size}: need 16 <= min_size <= max_size"
            )
        if self.quirks_per_kind < 0:
            raise UserError(f"dataset.quirks_per_kind={self.quirks_per_kind}: must be >= 0")
        if self.quality is not None and not 1 <= self.quality <= 100:
            raise UserError(f"dataset quality={self.quality}: must be between 1 and 100")
        if not self.name or "/" in self.name:
            raise UserError(f"dataset.name={self.name!r}: must be a non-empty folder name")


def _rng(spec: SynthSpec, split: str, cls: int, index: int) -> np.random.Generator:
    """Independent generator per image, so any image can be drawn alone."""
    return np.random.default_rng([spec.seed, SPLITS[split], cls, index, GENERATOR_VERSION])


def _colour(rng: np.random.Generator) -> tuple[int, int, int]:
    """A random RGB colour."""
    r, g, b = (int(c) for c in rng.integers(0, 256, size=3))
    return r, g, b


def _contrasting(rng: np.random.Generator, other: tuple[int, int, int]) -> tuple[int, int, int]:
    """A random colour at least 120 away (L1 over channels / 3) from ``other``."""
    while True:
        c = _colour(rng)
        if sum(abs(a - b) for a, b in zip(c, other, strict=True)) >= 360:
            return c


def _draw_shape(
    draw: ImageDraw.ImageDraw,
    kind: int,
    box: tuple[int, int, int, int],
    fg: tuple[int, int, int],
    bg: tuple[int, int, int],
) -> None:
    """Draw shape ``kind`` (0..4) filling ``box``."""
    x0, y0, x1, y1 = box
    w = x1 - x0
    if kind == 0:
        draw.ellipse(box, fill=fg)
    elif kind == 1:
        draw.rectangle(box, fill=fg)
    elif kind == 2:
        draw.polygon([(x0 + w // 2, y0), (x1, y1), (x0, y1)], fill=fg)
    elif kind == 3:
        t = max(2, w // 4)
        cx, cy = x0 + w // 2, y0 + w // 2
        draw.rectangle((cx - t // 2, y0, cx + t // 2, y1), fill=fg)
        draw.rectangle((x0, cy - t // 2, x1, cy + t // 2), fill=fg)
    else:
        t = max(2, w // 5)
        draw.ellipse(box, fill=fg)
        draw.ellipse((x0 + t, y0 + t, x1 - t, y1 - t), fill=bg)


def _draw_texture(
    draw: ImageDraw.ImageDraw, kind: int, size: tuple[int, int], rng: np.random.Generator, fg: tuple[int, int, int]
) -> None:
    """Draw full-frame texture ``kind`` (5..9) over an image of ``size``."""
    w, h = size
    period = int(rng.integers(max(8, min(w, h) // 8), max(9, min(w, h) // 3)))
    half = max(2, period // 2)
    if kind == 5:
        for y in range(int(rng.integers(0, period)) - period, h, period):
            draw.rectangle((0, y, w, y + half - 1), fill=fg)
    elif kind == 6:
        for x in range(int(rng.integers(0, period)) - period, w, period):
            draw.rectangle((x, 0, x + half - 1, h), fill=fg)
    elif kind == 7:
        for j, y in enumerate(range(0, h, half)):
            for i, x in enumerate(range(0, w, half)):
                if (i + j) % 2 == 0:
                    draw.rectangle((x, y, x + half - 1, y + half - 1), fill=fg)
    elif kind == 8:
        sign = 1 if rng.integers(0, 2) else -1
        for c in range(-h - period, w + h + period, period):
            top, bottom = (c, 0), (c + sign * h, h)
            draw.line([top, bottom], fill=fg, width=half)
    else:
        r = max(2, period // 4)
        for j, y in enumerate(range(period // 2, h + period, period)):
            offset = (period // 2) * (j % 2)
            for x in range(period // 2 + offset - period, w + period, period):
                draw.ellipse((x - r, y - r, x + r, y + r), fill=fg)


def render(spec: SynthSpec, split: str, cls: int, index: int) -> Image.Image:
    """Render one RGB image of class ``cls``; deterministic in its arguments."""
    rng = _rng(spec, split, cls, index)
    long_side = int(rng.integers(spec.min_size, spec.max_size + 1))
    short_side = max(spec.min_size, long_side * int(rng.integers(60, 101)) // 100)
    size = (long_side, short_side) if rng.integers(0, 2) else (short_side, long_side)
    bg = _colour(rng)
    fg = _contrasting(rng, bg)
    img = Image.new("RGB", size, bg)
    draw = ImageDraw.Draw(img)
    if cls < 5:
        side = min(size) * int(rng.integers(35, 81)) // 100
        x0 = int(rng.integers(0, size[0] - side + 1))
        y0 = int(rng.integers(0, size[1] - side + 1))
        _draw_shape(draw, cls, (x0, y0, x0 + side - 1, y0 + side - 1), fg, bg)
    else:
        _draw_texture(draw, cls, size, rng, fg)
    amplitude = int(rng.integers(4, 40))
    noise = rng.integers(-amplitude, amplitude + 1, size=(size[1], size[0], 3), dtype=np.int16)
    pixels = np.clip(np.asarray(img, dtype=np.int16) + noise, 0, 255).astype(np.uint8)
    return Image.fromarray(pixels, "RGB")


def quirk_of(spec: SynthSpec, split: str, cls: int, index: int) -> str | None:
    """Which quirk (if any) the image carries: the first few train images of the first classes."""
    if split != "train" or spec.quirks_per_kind == 0:
        return None
    kind = (index * spec.classes + cls) // spec.quirks_per_kind  # spread over classes
    return QUIRKS[kind] if kind < len(QUIRKS) else None


def encode(img: Image.Image, quirk: str | None, quality: int) -> bytes:
    """Encode as the quirk says: RGB/L/CMYK JPEG, or an uncompressed PNG."""
    buf = io.BytesIO()
    if quirk == "png":
        img.save(buf, format="PNG", compress_level=0)
    elif quirk == "grayscale":
        img.convert("L").save(buf, format="JPEG", quality=quality)
    elif quirk == "cmyk":
        img.convert("CMYK").save(buf, format="JPEG", quality=quality)
    else:
        img.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def file_name(spec: SynthSpec, split: str, cls: int, index: int) -> str:
    """ImageNet-style file name (train: ``<wnid>_<i>.JPEG``; val: ``ILSVRC2012_val_<n>.JPEG``)."""
    wnid = CLASSES[cls][0]
    if split == "train":
        return f"{wnid}_{index}.JPEG"
    return f"ILSVRC2012_val_{cls * spec.val_per_class + index + 1:08d}.JPEG"


def _items(spec: SynthSpec) -> Iterator[tuple[str, int, int]]:
    """Every (split, class, index) in write order."""
    for split, per_class in (("train", spec.train_per_class), ("val", spec.val_per_class)):
        for cls in range(spec.classes):
            for index in range(per_class):
                yield split, cls, index


def generate(spec: SynthSpec, root: Path, progress: Callable[[int, int], None] | None = None) -> Path:
    """Write the dataset to ``root/<name>`` (replacing it whole) and return that folder."""
    final = root / spec.name
    work = root / f".{spec.name}.partial"
    if work.exists():
        shutil.rmtree(work)
    total = spec.classes * (spec.train_per_class + spec.val_per_class)
    for done, (split, cls, index) in enumerate(_items(spec), start=1):
        folder = work / split / CLASSES[cls][0]
        folder.mkdir(parents=True, exist_ok=True)
        quality = spec.quality or int(_rng(spec, split, cls, index + 1_000_000).integers(75, 96))
        data = encode(render(spec, split, cls, index), quirk_of(spec, split, cls, index), quality)
        (folder / file_name(spec, split, cls, index)).write_bytes(data)
        if progress:
            progress(done, total)
    mapping = "".join(f"{wnid} {name}\n" for wnid, name in CLASSES[: spec.classes])
    write_bytes_atomic(work / "LOC_synset_mapping.txt", mapping.encode())
    # options left unset are omitted, so datasets made before an option existed keep their bytes
    meta = {"generator_version": GENERATOR_VERSION, "spec": {k: v for k, v in asdict(spec).items() if v is not None}}
    write_bytes_atomic(work / "dataset.json", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode())
    if final.exists():
        shutil.rmtree(final)
    work.replace(final)
    return final
