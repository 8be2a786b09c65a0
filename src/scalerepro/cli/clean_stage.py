"""``scalerepro clean-stage``: remove what a sweep staged, on every node that staged it."""

from __future__ import annotations

import argparse
import sys

from scalerepro.cli.common import add_config_flags, check_out, load_config
from scalerepro.data.stage import clean_sweep
from scalerepro.io import read_json, write_json_atomic

DESCRIPTION = (
    "Reads the sweep's stage records (stage.json) and removes the staged dataset "
    "folders on each node named there: one srun task per node under SLURM (--launcher "
    "srun ...), else on this node. Kept when stage.keep is true, or by default off "
    "SLURM. Nodes that could not be cleaned are listed in --out, not raised."
)


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro clean-stage``."""
    add_config_flags(s)
    s.add_argument("--records", nargs="*", default=[], metavar="FILE", help="the sweep's stage.json files")
    s.add_argument("--launcher", default="", help="the training launcher (srun: clean through SLURM)")
    s.add_argument("--out", required=True, metavar="FILE", help="JSON record of what was staged and removed")


def command(args: argparse.Namespace) -> None:
    """Remove a sweep's staged shards on the nodes that staged them, unless the config keeps them."""
    stage = load_config(args).stage
    out = check_out(args.out, "--out", folder=False)
    records = [read_json(r) for r in args.records]
    outcome = clean_sweep(records, stage.kept(args.launcher), args.launcher)
    write_json_atomic(out, outcome)
    if outcome["kept"]:
        print(
            "staged shards kept (stage.keep, or off SLURM by default); `make clean-stage` removes them", file=sys.stderr
        )
    for item in outcome["cleaned"]:
        print(f"cleaned {', '.join(item['nodes'])} under {item['root']}", file=sys.stderr)
    for item in outcome["failed"] + outcome["unreachable"]:
        print(f"warning: not cleaned: {item}", file=sys.stderr)
