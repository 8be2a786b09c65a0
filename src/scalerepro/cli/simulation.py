"""What the simulate commands and the cost model share: bench rows, the platforms named, points simulated with
progress, tables written, and their flags."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from scalerepro.cli.argtypes import at_least, positive
from scalerepro.cli.common import expand, progress, setting
from scalerepro.comm.benchfile import FlatRow, read_rows
from scalerepro.errors import UserError
from scalerepro.io import write_json_atomic, write_text_atomic
from scalerepro.sim import simulate_feasible
from scalerepro.sim.engine import shape_of
from scalerepro.sim.platforms import load_platforms, pick
from scalerepro.sim.validate import MACHINE, machines


def bench_rows(patterns: list[str]) -> tuple[list[Path], list[FlatRow], float]:
    """The bench JSONs matching ``patterns``, every row of them, and their median measured gamma (s/byte)."""
    paths = expand(patterns)
    if not paths:
        raise UserError(f"no bench JSON matches {' '.join(patterns) or '(none given)'}; run `scalerepro bench` first")
    return (paths, *read_rows(paths))


def chosen_platforms(args: argparse.Namespace, named: Sequence[str]) -> list[Any]:
    """The platforms ``named`` (or all) from --platforms; this-machine fitted from --bench."""
    names = list(named)
    chosen = []
    if MACHINE in names:
        if not args.bench:
            raise UserError(f"--platform {MACHINE} is fitted from this machine's bench: give --bench FILE...")
        fits = machines(*bench_rows(args.bench)[1:])
        chosen.append(fits.get(("dedicated", "mpi")) or next(iter(fits.values())))
        names.remove(MACHINE)
    if names:
        path = Path(args.platforms)
        known = load_platforms(path)
        chosen += list(known.values()) if names == ["all"] else [pick(known, n, path) for n in names]
    return chosen


def simulate_points(points: list[Any], label: str, jobs: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Simulate the points whose schedules exist, with progress on stderr; (rows, skipped)."""
    return simulate_feasible(points, label, jobs, progress(label))


def write_tables(out: Path, tables: dict[str, list[dict[str, Any]]], record: dict[str, Any], name: str) -> None:
    """Each table as out/NAME.csv, and the record (every parameter, argv) as out/name."""
    for table, rows in tables.items():
        write_text_atomic(out / f"{table}.csv", pd.DataFrame(rows).to_csv(index=False))
    write_json_atomic(out / name, {"argv": sys.argv, **record, **tables})


def platform_args(s: argparse.ArgumentParser, default: str | None) -> None:
    """--platform (``default`` None: it sets simulate.platforms), --platforms, --bench, --colors and --tree-arity,
    shared by the simulate commands."""
    what = "platform names of --platforms, `all`, or this-machine (fitted from --bench)"
    if default is None:
        setting(s, "--platform", "simulate.platforms", what, listed=True)
    else:
        s.add_argument("--platform", default=default, help=f"comma-separated {what} (default {default})")
    s.add_argument(
        "--platforms",
        default="config/platforms.yaml",
        metavar="FILE",
        help="platform descriptions (default config/platforms.yaml)",
    )
    s.add_argument("--bench", nargs="*", default=[], metavar="GLOB", help="bench JSONs to fit this-machine from")
    setting(s, "--colors", "comm.colors", "colors of multicolor and multicolor-ring, at least 1", type=at_least(1))
    setting(s, "--tree-arity", "comm.tree_arity", "children per node of multicolor's trees", type=at_least(1))
    jobs_arg(s)


def bucket_mib_arg(s: argparse.ArgumentParser, what: str) -> None:
    """--bucket-mib: ResNet-50's gradient buckets as training cuts them (train.bucket_mib)."""
    setting(s, "--bucket-mib", "train.bucket_mib", what, type=positive)


def full_max_messages_arg(s: argparse.ArgumentParser) -> None:
    """--full-max-messages: the most messages a full simulation of a schedule out of step may start."""
    setting(
        s,
        "--full-max-messages",
        "simulate.full_max_messages",
        "where a schedule runs out of step, simulate every stage only up to this many messages; above, keep "
        "the sum over patterns, marked approximate (0: no limit)",
        type=at_least(0),
    )


def point_shape(cfg: Any) -> dict[str, Any]:
    """What every point of a run takes from the config ``cfg``: the comm shape and the full simulation's limit."""
    return {**shape_of(cfg.comm), "full_max_messages": cfg.simulate.full_max_messages}


def jobs_arg(s: argparse.ArgumentParser) -> None:
    """--jobs: simulations at once, each on its own core."""
    s.add_argument(
        "--jobs",
        type=at_least(0),
        default=0,
        help="simulations at once, one core each (default: every core this process may use)",
    )
