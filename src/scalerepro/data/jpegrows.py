"""Decoding only the MCU rows a crop needs: JPEGs with one restart interval per MCU row and a row index.

``scalerepro shard`` adds a restart marker after every MCU row losslessly
(``jpegtran -restart 1``, Debian's libjpeg-turbo-progs: the DCT
coefficients, hence the pixels, are unchanged; +0.36% bytes on the loader
bench's 2,000 JPEGs; a progressive JPEG comes out sequential) and stores
where each row's interval starts in an APP15 segment right after SOI,
which every decoder skips. Each interval decodes on its own, so the rows of
a crop, plus one MCU row above and below for the chroma upsampling filter,
are cut out as a smaller JPEG (the same tables, the SOF height cut, the
restart markers renumbered) that decodes to exactly those rows of the whole
image: rows below the crop are never read, rows above it never
entropy-decoded. The index is checked against the markers it points at; a
JPEG without a valid one is decoded whole.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

RST_MARKERS = tuple(bytes((0xFF, 0xD0 + k)) for k in range(8))
SEQUENTIAL_HUFFMAN = (0xC0, 0xC1)
OTHER_SOF = {0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
JPEGTRAN = ("-restart", "1", "-copy", "all")
INDEX_TAG = b"scalerepro-rows\0"


@dataclass(frozen=True)
class Rows:
    """Where each MCU row's entropy-coded interval starts in a JPEG, and the frame's geometry."""

    sof: int
    scan: int
    starts: tuple[int, ...]
    end: int
    height: int
    mcu_height: int


def _segments(data: bytes) -> Iterator[tuple[int, int, int]]:
    """(marker, offset, length) of each header segment up to and including the first SOS."""
    i = 2
    while i + 4 <= len(data) and data[i] == 0xFF:
        marker, length = data[i + 1], int.from_bytes(data[i + 2 : i + 4], "big")
        yield marker, i, length
        if marker == 0xDA:
            return
        i += 2 + length


def _frame(data: bytes) -> tuple[int, int, int, int] | None:
    """(SOF offset, scan start, height, MCU height) of a one-scan sequential JPEG, one restart per MCU row.

    None for any other JPEG.
    """
    sof = scan = None
    restart = 0
    for marker, at, length in _segments(data):
        if marker in OTHER_SOF:
            return None
        if marker in SEQUENTIAL_HUFFMAN:
            sof = at
        elif marker == 0xDD:
            restart = int.from_bytes(data[at + 4 : at + 6], "big")
        elif marker == 0xDA:
            scan = at + 2 + length
            if sof is None or data[at + 4] != data[sof + 9]:  # the scan must hold every component
                return None
    if scan is None or sof is None:
        return None
    height, width = int.from_bytes(data[sof + 5 : sof + 7], "big"), int.from_bytes(data[sof + 7 : sof + 9], "big")
    factors = [data[sof + 11 + 3 * k] for k in range(data[sof + 9])]
    mcu_w, mcu_h = 8 * max(f >> 4 for f in factors), 8 * max(f & 15 for f in factors)
    if height == 0 or restart != math.ceil(width / mcu_w):
        return None
    return sof, scan, height, mcu_h


def scan_rows(data: bytes) -> Rows | None:
    """The MCU-row layout found by scanning the entropy-coded data for restart markers (for shard time)."""
    frame = _frame(data)
    end = data.rfind(b"\xff\xd9")
    if frame is None or end < frame[1]:
        return None
    sof, scan, height, mcu_h = frame
    body = np.frombuffer(data, dtype=np.uint8, count=end - scan, offset=scan)
    ff = np.flatnonzero(body[:-1] == 0xFF)  # 0xFF in entropy-coded data is a marker or stuffing (0xFF00)
    after = body[ff + 1]
    restarts = ff[(after & 0xF8) == 0xD0]
    if (after == 0xDA).any() or len(restarts) != math.ceil(height / mcu_h) - 1:  # a second scan, or not one per row
        return None
    return Rows(sof, scan, (scan, *(scan + restarts + 2).tolist()), end, height, mcu_h)


def with_row_index(data: bytes) -> bytes | None:
    """``data`` (restart marker after every MCU row) with its row offsets in an APP15 segment after SOI; else None."""
    rows = scan_rows(data)
    if rows is None:
        return None
    size = 2 + 2 + len(INDEX_TAG) + 4 * len(rows.starts)
    offsets = (np.asarray(rows.starts, dtype=np.int64) + size).astype(">u4")
    segment = b"\xff\xef" + (size - 2).to_bytes(2, "big") + INDEX_TAG + offsets.tobytes()
    return data[:2] + segment + data[2:]


def has_row_index(data: memoryview | bytes) -> bool:
    """Whether ``data`` starts with the APP15 row index segment (cheap: no copy, no parse)."""
    return bytes(data[2:4]) == b"\xff\xef" and bytes(data[6 : 6 + len(INDEX_TAG)]) == INDEX_TAG


def row_index(data: bytes) -> Rows | None:
    """The MCU-row layout from a JPEG's APP15 row index (written at shard time), checked against its markers.

    None without a valid index.
    """
    if not has_row_index(data):
        return None
    frame = _frame(data)
    if frame is None:
        return None
    sof, scan, height, mcu_h = frame
    count = (int.from_bytes(data[4:6], "big") - 2 - len(INDEX_TAG)) // 4
    at = 6 + len(INDEX_TAG)
    starts = tuple(np.frombuffer(data, dtype=">u4", count=count, offset=at).tolist())
    end = data.rfind(b"\xff\xd9")
    if count != math.ceil(height / mcu_h) or starts[0] != scan or end < starts[-1]:
        return None
    if any(data[s - 2 : s] != RST_MARKERS[k % 8] for k, s in enumerate(starts[1:])):
        return None
    return Rows(sof, scan, starts, end, height, mcu_h)


def rows_jpeg(data: bytes, rows: Rows, first: int, stop: int) -> bytes:
    """A JPEG of MCU rows [first, stop) of ``data``, which decodes to exactly those rows of the whole image."""
    height = min(rows.height, stop * rows.mcu_height) - first * rows.mcu_height
    parts = [data[: rows.sof + 5], height.to_bytes(2, "big"), data[rows.sof + 7 : rows.scan]]
    for k, r in enumerate(range(first, stop)):
        if k:
            parts.append(RST_MARKERS[(k - 1) % 8])
        parts.append(data[rows.starts[r] : rows.starts[r + 1] - 2 if r + 1 < len(rows.starts) else rows.end])
    parts.append(b"\xff\xd9")
    return b"".join(parts)


def crop_rows(rows: Rows, top: int, bottom: int) -> tuple[int, int]:
    """MCU rows [first, stop) covering pixel rows [top, bottom), with one row of margin each side."""
    return max(0, top // rows.mcu_height - 1), min(len(rows.starts), math.ceil(bottom / rows.mcu_height) + 1)


def jpegtran() -> str | None:
    """Path of jpegtran (Debian: libjpeg-turbo-progs), or None."""
    return shutil.which("jpegtran")


def add_row_restarts(data: bytes, tool: str) -> bytes | None:
    """``data`` rewritten losslessly with a restart marker after every MCU row; None if jpegtran refuses it."""
    proc = subprocess.run([tool, *JPEGTRAN], input=data, capture_output=True)
    return proc.stdout if proc.returncode == 0 and proc.stdout else None
