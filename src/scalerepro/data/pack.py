"""``scalerepro shard``: an ImageNet-layout folder -> shards of RGB JPEG bytes + manifest.

Works on the real ILSVRC-2012 layout and the synthetic laptop dataset alike.
Where jpegtran is installed (Debian: libjpeg-turbo-progs), each sequential
JPEG also gets a restart marker after every MCU row, losslessly, and an
index of its rows, so the loader decodes only the rows a crop needs
(:mod:`scalerepro.data.jpegrows`); the manifest counts them.
Real ImageNet's quirks are normalised: grayscale and CMYK JPEGs are
re-encoded as RGB, a PNG named ``.JPEG`` is detected by its bytes and
re-encoded; a file that does not decode fails with its path, or with
``skip_bad`` is left out and listed in the manifest. Shards are written one
at a time, so memory is bounded by one shard, not the dataset.
"""

from __future__ import annotations

import csv
import hashlib
import io
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PIL import Image, UnidentifiedImageError

from scalerepro.data.jpegrows import add_row_restarts, jpegtran, with_row_index
from scalerepro.data.shards import FORMAT, MANIFEST, ShardWriter, shard_name
from scalerepro.errors import UserError
from scalerepro.io import write_json_atomic
from scalerepro.oversubscription import usable_cpus

IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}
REENCODE_QUALITY = 95
JPEG_MAGIC = b"\xff\xd8\xff"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SOLUTION = "LOC_val_solution.csv"


@dataclass(frozen=True)
class Sample:
    """One source file and its class index."""

    relpath: str
    label: int


class BadImage(Exception):
    """A source file that cannot be used; carries the reason."""


def read_classes(root: Path) -> list[dict[str, Any]]:
    """Class index from ``train/<wnid>`` folders, names from ``LOC_synset_mapping.txt`` if present."""
    train = root / "train"
    if not train.is_dir():
        raise UserError(f"{root} has no train/ folder; expected the ImageNet layout train/<wnid>/*.JPEG")
    wnids = sorted(p.name for p in train.iterdir() if p.is_dir())
    if not wnids:
        raise UserError(f"{train} holds no class folders; expected train/<wnid>/*.JPEG")
    names: dict[str, str] = {}
    mapping = root / "LOC_synset_mapping.txt"
    if mapping.is_file():
        for line in mapping.read_text().splitlines():
            wnid, _, name = line.partition(" ")
            names[wnid] = name.strip()
    return [{"index": i, "wnid": w, "name": names.get(w, w)} for i, w in enumerate(wnids)]


def list_samples(root: Path, split: str, classes: list[dict[str, Any]]) -> list[Sample]:
    """Every image of ``split`` in sorted order; empty class folders and stray classes are errors.

    ``split/<wnid>/*.JPEG`` is read by folder; a flat ``val/*.JPEG`` (as the
    ILSVRC-2012 archive unpacks) takes its labels from ``LOC_val_solution.csv``.
    """
    folder = root / split
    if not folder.is_dir():
        raise UserError(f"{root} has no {split}/ folder; expected {split}/<wnid>/*.JPEG")
    known = {c["wnid"]: c["index"] for c in classes}
    if not any(p.is_dir() for p in folder.iterdir()) and any(p.is_file() for p in folder.iterdir()):
        return _flat_samples(root, folder, known)
    stray = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name not in known)
    if stray:
        raise UserError(f"{folder} has class folders not in train/: {', '.join(stray[:5])}; the splits must share classes")
    samples: list[Sample] = []
    for wnid, label in known.items():
        class_dir = folder / wnid
        files = sorted(p for p in class_dir.iterdir() if not p.is_dir()) if class_dir.is_dir() else []
        images = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
        if not images:
            raise UserError(f"class folder {class_dir} holds no images; remove the class or add its images")
        samples.extend(Sample(str(p.relative_to(root)), label) for p in images)
    return samples


def read_solution(path: Path) -> dict[str, str]:
    """ImageId -> wnid from an ILSVRC ``LOC_val_solution.csv`` (first synset of each PredictionString)."""
    labels: dict[str, str] = {}
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header != ["ImageId", "PredictionString"]:
            raise UserError(f"{path}: expected the header ImageId,PredictionString, found {header}")
        for line, row in enumerate(reader, start=2):
            if len(row) != 2 or not row[1].split():
                raise UserError(f"{path} line {line}: expected ImageId,PredictionString (wnid x y x y ...)")
            labels[row[0]] = row[1].split()[0]
    return labels


def _flat_samples(root: Path, folder: Path, known: dict[str, int]) -> list[Sample]:
    """A flat split folder, labelled by ``LOC_val_solution.csv`` in ``root`` (beside ``train/``)."""
    solution = root / SOLUTION
    if not solution.is_file():
        raise UserError(f"{folder} holds images but no class folders; put {SOLUTION} (ImageId,PredictionString) "
                        f"in {root}, or sort the images into {folder}/<wnid>/")
    labels = read_solution(solution)
    samples = []
    for p in sorted(q for q in folder.iterdir() if q.is_file() and q.suffix.lower() in IMAGE_SUFFIXES):
        wnid = labels.get(p.stem)
        if wnid is None:
            raise UserError(f"{p}: no row for {p.stem} in {solution}; add its label or remove the file")
        if wnid not in known:
            raise UserError(f"{p}: {solution} labels it {wnid}, which is not a class folder of train/")
        samples.append(Sample(str(p.relative_to(root)), known[wnid]))
    if not samples:
        raise UserError(f"{folder} holds no .JPEG/.jpg/.png images")
    return samples


