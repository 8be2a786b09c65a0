"""``scalerepro simulate-validate``: the simulator against this machine's bench, or against others' published
all-reduce times."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scalerepro.cli.common import add_config_flags, check_out, load_config
from scalerepro.cli.simulation import bench_rows, bucket_mib_arg, jobs_arg, simulate_points, write_tables
from scalerepro.errors import UserError
from scalerepro.sim import validate
from scalerepro.sim.engine import load_simgrid
from scalerepro.sim.platforms import load_platforms

DESCRIPTION = (
    "With --bench: fits one latency and bandwidth for this machine from the bench JSONs "
    "(per regime: a core per rank, or oversubscribed), simulates every measured "
    "(algorithm, ranks, size) with the schedule it ran, and writes validation.csv, "
    "validation_summary.csv and validation.json. With --published: simulates the all-reduce "
    "times others measured on the clusters of --platforms (its measurements:), each as "
    "described and at its network corners, and writes published.csv, published_summary.csv "
    "and published.json."
)


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro simulate-validate``."""
    add_config_flags(s)
    s.add_argument("--bench", nargs="+", metavar="GLOB", help="bench JSON files (globs allowed)")
    s.add_argument("--published", action="store_true", help="check against the measurements: of --platforms instead")
    s.add_argument(
        "--platforms",
        default="config/platforms.yaml",
        metavar="FILE",
        help="platforms and published measurements, for --published (default config/platforms.yaml)",
    )
    bucket_mib_arg(s, "gradient bucket size whose sizes the --published bar holds at")
    s.add_argument("--out", required=True, metavar="DIR", help="folder for the validation tables")
    jobs_arg(s)


def command(args: argparse.Namespace) -> None:
    """The simulator against measurements: this machine's bench (--bench), or others' clusters (--published)."""
    if bool(args.bench) == bool(args.published):
        raise UserError("simulate-validate: give --bench FILE... (this machine) or --published (others' clusters)")
    load_simgrid()
    if args.published:
        _validate_published(args)
    else:
        _validate_bench(args)


def _validate_bench(args: argparse.Namespace) -> None:
    """Fit this machine from its bench, simulate every measured point; write validation.csv and its summary."""
    _, rows, gamma = bench_rows(args.bench)
    machines = validate.machines(rows, gamma)
    kept = validate.measured(rows)
    out = check_out(args.out, "--out", folder=True)
    simulated, skipped = simulate_points(validate.validation_points(kept, machines), "simulate-validate", args.jobs)
    if skipped:
        raise UserError(
            f"simulate-validate: {skipped[0]['algorithm']} at {skipped[0]['ranks']} ranks has no "
            f"schedule: {skipped[0]['why']}"
        )
    table = validate.table(kept, simulated)
    summary = validate.error_summary(table)
    write_tables(
        out,
        {"validation": table, "validation_summary": summary},
        {"platforms": [v.as_dict() for v in machines.values()], "bar_bytes": validate.BAR_BYTES},
        "validation.json",
    )
    for s in summary:
        big = s["median_abs_error_64KiB_up"]
        print(
            f"{s['ranks']} ranks ({s['regime']}): median |simulated/measured - 1| "
            f"{'n/a' if big is None else f'{big:.1%}'} over {s['points_64KiB_up']} points >= 64 KiB, "
            f"{s['median_abs_error_all']:.1%} over all {s['points']}",
            file=sys.stderr,
        )


def _validate_published(args: argparse.Namespace) -> None:
    """Simulate the all-reduce times others published; write published.csv and published_summary.csv."""
    bucket_mib = load_config(args).train.bucket_mib
    path = Path(args.platforms)
    platforms = load_platforms(path)
    measurements = validate.load_measurements(path, platforms)
    points = validate.published_points(measurements, platforms)
    out = check_out(args.out, "--out", folder=True)
    simulated, skipped = simulate_points(points, "simulate-validate", args.jobs)
    if skipped:
        raise UserError(f"simulate-validate: {skipped[0]['algorithm']} has no schedule: {skipped[0]['why']}")
    table = validate.published_table(measurements, simulated, bucket_mib)
    summary = validate.published_summary(table)
    used = {m["platform"] for m in measurements}
    write_tables(
        out,
        {"published": table, "published_summary": summary},
        {
            "platforms": [platforms[n].as_dict() for n in sorted(used)],
            "tolerance": validate.PUBLISHED_TOLERANCE,
            "bucket_mib": bucket_mib,
        },
        "published.json",
    )
    for s in summary:
        print(
            f"{s['id']} ({s['ranks']} ranks): |simulated/published - 1| median {s['median_abs_error']:.1%}, "
            f"max {s['max_abs_error']:.1%} over {s['bar_points']} sizes of ResNet-50's buckets: "
            f"{'within' if s['within'] else 'not within'} {validate.PUBLISHED_TOLERANCE:.0%}",
            file=sys.stderr,
        )
