"""``scalerepro simulate-scale``: ResNet-50's gradient buckets at the papers' scale, against the papers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scalerepro import papers
from scalerepro.cli.argtypes import at_least
from scalerepro.cli.common import (
    add_config_flags,
    check_out,
    load_config,
    setting,
)
from scalerepro.cli.simulation import (
    bucket_mib_arg,
    chosen_platforms,
    full_max_messages_arg,
    platform_args,
    point_shape,
    simulate_points,
    write_tables,
)
from scalerepro.sim import claims as published
from scalerepro.sim import platforms as described
from scalerepro.sim import scale
from scalerepro.sim.engine import load_simgrid

DESCRIPTION = (
    "Simulates ResNet-50's gradient buckets (as training cuts them) for every "
    "algorithm and rank count on each platform, projects images/s, scaling "
    "efficiency and 90-epoch time from each platform's per-accelerator rate (`--platform all`: "
    "every platform with one), and sets the papers' claims at their scale (`at_scale:` of "
    "config/papers/*.yaml) against them. Writes "
    "scale_points.csv, scale.csv, papers.csv and scale.json."
)


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro simulate-scale``."""
    add_config_flags(s)
    platform_args(s, None)
    setting(s, "--algos", "simulate.algorithms", "algorithms", listed=True)
    setting(s, "--ranks", "simulate.ranks", "rank counts; those a platform cannot hold are left out", listed=True)
    setting(
        s,
        "--dtypes",
        "simulate.dtypes",
        "gradient types of the --ranks grid, float32 and/or bfloat16 (a claim's own type is always simulated for it)",
        listed=True,
    )
    bucket_mib_arg(s, "gradient bucket size as training cuts it")
    full_max_messages_arg(s)
    setting(
        s,
        "--claims-max-ranks",
        "simulate.claims_max_ranks",
        "also simulate the points the claims of --papers need, up to this many ranks (at 1,024 the "
        "1-D ring takes minutes)",
        type=at_least(1),
    )
    setting(
        s,
        "--claims-left-out",
        "simulate.claims_left_out",
        "ids of claims whose points not to simulate (their rows say so)",
        listed=True,
    )
    setting(
        s,
        "--batch",
        "simulate.batch_per_rank",
        "images per rank per step (Goyal et al. and Ying et al.: 32, so 32,768 on 1,024 chips)",
        type=at_least(1),
    )
    setting(
        s,
        "--corners",
        "simulate.corners",
        "simulate the grid of --ranks at the network corners too, so its bands span the network's ranges "
        "(three times the simulations; without, the grid's bands span the rate and overlap only; the claims' "
        "points are always simulated at the corners)",
        action=argparse.BooleanOptionalAction,
    )
    setting(
        s,
        "--sensitivity",
        "simulate.sensitivity",
        "also simulate the claims with each ranged network number alone at either end of its range, for "
        "the sensitivity table (two more simulations per number; the compute rate and overlap need none)",
        action=argparse.BooleanOptionalAction,
    )
    s.add_argument(
        "--papers",
        default=str(papers.DEFAULT),
        metavar="DIR",
        help=f"the papers' files, whose `at_scale:` claims are judged (default {papers.DEFAULT})",
    )
    s.add_argument("--out", required=True, metavar="DIR", help="folder for the tables")


def command(args: argparse.Namespace) -> None:
    """ResNet-50's gradient buckets on every platform and algorithm; projected steps with bands; claims judged."""
    load_simgrid()
    cfg = load_config(args)
    sim, bucket_mib, shape = cfg.simulate, cfg.train.bucket_mib, point_shape(cfg)
    platforms = chosen_platforms(args, sim.platforms)
    if list(sim.platforms) == ["all"]:  # the clusters kept to check the simulator against carry no ResNet-50 rate
        platforms = [p for p in platforms if p.images_per_s_per_accelerator]
    claims = published.load_claims(Path(args.papers), described.load_platforms(Path(args.platforms)))
    published.check_left_out(claims, sim.claims_left_out)
    points = scale.unique(
        [
            pt
            for plat in platforms
            for pt in scale.points(
                plat,
                list(sim.algorithms),
                [p for p in sim.ranks if plat.holds(p)],
                list(sim.dtypes),
                bucket_mib,
                shape,
                sim.corners,
            )
        ]
        + scale.claim_points(
            claims, platforms, bucket_mib, shape, sim.claims_max_ranks, sim.sensitivity, sim.claims_left_out
        )
    )
    out = check_out(args.out, "--out", folder=True)
    rows, skipped = simulate_points(points, "simulate-scale", args.jobs)
    projections = {p.name: scale.Projection(rows, p, bucket_mib, sim.batch_per_rank) for p in platforms}
    steps = [s for proj in projections.values() for s in scale.steps(proj)]
    moved = published.sensitivity(claims, projections)
    compared = published.judged(claims, projections, sim.claims_max_ranks, sim.claims_left_out, moved)
    write_tables(
        out,
        {
            "scale_points": rows,
            "scale": steps,
            "papers": compared,
            "sensitivity": moved,
        },
        {
            "platforms": [p.as_dict() for p in platforms],
            "bucket_mib": bucket_mib,
            "batch_per_rank": sim.batch_per_rank,
            **shape,
            "corners": sim.corners,
            "sensitivity": sim.sensitivity,
            "skipped": skipped,
        },
        "scale.json",
    )
    for c in compared:
        print(f"{c['paper']}: {c['claim']}: {published.verdict_line(c)}", file=sys.stderr)
