"""``scalerepro shard``: an ImageNet-layout folder -> shards of RGB JPEG bytes + manifest.

Works on the real ILSVRC-2012 layout and the synthetic laptop dataset alike.
Where jpegtran is installed (Debian: libjpeg-turbo-progs), each sequential
JPEG also gets a restart marker after every MCU row, losslessly, and an
index of its rows, so the loader decodes only the rows a crop needs
(:mod:`scalerepro.data.jpegrows`); the manifest counts them.
Real ImageNet's quirks are normalised: grayscale and CMYK JPEGs are
re-encoded as RGB, a PNG named ``.JPEG`` is detected by its bytes and
re-encoded (a 16-bit one scaled to 8 bits). Every stored JPEG is checked
with the loader's decoder at its strictness (:func:`loader_refuses`): an RGB
JPEG that Pillow decodes but the loader would refuse (libjpeg's warnings:
extraneous bytes before a marker, a scan shorter than its header declares)
is re-encoded from Pillow's pixels, as ``repaired``. A file that does not
decode, whose header declares more pixels than ``max_pixels``
(``shard.max_pixels``, checked before decoding, in place of Pillow's own
check), that is not a regular file (a FIFO, socket, device, folder or
broken link named like an image; a link to a regular file is read) or whose
name holds a control character (it would break the shard's newline-separated
names) fails with its path, or with ``skip_bad`` is left out and listed in the
manifest; a class folder with such a name is refused, ``skip_bad`` or not.
Shards are written one
at a time, each from a pool of threads (one per usable CPU, or ``--threads``),
so memory is bounded by one shard, not the dataset. Each finished shard gets a
record (``.shard-NNNNN.srs.done.json``); an interrupted run's retry keeps the
shards whose plan, sources (sizes, modification times) and bytes are
unchanged and packs only the rest. The manifest, written last, says the split
is complete, with the attempt's rate per CPU and what it projects for
ILSVRC-2012 on a 32-CPU node.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import stat
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import simplejpeg
from PIL import Image, UnidentifiedImageError

from scalerepro.data.jpegrows import add_row_restarts, jpegtran, with_row_index
from scalerepro.data.shards import FORMAT, MANIFEST, ShardWriter, sha256_file, shard_name
from scalerepro.errors import UserError
from scalerepro.io import write_json_atomic
from scalerepro.oversubscription import usable_cpus

IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}
REENCODE_QUALITY = 95
JPEG_MAGIC = b"\xff\xd8\xff"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SOLUTION = "LOC_val_solution.csv"
# The projection `scalerepro shard` prints: the ILSVRC-2012 train split (1,281,167 images; its archive
# ILSVRC2012_img_train.tar holds 147,897,477,120 bytes) on one node of 32 CPUs.
IMAGENET_TRAIN = {"images": 1_281_167, "bytes": 147_897_477_120}
PROJECTION_CPUS = 32
PILLOW_MAX_PIXELS = 89_478_485  # Pillow's Image.MAX_IMAGE_PIXELS, shard.max_pixels' default


@dataclass(frozen=True)
class Sample:
    """One source file and its class index."""

    relpath: str
    label: int


class BadImage(Exception):
    """A source file that cannot be used; carries the reason."""


def control_free(name: str) -> bool:
    """Whether ``name`` holds no control character (newline, tab, ...: C0, DEL or C1); a shard stores its
    records' source paths separated by newlines."""
    return not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name)


def read_classes(root: Path) -> list[dict[str, Any]]:
    """Class index from ``train/<wnid>`` folders, names from ``LOC_synset_mapping.txt`` if present."""
    train = root / "train"
    if not train.is_dir():
        raise UserError(f"{root} has no train/ folder; expected the ImageNet layout train/<wnid>/*.JPEG")
    wnids = sorted(p.name for p in train.iterdir() if p.is_dir())
    odd = [w for w in wnids if not control_free(w)]
    if odd:
        raise UserError(
            f"class folder {str(train / odd[0])!r} has a control character (newline, tab, ...) in its name; "
            "rename it (a class folder name must be one plain line)"
        )
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
        raise UserError(
            f"{folder} has class folders not in train/: {', '.join(stray[:5])}; the splits must share classes"
        )
    samples: list[Sample] = []
    for wnid, label in known.items():
        class_dir = folder / wnid
        entries = sorted(class_dir.iterdir()) if class_dir.is_dir() else []
        images = [p for p in entries if p.suffix.lower() in IMAGE_SUFFIXES]  # whatever they are: read, or named
        if not images:
            raise UserError(f"class folder {class_dir} holds no images; remove the class or add its images")
        samples.extend(Sample(str(p.relative_to(root)), label) for p in images)
    return samples


