"""``scalerepro simulate``: the algorithms' schedules in SimGrid on described platforms, any rank count."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from scalerepro.cli.argtypes import int_list
from scalerepro.cli.common import (
    add_config_flags,
    check_out,
    load_config,
)
from scalerepro.cli.simulation import (
    chosen_platforms,
    full_max_messages_arg,
    platform_args,
    point_shape,
    simulate_points,
    write_tables,
)
from scalerepro.comm.algorithms import get
from scalerepro.comm.costprojection import RESNET50_GRADIENT_BYTES
from scalerepro.errors import UserError
from scalerepro.sim.engine import Point, load_simgrid

METHODS = ("fast", "full", "both")  # --method: by pattern where it holds, every stage, each point both ways
DESCRIPTION = (
    "Runs every rank's schedule (the same one the executors run) in SimGrid on a "
    "platform of config/platforms.yaml (or this machine, fitted from --bench), one "
    "process per point. Needs SimGrid's Python module: "
    "sudo apt-get install python3-simgrid."
)


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro simulate``."""
    add_config_flags(s)
    platform_args(s, "tpu-v3-pod")
    s.add_argument("--algos", default="ring,torus2d", help="comma-separated algorithms (default ring,torus2d)")
    s.add_argument("--ranks", default="16,64", help="comma-separated rank counts (default 16,64)")
    s.add_argument(
        "--bytes",
        default=str(RESNET50_GRADIENT_BYTES),
        help="comma-separated bytes per all-reduce, float32 (default: ResNet-50's gradients, 102 MB)",
    )
    s.add_argument(
        "--method",
        choices=METHODS,
        default="fast",
        help="fast: each repeated pattern of transfers simulated once where the schedule allows (else every "
        "stage); full: every stage of every rank; both: each point both ways, with their ratio (default fast)",
    )
    full_max_messages_arg(s)
    s.add_argument("--out", required=True, metavar="DIR", help="folder for simulation.csv and simulation.json")


def command(args: argparse.Namespace) -> None:
    """Simulate the algorithms' schedules on described platforms in SimGrid; write simulation.csv and .json."""
    load_simgrid()  # absent: one line naming the install command, before any work
    algos = [a for a in args.algos.split(",") if a]
    for algo in algos:
        if get(algo) is None:
            raise UserError("simulate --algos auto: auto picks per size on a measured machine; name the algorithms")
    shape = point_shape(load_config(args))
    platforms = chosen_platforms(args, [n for n in args.platform.split(",") if n])
    methods = ["fast", "full"] if args.method == "both" else [args.method]
    points = [
        Point(algo, p, n, plat, **shape, method=method)
        for plat in platforms
        for p in int_list(args.ranks, "--ranks")
        for n in int_list(args.bytes, "--bytes")
        for algo in algos
        for method in methods
    ]
    out = check_out(args.out, "--out", folder=True)
    rows, skipped = simulate_points(points, "simulate", args.jobs)
    write_tables(
        out,
        {"simulation": rows},
        {"platforms": [p.as_dict() for p in platforms], **shape, "skipped": skipped},
        "simulation.json",
    )
    if args.method == "both":
        print_agreement(rows)
        return
    print(
        f"{'platform':>14} {'algorithm':>15} {'ranks':>6} {'bytes':>11} {'simulated ms':>13} {'busbw GB/s':>11} "
        f"{'wall s':>7} {'method':>9} {'patterns':>8}",
        file=sys.stderr,
    )
    for r in rows:
        print(
            f"{r['platform']:>14} {r['algorithm']:>15} {r['ranks']:>6} {r['bytes']:>11} "
            f"{r['simulated_s'] * 1e3:>13.3f} {r['busbw_GBps']:>11.2f} {r['wall_s']:>7.1f} {r['method']:>9} "
            f"{r['patterns'] or '':>8}",
            file=sys.stderr,
        )


def print_agreement(rows: list[dict[str, Any]]) -> None:
    """Rows of ``--method both`` (fast then full per point) as one line per point: the fast path's time over the
    full simulation's, and the wall times."""
    print(
        f"{'platform':>14} {'algorithm':>15} {'ranks':>6} {'bytes':>11} {'fast/full':>10} {'fast wall s':>12} "
        f"{'full wall s':>12}  fast path",
        file=sys.stderr,
    )
    for fast, full in zip(rows[::2], rows[1::2], strict=True):
        how = f"{fast['patterns']} {fast['method']}" if fast["patterns"] else f"full: {fast['why_full']}"
        print(
            f"{fast['platform']:>14} {fast['algorithm']:>15} {fast['ranks']:>6} {fast['bytes']:>11} "
            f"{fast['simulated_s'] / full['simulated_s']:>10.4f} {fast['wall_s']:>12.1f} {full['wall_s']:>12.1f}  "
            f"{how}",
            file=sys.stderr,
        )
