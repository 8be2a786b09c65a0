"""``scalerepro bench-train``: training throughput: our loop vs PyTorch DDP, same run (under mpiexec/srun).

This module imports nothing that starts MPI before :func:`command` starts it, so an argument or configuration
error comes before MPI, the same on every rank, and is printed once (:func:`scalerepro.cli.main`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scalerepro.baselines import published_per_accelerator
from scalerepro.cli.common import add_config_flags, check_out_on_root, load_config
from scalerepro.comm.algorithms import get, select
from scalerepro.distributed import start_mpi
from scalerepro.errors import UserError
from scalerepro.io import write_json_atomic
from scalerepro.provenance import record

DESCRIPTION = (
    "Same model, seed, batch and in-memory batches on both sides; repetitions "
    "interleaved; medians of images/s (max over ranks), their ratio, and our all-reduce "
    "time per step. Batch norm is local on both sides."
)


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro bench-train``."""
    add_config_flags(s)
    s.add_argument("--algo", default="ring", help="our gradient all-reduce (default ring)")
    s.add_argument("--out", required=True, metavar="FILE", help="JSON result file")
    s.add_argument("--steps", type=int, default=20, help="timed steps per repetition and side (default 20)")
    s.add_argument("--warmup", type=int, default=3, help="untimed steps per side first (default 3)")
    s.add_argument("--reps", type=int, default=5, help="repetitions (default 5; medians reported)")
    s.add_argument("--classes", type=int, default=10, help="classes of the synthetic labels (default 10)")
    s.add_argument(
        "--baselines",
        metavar="FILE",
        help="also print the published images/s per accelerator from this "
        "file (config/baselines.yaml) for the configured model",
    )


def command(args: argparse.Namespace) -> None:
    """Our training loop vs PyTorch DDP, same model, batch and data, same run (under mpiexec/srun); JSON + table."""
    cfg = load_config(args)
    if min(args.steps, args.reps) < 1 or args.warmup < 0:
        raise UserError(
            f"--steps {args.steps} --reps {args.reps} --warmup {args.warmup}: steps and reps must be >= 1, warmup >= 0"
        )
    get(args.algo)  # an unknown name, before MPI (its device is known only with torch, after)
    published = published_per_accelerator(Path(args.baselines), cfg.train.model) if args.baselines else None
    comm = start_mpi()
    from scalerepro.mpi import on_root  # these start MPI on import: only now
    from scalerepro.train import bench
    from scalerepro.train.trainer import device_kind

    check_out_on_root(comm, args.out, "--out", folder=False)
    algorithm = select(args.algo, device_kind(cfg.train.device), cfg.comm.executor)
    spec = bench.TrainBenchSpec(algorithm, args.steps, args.warmup, args.reps, args.classes)
    result = bench.measure_against_ddp(cfg, spec, comm, _root_printer(comm))
    out = {**record(comm), "spec": spec.record(), "config": cfg.to_dict(), **result}
    if published is not None:
        out["published_per_accelerator"] = published
    on_root(comm, lambda: write_json_atomic(args.out, out))
    on_root(
        comm,
        lambda: print(
            bench.format_summary(result["summary"])
            + "".join(
                f"\npublished {b['work']}: {b['images_per_s_per_accelerator']:.0f} images/s per accelerator "
                f"({b['hardware']})"
                for b in out.get("published_per_accelerator", [])
            ),
            file=sys.stderr,
        ),
    )


def _root_printer(comm: Any) -> Callable[[str], None]:
    """A progress callback printing each line to stderr on rank 0 only."""

    def emit(line: str) -> None:
        if comm.rank == 0:
            print(line, file=sys.stderr, flush=True)

    return emit
