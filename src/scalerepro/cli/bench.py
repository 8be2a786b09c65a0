"""``scalerepro bench``: all-reduce sweep, nccl-tests style (run under mpiexec/srun).

This module imports nothing that starts MPI before :func:`command` starts it, so an argument or configuration
error comes before MPI, the same on every rank, and is printed once (:func:`scalerepro.cli.main`).
"""

from __future__ import annotations

import argparse
import sys

from scalerepro.cli.common import add_config_flags, check_out_on_root, load_config
from scalerepro.comm.algorithms import select
from scalerepro.comm.benchfile import total_wrong
from scalerepro.distributed import start_mpi
from scalerepro.errors import UserError
from scalerepro.io import write_json_atomic

DESCRIPTION = (
    "Sizes by doubling; each size out of place (result in a separate buffer, the send buffer checked "
    "unchanged) and in place, as nccl-tests' two column groups, then its # Avg bus bandwidth footer; "
    "t = max over ranks of the mean; busbw = algbw*2(p-1)/p; checked. "
    "Each row records the executor (--set comm.executor=mpi|torch) and the schedule "
    "that ran (colors, orders, grid, or what the algorithm reduced to)."
)


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro bench``."""
    add_config_flags(s)
    s.add_argument("--algos", help="comma-separated algorithms (default: bench.algorithms)")
    s.add_argument(
        "--compare",
        metavar="PEERS",
        help="comma-separated peers (e.g. native,gloo, or nccl on a GPU): "
        "print and record every other algorithm's busbw and time as ratios to each, from this same run",
    )
    s.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="where the buffers live (default cpu); cuda: each rank's GPU, and comm.executor=auto then "
        "runs the schedules with torch.distributed (NCCL)",
    )
    s.add_argument("--out", required=True, metavar="FILE", help="JSON result file")


def command(args: argparse.Namespace) -> None:
    """All-reduce sweep with correctness check; JSON for analysis, a table for people."""
    cfg = load_config(args)
    b = cfg.bench
    names = tuple(args.algos.split(",")) if args.algos else b.algorithms
    algos = tuple(select(a, args.device, cfg.comm.executor) for a in names)
    comm = start_mpi()
    from scalerepro.comm.harness import SweepSpec, benchmark  # both start MPI on import: only now
    from scalerepro.mpi import on_root

    check_out_on_root(comm, args.out, "--out", folder=False)
    fields = (b.min_bytes, b.max_bytes, b.dtype, b.warmup, b.iters, b.check, b.min_time_s, b.max_iters)
    spec = SweepSpec(algos, *fields, device=args.device, threads=0, rounds=b.rounds)
    peers = [p for p in (args.compare or "").split(",") if p]
    result = benchmark(comm, cfg.comm.params(), spec, peers, lambda text: print(text, file=sys.stderr, flush=True))
    result["params"] = cfg.to_dict()["comm"]
    on_root(comm, lambda: write_json_atomic(args.out, result))
    wrong = total_wrong(result["rows"])
    if wrong:
        raise UserError(  # counted over every rank (an allreduce): the same on each
            f"{wrong} wrong elements in the all-reduce results (see #wrong in {args.out})", shared=True
        )
