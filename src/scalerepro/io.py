"""Atomic file writes (a reader, or Snakemake, never sees half a file); reading the project's JSON and YAML files
with errors that name the file, the line and the fix."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import yaml

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


def read_yaml(path: Path | str, what: str) -> Any:
    """A YAML file (``what`` says which, e.g. "platforms"), ``{}`` when it is empty; errors as :func:`load_yaml`."""
    return load_yaml(path, what) or {}


def load_yaml(path: Path | str, what: str) -> Any:
    """The one way the project reads a YAML file (``what`` says which, e.g. "config"): its document, or None when
    it holds none (empty, or only comments). A missing file, a syntax error (with its line and column) and a key
    given twice in one mapping (with both lines: YAML would silently keep the last) are each a UserError naming
    the file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} file {path} not found; it ships as config/{path.name}")
    try:
        text = path.read_text()
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not valid YAML ({exc}); fix the file") from None
    return parse_yaml(text, path)


def parse_yaml(text: str, path: Path | str) -> Any:
    """The YAML document in ``text``, read from ``path`` (named in errors), or None when it holds none; a syntax
    error or a key given twice in one mapping is a UserError naming ``path`` and the lines."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(node, path)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UserError(f"{path}{at}: not valid YAML ({exc.problem or exc.context}); fix the file there") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({exc}); fix the file") from None
    finally:
        loader.dispose()


def _refuse_duplicate_keys(root: yaml.Node, path: Path | str) -> None:
    """A UserError naming the first key given twice in one mapping of the tree under ``root``: its dotted place
    (list items by index) and both lines. Keys are the same when their text and resolved type are."""
    todo: list[tuple[yaml.Node, str]] = [(root, "")]
    seen: set[int] = set()  # an alias points at a node already walked
    while todo:
        node, where = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            todo.extend(reversed([(item, f"{where}{i}.") for i, item in enumerate(node.value)]))
        if not isinstance(node, yaml.MappingNode):
            continue
        first: dict[tuple[str, str], yaml.Node] = {}
        for key, _ in node.value:
            earlier = first.setdefault((key.tag, str(key.value)), key)
            if isinstance(key, yaml.ScalarNode) and earlier is not key:
                raise UserError(
                    f"{path}: key {where}{key.value} is given twice, at lines {earlier.start_mark.line + 1} "
                    f"and {key.start_mark.line + 1}; YAML would keep only the second: delete one"
                )
        todo.extend(reversed([(value, f"{where}{key.value}.") for key, value in node.value]))


def yaml_line(path: Path | str, *keys: str | int) -> int | None:
    """The line (from 1) where the value under ``keys`` (mapping keys, list indices) starts in a YAML file; None if
    the file cannot be read or has no such entry. For error messages: it reads the file again."""
    try:
        node = yaml.compose(Path(path).read_text())
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    for key in keys:
        if isinstance(node, yaml.MappingNode) and isinstance(key, str):
            node = next((v for k, v in node.value if k.value == key), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
            node = node.value[key]
        else:
            return None
        if node is None:
            return None
    return int(node.start_mark.line) + 1 if node is not None else None
