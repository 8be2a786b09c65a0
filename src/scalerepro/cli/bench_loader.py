"""``scalerepro bench-loader``: shard loader vs torchvision ImageFolder+DataLoader, same JPEGs, same run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scalerepro.baselines import default_path
from scalerepro.cli.argtypes import int_list
from scalerepro.cli.common import check_out
from scalerepro.data import feed
from scalerepro.data import loaderbench as lb
from scalerepro.data.shards import read_manifest
from scalerepro.errors import UserError
from scalerepro.io import write_json_atomic
from scalerepro.oversubscription import usable_cpus
from scalerepro.provenance import record

DESCRIPTION = (
    "Generates ImageNet-sized JPEGs once (400-500 px, quality 90), shards and stages "
    "them, then times both loaders with the same RandomResizedCrop + flip + normalise "
    "and worker count: images/s (per worker) and start-up, medians over "
    "repetitions, then peak RSS/PSS of the process tree, the median of as many passes again, each "
    "in a fresh process (the PSS page walk would slow the timed passes)."
)


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro bench-loader``."""
    s.add_argument(
        "--work",
        required=True,
        metavar="DIR",
        help="folder for the generated JPEGs and their shards (reused when present)",
    )
    s.add_argument("--out", required=True, metavar="FILE", help="JSON result file")
    s.add_argument("--images", type=int, default=2000, help="JPEGs to generate (default 2000)")
    s.add_argument("--size", type=int, default=224, help="crop size in pixels (default 224)")
    s.add_argument("--batch", type=int, default=64, help="images per batch (default 64)")
    s.add_argument("--workers", default="1,2", help="comma-separated worker counts to measure (default 1,2)")
    s.add_argument("--reps", type=int, default=3, help="repetitions per worker count (default 3; medians reported)")
    s.add_argument("--scale", default="0.08,1", help="RandomResizedCrop scale MIN,MAX (default 0.08,1)")
    s.add_argument("--seed", type=int, default=0, help="seed of the images and of the shuffles (default 0)")
    s.add_argument(
        "--no-row-index",
        action="store_true",
        help="shard without jpegtran's row index even where it is installed (a machine without "
        "libjpeg-turbo-progs: every JPEG decoded whole)",
    )
    s.add_argument(
        "--stage-root",
        default="/dev/shm/scalerepro-bench",
        help="node-memory folder to stage into "
        "(default /dev/shm/scalerepro-bench; remove with `scalerepro stage --clean --root ...`)",
    )
    s.add_argument(
        "--baselines",
        metavar="FILE",
        help="published results whose images/s per accelerator the workers-needed table sizes for "
        "(default config/baselines.yaml of the working directory, else of the checkout)",
    )
    s.add_argument(
        "--model",
        default="resnet50",
        help="model of the published rates in --baselines to size for (default resnet50)",
    )
    s.add_argument(
        "--train-json",
        metavar="FILE",
        help="a `scalerepro bench-train` JSON: also size for its measured images/s per rank (ours)",
    )


def command(args: argparse.Namespace) -> None:
    """Shard loader vs torchvision ImageFolder + DataLoader on the same JPEGs, same run; JSON + table, then the
    loader workers per accelerator that the published and measured training rates need."""
    try:
        scale = tuple(float(x) for x in args.scale.split(","))
    except ValueError:
        scale = ()
    if len(scale) != 2 or not 0 < scale[0] <= scale[1] <= 1:
        raise UserError(f"--scale {args.scale}: give MIN,MAX with 0 < MIN <= MAX <= 1 (ImageNet standard 0.08,1)")
    spec = lb.LoaderBenchSpec(
        images=args.images,
        size=args.size,
        batch=args.batch,
        workers=int_list(args.workers, "--workers"),
        reps=args.reps,
        scale=scale,
        seed=args.seed,
    )
    baselines = Path(args.baselines) if args.baselines else default_path()
    wanted = feed.rates(args.model, baselines, Path(args.train_json) if args.train_json else None)  # bad files: now
    out = check_out(args.out, "--out", folder=False)
    work = check_out(args.work, "--work", folder=True)
    check_out(args.stage_root, "--stage-root", folder=True)
    print(f"# {spec.images} JPEGs (400-500 px, quality 90) in {work}", file=sys.stderr)
    dataset = lb.bench_dataset(work, spec.images, spec.seed)
    staged = lb.staged_shards(dataset, work, args.stage_root, spec.seed, row_index=not args.no_row_index)
    row_index = read_manifest(staged).get("row_index", {"tool": None, "images": 0})
    print(
        f"# shards row-indexed: {row_index['images']} images ({row_index['tool'] or 'no jpegtran: decoded whole'})",
        file=sys.stderr,
    )
    rows = lb.run(spec, dataset, staged, lambda line: print(line, file=sys.stderr, flush=True))
    summary = lb.per_loader(rows)
    needed = feed.needed_workers(feed.slowest_worker(summary), spec.size, args.model, baselines, wanted)
    write_json_atomic(
        out,
        {
            **record(),
            "cpus": len(usable_cpus()),
            "spec": {**spec.__dict__},
            "dataset": str(dataset),
            "staged": str(staged),
            "row_index": row_index,
            "rows": rows,
            "summary": summary,
            "workers_needed": needed,
        },
    )
    print(lb.format_loaders(summary), file=sys.stderr)
    print(feed.format_table(needed), file=sys.stderr)
