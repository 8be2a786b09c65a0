"""``scalerepro mlperf-log``: run event logs -> MLPerf training logs (<run id>.txt, :::MLLOG lines)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scalerepro.analysis.mlperf import write_mllog
from scalerepro.cli.common import check_out, expand
from scalerepro.errors import UserError

DESCRIPTION = (
    "Writes one MLPerf log per run (open division, benchmark resnet) that "
    "`python -m mlperf_logging.compliance_checker --usage training --ruleset 4.0.0` "
    "checks."
)


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro mlperf-log``."""
    s.add_argument(
        "--runs", nargs="+", required=True, metavar="GLOB", help="run folders or run.json files (globs allowed)"
    )
    s.add_argument(
        "--out", required=True, metavar="DIR", help="folder for one <run id>.txt per run, e.g. ring-n2-g1-s0-r0.txt"
    )
    s.add_argument("--org", default="scalerepro", help="submission_org (default scalerepro)")
    s.add_argument(
        "--status",
        default="research",
        choices=["cloud", "onprem", "preview", "research"],
        help="submission_status (default research)",
    )


def command(args: argparse.Namespace) -> None:
    """One MLPerf training log (:::MLLOG lines) per run folder."""
    runs = [Path(p).parent if Path(p).name == "run.json" else Path(p) for p in expand(args.runs)]
    if not runs:
        raise UserError(f"no run folder matches {args.runs}; give run folders or their run.json files")
    out = check_out(args.out, "--out", folder=True)
    for run in runs:
        print(f"{write_mllog(run, out, args.org, args.status)}: from {run}", file=sys.stderr)
