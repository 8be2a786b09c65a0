"""What the commands share: configuration from the command line (``--config``, ``--config-json``, ``--set``
and the flags that set one config key each), file patterns, progress lines, and the check that an output can be
written, made before any work."""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scalerepro.config import Config, from_layers
from scalerepro.errors import UserError
from scalerepro.io import parse_yaml

CONFIG_HELP = "YAML config file (e.g. config/config.yaml); keys missing there take the schema's defaults"


def progress(label: str, timed: bool = False) -> Callable[[int, int], None]:
    """A progress callback printing about every 10% (``timed``: every 1%, with the rate and time left) to stderr."""
    t0, last, first = time.monotonic(), -1, -1
    step = 1 if timed else 10

    def report(done: int, total: int) -> None:
        nonlocal last, first
        pct = done * 100 // max(1, total)
        if first < 0:
            first = done - 1  # work kept from an earlier attempt is not this attempt's rate
        if pct // step != last // step or done == total:
            last = pct
            line = f"{label}: {done}/{total} ({pct}%)"
            elapsed = time.monotonic() - t0
            if timed and elapsed > 0 and done > first:
                rate = (done - first) / elapsed
                line += f", {rate:.0f}/s, {(total - done) / rate / 60:.1f} min left"
            print(line, file=sys.stderr, flush=True)

    return report


def parse_set(items: list[str]) -> dict[str, dict[str, Any]]:
    """``--set section.key=value`` pairs as sections of keys (values parsed as YAML)."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        section, dot, name = key.partition(".")
        if not sep or not dot or not section or not name:
            raise UserError(f"--set {item!r}: expected SECTION.KEY=VALUE, e.g. --set train.epochs=2")
        out.setdefault(section, {})[name] = parse_yaml(value, f"--set {item}")
    return out


def expand(patterns: list[str]) -> list[Path]:
    """The files matching any of the glob ``patterns``, sorted, each once."""
    return sorted({Path(p) for pattern in patterns for p in glob.glob(pattern)})  # noqa: PTH207 (patterns may be absolute; Path.glob takes relative ones)


def load_config(args: argparse.Namespace) -> Config:
    """The validated, frozen Config from --config, --config-json and --set (later wins), merged and validated once."""
    overrides = parse_set(args.set)
    for section, values in setting_overrides(args).items():
        overrides.setdefault(section, {}).update(values)
    return from_layers(args.config, args.config_json, overrides)


def add_config_flags(p: argparse.ArgumentParser) -> None:
    """The config flags every command shares."""
    p.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    p.add_argument(
        "--config-json", metavar="JSON", help="config sections as one JSON object (used by the Snakemake rules)"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one key, e.g. --set train.epochs=2 (repeatable)",
    )


def setting(s: argparse.ArgumentParser, flag: str, key: str, help: str, listed: bool = False, **kw: Any) -> None:
    """A flag that sets config key ``key`` as ``--set key=VALUE`` would (after --set): the schema checks it, and
    unset, the command takes the configuration's value, the schema's default where the config has none. So no
    default is written here; ``listed``: comma-separated values of a list key."""
    dest = flag.removeprefix("--").replace("-", "_")
    sets = f"sets {key}{', comma-separated' if listed else ''}; default: the config's"
    s.add_argument(flag, dest=dest, default=None, help=f"{help} ({sets})", **kw)
    s.set_defaults(settings={**(s.get_default("settings") or {}), dest: (key, listed)})


def setting_overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The setting flags given (see :func:`setting`), as sections of keys; text parsed as YAML, as --set's."""
    out: dict[str, dict[str, Any]] = {}
    for dest, (key, listed) in (getattr(args, "settings", None) or {}).items():
        value = getattr(args, dest)
        if value is None:
            continue
        if isinstance(value, str):
            flag = f"--{dest.replace('_', '-')} {value}"
            value = [parse_yaml(v, flag) for v in value.split(",") if v] if listed else parse_yaml(value, flag)
        section, _, name = key.partition(".")
        out.setdefault(section, {})[name] = value
    return out


def check_out(path: Path | str, flag: str, *, folder: bool) -> Path:
    """``path``, given by ``flag``, once it is known it can be written: a folder (``folder``) that exists or is made
    now, or a file that is not a folder and whose folder exists or is made now; in that folder a probe file is
    created and removed. Otherwise a UserError naming the flag, the path, why and the fix. Call it before any
    work, so a run never ends in an output it cannot write. Probes have unique names: ranks may check one path at
    once."""
    path = Path(path)
    where = path if folder else path.parent
    fix = (
        "give a folder that can be written (made if absent)"
        if folder
        else "give a file in a folder that can be written (the folder is made if absent)"
    )
    if not folder and path.is_dir():
        raise UserError(f"{flag} {path} is a folder, not a file; {fix}")
    blocker = _file_at_or_above(where)
    if blocker is not None:
        what = "is a file, not a folder" if blocker == path else f"lies under {blocker}, a file"
        raise UserError(f"{flag} {path} {what}; {fix}")
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"{flag} {path}: cannot make the folder {exc.filename or where} ({exc.strerror}); {fix}"
        ) from None
    try:
        handle, probe = tempfile.mkstemp(prefix=".scalerepro-probe-", dir=where)
        os.close(handle)
        Path(probe).unlink()
    except OSError as exc:
        raise UserError(f"{flag} {path}: cannot create a file in {where} ({exc.strerror}); {fix}") from None
    return path


def _file_at_or_above(path: Path) -> Path | None:
    """The nearest existing path at or above ``path`` when it is not a folder (a file where a folder must go)."""
    for at in (path, *path.parents):
        if at.exists():
            return None if at.is_dir() else at
    return None


def check_out_on_root(comm: Any, path: Path | str, flag: str, *, folder: bool) -> Path:
    """:func:`check_out` on rank 0 of MPI communicator ``comm``, the rank that writes ``path``, before any
    work (collective): a failure is the same shared UserError on every rank, printed once
    (:func:`scalerepro.mpi.on_root`)."""
    from scalerepro.mpi import on_root  # MPI has started (``comm`` exists): importing it starts nothing

    on_root(comm, lambda: check_out(path, flag, folder=folder))
    return Path(path)
