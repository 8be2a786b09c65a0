"""``scalerepro supervise``: run a training launcher line; on failure name the rank that died and where."""

from __future__ import annotations

import argparse

from scalerepro.cli.argtypes import positive
from scalerepro.cli.common import check_out
from scalerepro.errors import UserError
from scalerepro.train.supervise import supervise

DESCRIPTION = (
    "Runs CMD (e.g. mpiexec -n 2 scalerepro train ... --out DIR) and passes its exit "
    "status through. If it fails, prints which rank on this host exited first (pid, "
    "host), the last step logged and the last checkpoint, and how to resume. With --start-timeout, "
    "a launch whose ranks never start (MPI_Init stuck) is stopped and reported."
)


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro supervise``."""
    s.add_argument("--run-dir", required=True, metavar="DIR", help="the training run's --out folder")
    s.add_argument(
        "--start-timeout",
        type=positive,
        metavar="S",
        help="stop the launcher (exit 124) when its ranks have not started, i.e. rank 0 wrote no ranks.json, "
        "within S seconds (the train rule passes comm.timeout_s; default: wait as long as the launcher runs)",
    )
    s.add_argument(
        "--watch",
        type=int,
        metavar="PID",
        help="stop the launcher (the ranks checkpoint) when process PID ends, so no job outlives what started it "
        "(the train rule passes Snakemake's pid; default: watch nothing, so a job started with nohup lives on)",
    )
    s.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the launcher line to run")


def command(args: argparse.Namespace) -> int:
    """Run the launcher line; on failure, name the rank that died first, the last step and checkpoint."""
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise UserError(
            "no command given; e.g. scalerepro supervise --run-dir DIR -- mpiexec -n 2 scalerepro train ..."
        )
    try:
        run_dir = check_out(args.run_dir, "--run-dir", folder=True)
        return supervise(cmd, run_dir, args.start_timeout, args.watch)
    except FileNotFoundError:
        raise UserError(
            f"{cmd[0]}: command not found; is the launcher on PATH (mpiexec from the mpich wheel, or srun)?"
        ) from None
