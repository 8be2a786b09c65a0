"""``scalerepro shard``: pack an ImageNet-layout folder into shards + manifest."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scalerepro.cli.argtypes import at_least
from scalerepro.cli.common import (
    add_config_flags,
    check_out,
    load_config,
    progress,
)
from scalerepro.data.pack import describe_rate, shard_split
from scalerepro.errors import UserError

DESCRIPTION = "Shards of RGB JPEG bytes with labels; grayscale/CMYK/PNG inputs are re-encoded."


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro shard``."""
    add_config_flags(s)
    s.add_argument("--dataset", metavar="DIR", help="ImageNet-layout folder (default: dataset.root/dataset.name)")
    s.add_argument("--split", choices=["train", "val", "all"], default="all", help="which split (default: all)")
    s.add_argument("--out", metavar="DIR", required=True, help="write <split>/shard-*.srs and manifest.json here")
    s.add_argument(
        "--skip-bad",
        action="store_true",
        help="leave undecodable files and images above shard.max_pixels out (listed in the manifest) instead "
        "of failing",
    )
    s.add_argument(
        "--threads",
        type=at_least(1),
        metavar="N",
        help="packing threads (default: the CPUs this process may use, e.g. its SLURM allocation)",
    )


def command(args: argparse.Namespace) -> None:
    """Shard the train and/or val split."""
    cfg = load_config(args)
    source = Path(args.dataset) if args.dataset else cfg.dataset.path
    if not source.is_dir():
        raise UserError(
            f"dataset folder {source} not found; set dataset.root/dataset.name (or --dataset), "
            "or generate the laptop dataset with `scalerepro make-dataset`"
        )
    out = check_out(args.out, "--out", folder=True)
    splits = ["train", "val"] if args.split == "all" else [args.split]
    counts = {"train": cfg.shard.train_shards, "val": cfg.shard.val_shards}
    for split in splits:
        m = shard_split(
            source,
            split,
            out / split,
            counts[split],
            cfg.shard.seed,
            args.skip_bad,
            progress(f"shard {split}", timed=True),
            args.threads,
            max_pixels=cfg.shard.max_pixels,
        )
        print(
            f"{split}: {m['samples']} samples in {len(m['shards'])} shards ({m['kept_from_earlier_attempt']} kept "
            f"from an earlier attempt), {m['bytes'] / 2**20:.1f} MiB, converted {m['converted']}, skipped "
            f"{len(m['skipped'])}, row-indexed {m['row_index']['images']}"
            + (
                ""
                if m["row_index"]["tool"]
                else " (install jpegtran, Debian's libjpeg-turbo-progs, and re-shard "
                "for the loader to decode only the rows each crop needs)"
            ),
            file=sys.stderr,
        )
        print(describe_rate(m["rate"]), file=sys.stderr)
