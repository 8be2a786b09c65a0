"""``scalerepro stage``: copy shards into node memory, verified (run under mpiexec/srun).

This module imports nothing that starts MPI before :func:`command` starts it, so an argument or configuration
error comes before MPI, the same on every rank, and is printed once (:func:`scalerepro.cli.main`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scalerepro.cli.common import add_config_flags, check_out_on_root, load_config
from scalerepro.distributed import start_mpi
from scalerepro.io import write_json_atomic

DESCRIPTION = "The first rank of each node copies; others wait. Verified shards already there are kept."


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro stage``."""
    add_config_flags(s)
    s.add_argument("--shards", nargs="*", default=[], metavar="DIR", help="shard folders (with manifest.json) to stage")
    s.add_argument("--root", help="node-memory folder (default: stage.root)")
    s.add_argument("--log", metavar="FILE", help="write a JSON record of what was staged, per node, with timings")
    s.add_argument(
        "--clean",
        action="store_true",
        help="remove what this node staged (<root>/<node>/) instead; on every node when launched on each",
    )
    s.add_argument("--only", metavar="FOLDERS", help="with --clean: only these dataset folders (comma-separated)")


def command(args: argparse.Namespace) -> None:
    """Stage shards into node memory (first rank per node copies)."""
    root = args.root or load_config(args).stage.root
    comm = start_mpi()
    from scalerepro.data.stage import clean_on_nodes, describe, stage_on_nodes  # these start MPI on import: only now
    from scalerepro.mpi import on_root

    if args.clean:
        only = [f for f in args.only.split(",") if f] if args.only else None
        removed = clean_on_nodes(comm, root, only)
        on_root(
            comm,
            lambda: print(
                f"removed {len(removed)} staged folder(s) under {root}: {', '.join(removed)}", file=sys.stderr
            ),
        )
        return
    if args.log:
        check_out_on_root(comm, args.log, "--log", folder=False)
    record = stage_on_nodes(comm, [Path(d) for d in args.shards], root)

    def report() -> None:
        if args.log:
            write_json_atomic(args.log, record)
        print(describe(record), file=sys.stderr)

    on_root(comm, report)
