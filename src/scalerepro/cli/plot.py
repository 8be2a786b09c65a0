"""``scalerepro plot``: seaborn figures from the analysis tables."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scalerepro.analysis.plots import plot_all
from scalerepro.cli.common import check_out

DESCRIPTION = None


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro plot``."""
    s.add_argument("--analysis", required=True, metavar="DIR", help="folder written by `analyze`")
    s.add_argument("--out", required=True, metavar="DIR", help="folder for PNG figures")


def command(args: argparse.Namespace) -> None:
    """Analysis tables -> figures."""
    out = check_out(args.out, "--out", folder=True)
    for path in plot_all(Path(args.analysis), out):
        print(path, file=sys.stderr)