def read_solution(path: Path) -> dict[str, str]:
    """ImageId -> wnid from an ILSVRC ``LOC_val_solution.csv`` (first synset of each PredictionString)."""
    labels: dict[str, str] = {}
    with path.open(newline="") as fh:
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
        raise UserError(
            f"{folder} holds images but no class folders; put {SOLUTION} (ImageId,PredictionString) "
            f"in {root}, or sort the images into {folder}/<wnid>/"
        )
    labels = read_solution(solution)
    samples = []
    for p in sorted(q for q in folder.iterdir() if not q.is_dir() and q.suffix.lower() in IMAGE_SUFFIXES):
        wnid = labels.get(p.stem)
        if wnid is None:
            raise UserError(f"{p}: no row for {p.stem} in {solution}; add its label or remove the file")
        if wnid not in known:
            raise UserError(f"{p}: {solution} labels it {wnid}, which is not a class folder of train/")
        samples.append(Sample(str(p.relative_to(root)), known[wnid]))
    if not samples:
        raise UserError(f"{folder} holds no .JPEG/.jpg/.png images")
    return samples


def loader_refuses(data: bytes) -> str:
    """Why the training loader's decoder refuses JPEG ``data``, or '' if it decodes it.

    The loader decodes with ``simplejpeg`` (:func:`scalerepro.data.augment.decode_scaled`), which is strict:
    libjpeg's warnings, which Pillow lets pass, are errors. They come from the entropy-coded data and the markers
    around it, read whole at every DCT scale, so the 1/8 scale used here (the fastest) finds what a full-size
    decode would."""
    try:
        simplejpeg.decode_jpeg(data, colorspace="RGB", min_factor=8)
    except Exception as exc:  # the loader takes any of the decoder's errors as a damaged record; so does this
        return f"{type(exc).__name__}: {exc}"
    return ""


def normalise(data: bytes, path: str, max_pixels: int = PILLOW_MAX_PIXELS) -> tuple[bytes, str]:
    """RGB JPEG bytes for one file, which the loader's decoder accepts, and what was done ('as-is', 'grayscale',
    'cmyk', 'png', 'repaired', ...); BadImage if it does not decode or its header declares more than
    ``max_pixels`` (checked before decoding).

    An RGB JPEG the loader's decoder accepts is kept byte for byte. One it refuses but Pillow decodes (a
    libjpeg warning: extraneous bytes before a marker, a scan shorter than the header's size, whose missing
    rows libjpeg fills in grey) is re-encoded from Pillow's pixels, as any other conversion is: the run then
    trains on what a Pillow-based loader would have shown it, where refusing the file would lose an image the
    source's own tools open (and stop the whole ``shard`` without ``--skip-bad``)."""
    kind = _kind(data, path)
    mode = _header_mode(data, path, max_pixels)
    if kind == "jpeg" and mode == "RGB":
        if not loader_refuses(data):
            return data, "as-is"
        label = "repaired"
    else:
        label = "png" if kind == "png" else {"L": "grayscale", "CMYK": "cmyk"}.get(mode, f"mode-{mode}")
    out = _reencode(data, path)
    if why := loader_refuses(out):
        raise BadImage(f"{path}: re-encoded as RGB, it still does not decode with the loader's decoder ({why})")
    return out, label


def _kind(data: bytes, path: str) -> str:
    """'png' or 'jpeg' by the file's first bytes (not its name); BadImage for anything else."""
    if data.startswith(PNG_MAGIC):
        return "png"
    if data.startswith(JPEG_MAGIC):
        return "jpeg"
    raise BadImage(f"{path}: not a JPEG or PNG (first bytes {data[:8].hex()})")


def _header_mode(data: bytes, path: str, max_pixels: int) -> str:
    """The image's mode from its header, after checking its declared size against ``max_pixels`` (no pixel is
    decoded: the loader's decoder or the re-encoding decodes it next)."""
    try:
        img = Image.open(io.BytesIO(data))
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise BadImage(f"{path}: cannot be decoded ({exc})") from None
    width, height = img.size
    if width * height > max_pixels:
        raise BadImage(
            f"{path}: {width} x {height} pixels ({width * height:,}) is above shard.max_pixels "
            f"({max_pixels:,}); raise shard.max_pixels if the image is genuine"
        )
    return str(img.mode)


