"""Atomic file writes: a reader (or Snakemake) never sees half a file."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

from scalerepro.errors import UserError

FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def write_bytes_atomic(path: Path | str, data: bytes) -> None:
    """Write ``data`` via a temporary name in the same folder, fsync, then rename.

    A full disk (or quota, or file-size limit) raises UserError and leaves ``path`` as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    except OSError as exc:
        if exc.errno not in FULL:
            raise
        kept = "the previous version is intact" if path.exists() else "nothing was written"
        raise UserError(
            f"could not write {path} ({len(data):,} bytes): {exc.strerror}; {kept}. "
            f"Free space in {path.parent} (or raise the quota) and rerun"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)


def write_json_atomic(path: Path | str, obj: Any) -> None:
    """Write ``obj`` as indented, key-sorted JSON, atomically."""
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def write_text_atomic(path: Path | str, text: str) -> None:
    """Write text atomically."""
    write_bytes_atomic(path, text.encode())


def read_json(path: str | Path) -> dict[str, Any]:
    """A JSON object from a file, with an error naming the file and the rule that writes it."""
    try:
        record: dict[str, Any] = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"cannot read {path}: {exc}; re-run the rule that writes it") from None
    return record
