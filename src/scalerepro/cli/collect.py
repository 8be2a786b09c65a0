"""``scalerepro collect``: logs -> tidy tables (runs, evals, steps, bench)."""

from __future__ import annotations

import argparse
import sys

from scalerepro.analysis.collect import collect
from scalerepro.cli.common import check_out, expand

DESCRIPTION = None


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro collect``."""
    s.add_argument("--runs", nargs="*", default=[], metavar="GLOB", help="run.json files (globs allowed)")
    s.add_argument("--bench", nargs="*", default=[], metavar="GLOB", help="bench JSON files (globs allowed)")
    s.add_argument("--out", required=True, metavar="DIR", help="folder for the CSV tables")


def command(args: argparse.Namespace) -> None:
    """Logs -> tidy CSV tables."""
    out = check_out(args.out, "--out", folder=True)

    def progress(done: int, total: int) -> None:
        if done == total or done % max(1, total // 20) == 0:
            print(f"collect: {done}/{total} runs", file=sys.stderr, flush=True)

    counts = collect(expand(args.runs), expand(args.bench), out, progress)
    for name, rows in counts.items():
        print(f"{name}: {rows} rows", file=sys.stderr)
