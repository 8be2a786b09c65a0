"""``scalerepro train``: one data-parallel training run (every rank runs this)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from scalerepro.cli.common import add_config_flags, check_out_on_root, load_config
from scalerepro.comm.algorithms import select
from scalerepro.distributed import start_mpi
from scalerepro.errors import UserError
from scalerepro.train.runfolder import StopSignals

DESCRIPTION = "Synchronous SGD over the chosen all-reduce; JSON-lines events + run.json in --out."


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro train``."""
    add_config_flags(s)
    s.add_argument("--algo", required=True, help="all-reduce algorithm for the gradients")
    s.add_argument("--shards", required=True, metavar="DIR", help="folder with train/ and val/ shard folders")
    s.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="run directory (events.jsonl, run.json, checkpoint.pt); a checkpoint there is resumed from",
    )
    s.add_argument(
        "--no-stage",
        action="store_true",
        help="read the shard folder directly instead of the staged copy (each shard checked against the manifest "
        "first: size and footer, and sha256 unless --trust-shards)",
    )
    s.add_argument(
        "--trust-shards",
        action="store_true",
        help="with --no-stage: skip the sha256 of every shard (a damaged record is still named when it is read)",
    )
    s.add_argument(
        "--variant",
        default="base",
        metavar="NAME",
        help="train recipe from train.variants to lay over the train section (default base: as written)",
    )
    s.add_argument(
        "--rep",
        type=int,
        default=0,
        metavar="K",
        help="repetition index of this run among runs with the same settings (recorded; default 0)",
    )


def command(args: argparse.Namespace) -> int:
    """Run (or resume) one training run on all ranks; 128 + signal after a preemption checkpoint (a finished
    run's ranks exit here, see :func:`scalerepro.mpi.exit_now`)."""
    signals = StopSignals()  # first: a stop signal while the run starts stops it at its first step
    cfg = load_config(args).for_variant(args.variant)
    world = start_mpi(cfg.train.emulate_nodes)  # this module imports nothing that starts MPI before this
    check_out_on_root(world, args.out, "--out", folder=True)  # rank 0 writes the run folder
    from scalerepro.mpi import block_ordered, exit_now, on_root
    from scalerepro.train.checkpoint import Preempted
    from scalerepro.train.loop import RunSpec, train
    from scalerepro.train.trainer import device_kind

    algorithm = select(args.algo, device_kind(cfg.train.device), cfg.comm.executor)
    shards = Path(args.shards)
    if args.no_stage:
        from scalerepro.data.stage import verify_on_nodes

        verify_on_nodes(world, [shards / "train", shards / "val"], args.trust_shards)
    spec = RunSpec(
        config=cfg,
        algorithm=algorithm,
        train_dir=_staged_dir(shards, "train", cfg.stage.root, args.no_stage),
        val_dir=_staged_dir(shards, "val", cfg.stage.root, args.no_stage),
        out=Path(args.out),
        repetition=args.rep,
    )
    try:
        record = train(spec, block_ordered(world) if cfg.train.emulate_nodes > 1 else world, signals)
    except Preempted as exc:
        message = f"scalerepro train: {exc}"
        on_root(world, lambda: print(message, file=sys.stderr, flush=True))
        return 128 + exc.signum
    on_root(world, lambda: print(summary(record), file=sys.stderr))
    return exit_now(0)  # the run's files are written and closed: skip tearing torch down on every rank


def summary(record: dict[str, Any]) -> str:
    """One line on a run's outcome."""
    final = record["final"]
    head = f"train {record['algorithm']} x{record['world_size']}: "
    accuracy = f"top-1 {final['top1']:.3f} after {final['epoch'] + 1} epochs" if final else "not evaluated"
    return f"{head}{accuracy}, {record['seconds']:.1f} s, status {record['status']}"


def _staged_dir(shards: Path, split: str, stage_root: str, direct: bool) -> Path:
    """The folder training reads a split from: the staged copy, or the shard folder itself."""
    from scalerepro.data.shards import read_manifest
    from scalerepro.data.stage import staged_folder
    from scalerepro.mpi import this_node

    source = shards / split
    if direct:
        return source
    dest = staged_folder(stage_root, read_manifest(source), this_node())
    if not (dest / "manifest.json").is_file():
        raise UserError(
            f"{split} shards are not staged in {dest}; run `scalerepro stage --shards {source}` "
            "in the same allocation first (or pass --no-stage to read the shard folder)"
        )
    return dest