def _reencode(data: bytes, path: str) -> bytes:
    """The image decoded by Pillow, as RGB, re-encoded as JPEG (quality :data:`REENCODE_QUALITY`)."""
    try:
        rgb = _to_rgb(Image.open(io.BytesIO(data)))
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise BadImage(f"{path}: cannot be decoded ({exc})") from None
    out = io.BytesIO()
    rgb.save(out, format="JPEG", quality=REENCODE_QUALITY)
    return out.getvalue()


def _to_rgb(img: Image.Image) -> Image.Image:
    """``img`` as 8-bit RGB. A 16-bit grayscale PNG (Pillow's mode 'I;16', 'I;16B', or 'I') is scaled to 8 bits
    (v / 257, rounded: 65535 -> 255), where Pillow's own conversion clips every level above 255 to white."""
    if img.mode.startswith("I"):
        levels = np.clip(np.asarray(img, dtype=np.int64), 0, 65535)
        return Image.fromarray(((levels + 128) // 257).astype(np.uint8), mode="L").convert("RGB")
    return img.convert("RGB")


def assign(samples: list[Sample], shards: int, seed: int) -> list[list[Sample]]:
    """Deterministic shuffle of the samples, cut into ``shards`` contiguous near-equal parts."""
    if shards > len(samples):
        raise UserError(f"{shards} shards requested for {len(samples)} samples; lower shard.train_shards/val_shards")
    order = np.random.default_rng(seed).permutation(len(samples))
    return [[samples[i] for i in part] for part in np.array_split(order, shards)]


def _remove_partials(out: Path, keep: set[str]) -> None:
    """Delete the manifest, unfinished shards, and shards and records not named in ``keep`` (another plan's)."""
    (out / MANIFEST).unlink(missing_ok=True)
    for path in out.glob("shard-*.srs.partial"):
        path.unlink()
    for path in out.glob("shard-*.srs"):
        if path.name not in keep:
            path.unlink()
            _done_path(path).unlink(missing_ok=True)


def _done_path(shard: Path) -> Path:
    """The record of a finished shard, beside it: ``.<file>.done.json`` (what a retry needs to keep it)."""
    return shard.with_name(f".{shard.name}.done.json")


def _plan_digest(
    part: list[Sample], k: int, shards: int, seed: int, skip_bad: bool, tool: str | None, max_pixels: int
) -> str:
    """What shard ``k`` is to hold and how it is packed: its samples, the assignment and the packing options
    (the pixel limit only where it is not Pillow's default, so shards packed before it was a setting are kept)."""
    limit = "" if max_pixels == PILLOW_MAX_PIXELS else f"\0{max_pixels}"
    h = hashlib.sha256(f"{FORMAT}\0{k}/{shards}\0{seed}\0{skip_bad}\0{tool is not None}{limit}\n".encode())
    for s in part:
        h.update(f"{s.relpath}\0{s.label}\n".encode())
    return h.hexdigest()


def _stat_digest(root: Path, part: list[Sample]) -> str:
    """The sources' sizes and modification times (a changed source makes a finished shard stale)."""
    h = hashlib.sha256()
    for s in part:
        try:
            st = (root / s.relpath).stat()
            h.update(f"{s.relpath}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        except OSError:
            h.update(f"{s.relpath}\0missing\n".encode())
    return h.hexdigest()


@dataclass(frozen=True)
class Packed:
    """One source file made ready for a shard (or why it was left out)."""

    sample: Sample
    line: str  # its line of the source hash: path, size, sha256
    size: int = 0  # its bytes as read
    data: bytes = b""
    how: str = ""
    indexed: bool = False
    bad: str = ""


FILE_KINDS = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
}


def read_regular(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file (or a link to one); else BadImage naming what it is or why it
    cannot be read (a broken link: where it points). Nothing else is read as a file (a FIFO would block forever,
    a device might never end); the open does not block and is checked again, in case the name was replaced after
    the first look."""
    try:
        _check_regular(path, path.stat().st_mode)  # follows links
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            _check_regular(path, os.fstat(fd).st_mode)
            return fh.read()
    except OSError as exc:
        link = f"; it is a symbolic link to {path.readlink()}" if path.is_symlink() else ""
        raise BadImage(f"{path}: cannot be read ({exc.strerror}){link}") from None


def _check_regular(path: Path, mode: int) -> None:
    """BadImage naming what ``path`` is unless ``mode`` is a regular file's."""
    if not stat.S_ISREG(mode):
        what = FILE_KINDS.get(stat.S_IFMT(mode), "not a file")
        raise BadImage(f"{path}: {what}, not a regular file (only regular files, or links to them, are read)")


class _Packer:
    """Packs shards from samples on a pool of threads (reading, checking, re-encoding and jpegtran run in parallel;
    Pillow, hashlib and the jpegtran process release the GIL), tallying the source hash, conversions and skips.
    A finished shard's record lets a retry keep it (:meth:`kept`)."""

    def __init__(
        self,
        root: Path,
        total: int,
        skip_bad: bool,
        threads: int,
        progress: Callable[[int, int], None] | None,
        row_index: bool = True,
        max_pixels: int = PILLOW_MAX_PIXELS,
    ) -> None:
        """Start empty tallies; index JPEG rows with jpegtran where it is installed, unless ``row_index`` is off."""
        self.root, self.total, self.skip_bad, self.threads, self.progress = root, total, skip_bad, threads, progress
        self.max_pixels = max_pixels
        self.source = hashlib.sha256()
        self.counts: dict[str, int] = {}
        self.skipped: list[dict[str, str]] = []
        self.done = 0
        self.tool = jpegtran() if row_index else None
        self.row_indexed = 0
        self.kept_shards = 0
        self.packed_images = 0
        self.packed_bytes = 0
        self.packing_s = 0.0

    def _prepare(self, sample: Sample) -> Packed:
        """Read, hash, check and normalise one source, then index its rows (jpegtran) where it can."""
        path = self.root / sample.relpath
        if not control_free(sample.relpath):  # the shard's names are one a line
            bad = f"{str(path)!r}: its name holds a control character (newline, tab, ...); rename it"
            return Packed(sample, "", bad=bad)
        try:
            raw = read_regular(path)
        except BadImage as exc:
            return Packed(sample, "", bad=str(exc))
        line = f"{sample.relpath}\0{len(raw)}\0{hashlib.sha256(raw).hexdigest()}\n"
        try:
            data, how = normalise(raw, str(path), self.max_pixels)
        except BadImage as exc:
            return Packed(sample, line, len(raw), bad=str(exc))
        restarted = add_row_restarts(data, self.tool) if self.tool else None
        indexed = with_row_index(restarted) if restarted else None
        return Packed(sample, line, len(raw), indexed or data, how, indexed is not None)

    def _tick(self) -> None:
        """One more source done: progress."""
        self.done += 1
        if self.progress:
            self.progress(self.done, self.total)

    def write(self, pool: ThreadPoolExecutor, path: Path, part: list[Sample], plan: str) -> dict[str, Any]:
        """Write one shard from ``part`` (in order, prepared on ``pool``) and its record; return its manifest entry."""
        t0 = time.perf_counter()
        writer = ShardWriter(path)
        lines: list[str] = []
        counts: dict[str, int] = {}
        skipped: list[dict[str, str]] = []
        indexed, raw_bytes = 0, 0
        try:
            for item in pool.map(self._prepare, part):
                self._tick()
                lines.append(item.line)
                raw_bytes += item.size
                if item.bad:
                    if not self.skip_bad:
                        raise UserError(
                            f"{item.bad}; fix or remove the file, or pass --skip-bad to leave it out "
                            "(listed in the manifest)"
                        )
                    skipped.append({"path": item.sample.relpath, "reason": item.bad})
                    continue
                counts[item.how] = counts.get(item.how, 0) + 1
                indexed += item.indexed
                writer.add(item.data, item.sample.label, item.sample.relpath)
        except BaseException:
            writer.abort()
            raise
        entry = writer.close()
        done = {
            "plan": plan,
            "sources": _stat_digest(self.root, part),
            "entry": entry,
            "lines": "".join(lines),
            "converted": counts,
            "skipped": skipped,
            "row_indexed": indexed,
        }
        write_json_atomic(_done_path(path), done)
        self.packed_images += len(part)
        self.packed_bytes += raw_bytes
        self.packing_s += time.perf_counter() - t0
        return self._fold(done)

    def kept(self, path: Path, part: list[Sample], plan: str) -> dict[str, Any] | None:
        """The manifest entry of shard ``path`` if an earlier attempt finished it for this same plan and its sources
        and bytes are unchanged (sizes and modification times; its sha256); else None."""
        try:
            done = json.loads(_done_path(path).read_text())
        except (OSError, ValueError):
            return None
        entry = done.get("entry") or {}
        if (
            done.get("plan") != plan
            or done.get("sources") != _stat_digest(self.root, part)
            or not path.is_file()
            or path.stat().st_size != entry.get("bytes")
            or sha256_file(path) != entry.get("sha256")
        ):
            return None
        for _ in part:
            self._tick()
        self.kept_shards += 1
        return self._fold(done)

    def _fold(self, done: dict[str, Any]) -> dict[str, Any]:
        """Add a finished shard's tallies to the split's (in shard order, so the source hash is the same as one
        attempt's); return its manifest entry."""
        self.source.update(done["lines"].encode())
        for how, n in done["converted"].items():
            self.counts[how] = self.counts.get(how, 0) + n
        self.skipped += done["skipped"]
        self.row_indexed += done["row_indexed"]
        return dict(done["entry"])

    def rate(self) -> dict[str, Any]:
        """Images and source bytes packed per second per thread in this attempt, and what that projects for the
        ILSVRC-2012 train split on a node of :data:`PROJECTION_CPUS` CPUs."""
        if not self.packed_images or self.packing_s <= 0:
            return {"threads": self.threads, "images": self.packed_images}
        per_cpu = self.packed_images / self.packing_s / self.threads
        bytes_per_cpu = self.packed_bytes / self.packing_s / self.threads
        by_images = IMAGENET_TRAIN["images"] / (per_cpu * PROJECTION_CPUS)
        by_bytes = IMAGENET_TRAIN["bytes"] / (bytes_per_cpu * PROJECTION_CPUS)
        return {
            "threads": self.threads,
            "images": self.packed_images,
            "bytes": self.packed_bytes,
            "seconds": round(self.packing_s, 3),
            "images_per_s_per_cpu": round(per_cpu, 2),
            "mb_per_s_per_cpu": round(bytes_per_cpu / 1e6, 3),
            "projection": {
                "images": IMAGENET_TRAIN["images"],
                "bytes": IMAGENET_TRAIN["bytes"],
                "cpus": PROJECTION_CPUS,
                "minutes_by_images": round(by_images / 60, 1),
                "minutes_by_bytes": round(by_bytes / 60, 1),
                "minutes": round(max(by_images, by_bytes) / 60, 1),
            },
        }


def shard_split(
    root: Path,
    split: str,
    out: Path,
    shards: int,
    seed: int,
    skip_bad: bool = False,
    progress: Callable[[int, int], None] | None = None,
    threads: int | None = None,
    row_index: bool = True,
    max_pixels: int = PILLOW_MAX_PIXELS,
) -> dict[str, Any]:
    """Shard one split of ``root`` into ``out`` on ``threads`` threads (default: the usable CPUs); write and
    return the manifest. Shards an earlier, interrupted attempt finished for the same plan are kept.
    ``row_index=False`` leaves the JPEGs as they are even where jpegtran is installed; an image above
    ``max_pixels`` is a bad file."""
    t0 = time.perf_counter()
    classes = read_classes(root)
    samples = list_samples(root, split, classes)
    out.mkdir(parents=True, exist_ok=True)
    parts = assign(samples, shards, seed)
    _remove_partials(out, {shard_name(k) for k in range(len(parts))})  # a manifest must never describe partial work
    packer = _Packer(root, len(samples), skip_bad, threads or len(usable_cpus()), progress, row_index, max_pixels)
    entries = []
    with ThreadPoolExecutor(max_workers=packer.threads) as pool, _own_pixel_limit():
        for k, part in enumerate(parts):
            path, plan = out / shard_name(k), _plan_digest(part, k, shards, seed, skip_bad, packer.tool, max_pixels)
            entries.append(packer.kept(path, part, plan) or packer.write(pool, path, part, plan))
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
        "kept_from_earlier_attempt": packer.kept_shards,
        "rate": packer.rate(),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    write_json_atomic(out / MANIFEST, manifest)
    return manifest


@contextmanager
def _own_pixel_limit() -> Iterator[None]:
    """Pillow's decompression-bomb check off while sharding (restored after): :func:`normalise` applies
    ``shard.max_pixels`` itself, so the limit is the configured one and a refusal names the file."""
    before = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = None
    try:
        yield
    finally:
        Image.MAX_IMAGE_PIXELS = before


def describe_rate(rate: dict[str, Any]) -> str:
    """The attempt's packing rate per CPU and its projection for ILSVRC-2012, for people."""
    if "projection" not in rate:
        return "rate: nothing packed in this attempt (every shard kept from an earlier one)"
    p = rate["projection"]
    return (
        f"rate: {rate['images_per_s_per_cpu']:.1f} images/s and {rate['mb_per_s_per_cpu']:.2f} MB/s of source "
        f"per CPU ({rate['images']} images on {rate['threads']} threads in {rate['seconds']:.1f} s); projected for "
        f"ILSVRC-2012 train ({p['images']:,} images, {p['bytes'] / 1e9:.0f} GB) on {p['cpus']} CPUs: "
        f"{p['minutes_by_images']:.0f} min by image count, {p['minutes_by_bytes']:.0f} min by bytes "
        f"(set cluster.shard_runtime_min above the larger)"
    )
