"""``scalerepro cost-model``: fit alpha/beta/gamma per algorithm from bench JSONs; project to large scales."""

from __future__ import annotations

import argparse
import sys

from scalerepro.cli.argtypes import at_least, positive
from scalerepro.cli.common import (
    add_config_flags,
    check_out,
    load_config,
    setting,
)
from scalerepro.cli.simulation import bench_rows, chosen_platforms
from scalerepro.comm.costfit import fit_regimes, for_projection
from scalerepro.comm.costprojection import RESNET50_GRADIENT_BYTES
from scalerepro.comm.costtable import format_fits, format_projection
from scalerepro.io import write_json_atomic
from scalerepro.sim.platforms import project

DESCRIPTION = (
    "Least squares on relative error; prints residuals; projects one all-reduce of "
    "ResNet-50's gradients onto a fat tree and a 2-D torus."
)


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro cost-model``."""
    add_config_flags(s)
    s.add_argument("--bench", nargs="+", required=True, metavar="GLOB", help="bench JSON files (globs allowed)")
    s.add_argument("--algos", help="comma-separated algorithms to fit (default: all in the files)")
    s.add_argument("--out", required=True, metavar="FILE", help="JSON with fits, residuals and projection")
    setting(s, "--ranks", "simulate.ranks", "rank counts to project to, each on the platforms that hold it", True)
    s.add_argument(
        "--bytes",
        type=positive,
        default=RESNET50_GRADIENT_BYTES,
        help="bytes per all-reduce (default: ResNet-50, 102 MB)",
    )
    setting(s, "--colors", "comm.colors", "multicolor colors in the projection, at least 1", type=at_least(1))
    setting(s, "--platform", "simulate.platforms", "platform names of --platforms to project onto, or all", True)
    s.add_argument(
        "--platforms",
        default="config/platforms.yaml",
        metavar="FILE",
        help="platform descriptions, the simulator's (default config/platforms.yaml)",
    )


def command(args: argparse.Namespace) -> None:
    """Fit alpha/beta/gamma per algorithm from bench JSONs; print residuals; project ResNet-50 gradients."""
    cfg = load_config(args)
    out = check_out(args.out, "--out", folder=False)
    paths, rows, gamma = bench_rows(args.bench)
    # auto is not one schedule (it picks per size), so it has no alpha-beta of its own
    algos = args.algos.split(",") if args.algos else sorted({r["algorithm"] for r in rows} - {"auto"})
    fits = fit_regimes(algos, rows, gamma)
    chosen = for_projection(fits)
    platforms = chosen_platforms(args, cfg.simulate.platforms)
    topos = [plat.topology() for plat in platforms]
    ranks = list(cfg.simulate.ranks)
    proj = project(chosen, platforms, ranks, args.bytes, cfg.comm.colors)
    print(format_fits(fits), file=sys.stderr)
    print(format_projection(chosen, topos, ranks, proj, args.bytes), file=sys.stderr)
    write_json_atomic(
        out,
        {
            "gamma_s_per_byte": gamma,
            "fits": [f.__dict__ for f in fits],
            "projection": proj,
            "topologies": [t.__dict__ for t in topos],
            "platforms_file": args.platforms,
            "bytes": args.bytes,
            "colors": cfg.comm.colors,
            "sources": [str(p) for p in paths],
        },
    )