def normalise(data: bytes, path: str) -> tuple[bytes, str]:
    """RGB JPEG bytes for one file and what was done ('as-is', 'grayscale', 'cmyk', 'png', ...)."""
    if data.startswith(PNG_MAGIC):
        kind = "png"
    elif data.startswith(JPEG_MAGIC):
        kind = "jpeg"
    else:
        raise BadImage(f"{path}: not a JPEG or PNG (first bytes {data[:8].hex()})")
    try:
        img = Image.open(io.BytesIO(data))
        mode = img.mode
        if kind == "jpeg":
            img.draft("RGB" if mode == "RGB" else mode, (32, 32))  # DCT-domain decode: fast full-stream check
        img.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise BadImage(f"{path}: cannot be decoded ({exc})") from None
    if kind == "jpeg" and mode == "RGB":
        return data, "as-is"
    full = Image.open(io.BytesIO(data)).convert("RGB")
    out = io.BytesIO()
    full.save(out, format="JPEG", quality=REENCODE_QUALITY)
    label = "png" if kind == "png" else {"L": "grayscale", "CMYK": "cmyk"}.get(mode, f"mode-{mode}")
    return out.getvalue(), label


def assign(samples: list[Sample], shards: int, seed: int) -> list[list[Sample]]:
    """Deterministic shuffle of the samples, cut into ``shards`` contiguous near-equal parts."""
    if shards > len(samples):
        raise UserError(f"{shards} shards requested for {len(samples)} samples; lower shard.train_shards/val_shards")
    order = np.random.default_rng(seed).permutation(len(samples))
    return [[samples[i] for i in part] for part in np.array_split(order, shards)]


def _remove_outputs(out: Path) -> None:
    """Delete the manifest and every shard (complete or partial) in ``out``."""
    (out / MANIFEST).unlink(missing_ok=True)
    for path in out.glob("shard-*.srs*"):
        path.unlink()


class _Packer:
    """Writes shards from samples while hashing the source and tallying conversions and skips."""

    def __init__(self, root: Path, total: int, skip_bad: bool, progress: Callable[[int, int], None] | None) -> None:
        """Start empty tallies."""
        self.root, self.total, self.skip_bad, self.progress = root, total, skip_bad, progress
        self.source = hashlib.sha256()
        self.counts: dict[str, int] = {}
        self.skipped: list[dict[str, str]] = []
        self.done = 0
        self.tool = jpegtran()
        self.row_indexed = 0

    def _read(self, sample: Sample) -> bytes:
        """Raw bytes of a source file, folded into the source hash; progress ticks."""
        self.done += 1
        if self.progress:
            self.progress(self.done, self.total)
        try:
            raw = (self.root / sample.relpath).read_bytes()
        except OSError as exc:  # unreadable, a dangling link, gone since it was listed
            raise BadImage(f"{self.root / sample.relpath}: cannot be read ({exc.strerror})") from None
        self.source.update(f"{sample.relpath}\0{len(raw)}\0{hashlib.sha256(raw).hexdigest()}\n".encode())
        return raw

    def _rows(self, data: bytes) -> bytes | None:
        """``data`` with a restart marker per MCU row and their index, if jpegtran can; else None."""
        restarted = add_row_restarts(data, self.tool) if self.tool else None
        return with_row_index(restarted) if restarted else None

    def write(self, path: Path, part: list[Sample]) -> dict[str, Any]:
        """Write one shard from ``part``; return its manifest entry. jpegtran runs on one thread per CPU."""
        writer = ShardWriter(path)
        try:
            kept = []
            for sample in part:
                try:
                    data, how = normalise(self._read(sample), str(self.root / sample.relpath))
                except BadImage as exc:
                    if not self.skip_bad:
                        raise UserError(f"{exc}; fix or remove the file, or pass --skip-bad to leave it out "
                                        "(listed in the manifest)") from None
                    self.skipped.append({"path": sample.relpath, "reason": str(exc)})
                    continue
                self.counts[how] = self.counts.get(how, 0) + 1
                kept.append((sample, data))
            with ThreadPoolExecutor(max_workers=len(usable_cpus())) as pool:
                for (sample, data), indexed in zip(kept, pool.map(self._rows, [d for _, d in kept])):
                    self.row_indexed += indexed is not None
                    writer.add(indexed or data, sample.label, sample.relpath)
        except BaseException:
            writer.abort()
            raise
        return writer.close()


def shard_split(
    root: Path,
    split: str,
    out: Path,
    shards: int,
    seed: int,
    skip_bad: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Shard one split of ``root`` into ``out``; write and return the manifest."""
    t0 = time.perf_counter()
    classes = read_classes(root)
    samples = list_samples(root, split, classes)
    out.mkdir(parents=True, exist_ok=True)
    _remove_outputs(out)  # an old manifest must never describe new, partial shards
    packer = _Packer(root, len(samples), skip_bad, progress)
    try:
        entries = [packer.write(out / shard_name(k), part) for k, part in enumerate(assign(samples, shards, seed))]
    except BaseException:
        _remove_outputs(out)
        raise
    manifest = {
        "format": FORMAT,
        "dataset": root.name,
        "split": split,
        "source": {"path": str(root), "files": len(samples), "sha256": packer.source.hexdigest()},
        "classes": classes,
        "shards": entries,
        "samples": sum(e["samples"] for e in entries),
        "bytes": sum(e["bytes"] for e in entries),
        "converted": dict(sorted(packer.counts.items())),
        "row_index": {"tool": packer.tool, "images": packer.row_indexed},
        "skipped": packer.skipped,
        "seed": seed,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    write_json_atomic(out / MANIFEST, manifest)
    return manifest
