"""``scalerepro reproduce``: one reproduction card per paper: claims, their sources, measured and on what,
simulated, verdict."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scalerepro.analysis.reproduce import reproduce, tally
from scalerepro.cli.common import check_out
from scalerepro.papers import DEFAULT

DESCRIPTION = (
    "Each claim names its source fact (config/sources.yaml) or is unverified, and has a scope: "
    "paper-scale, network (a verdict needs two or more hosts at one rank per core), numerics (any run), "
    "recipe (a real dataset). Verdicts: reproduced; not reproduced; undetermined (the interval holds no "
    "difference); indicative only (measured outside the scope); not measurable here (what it would take); "
    "not in this run (the sweep lacks the runs); unverified claim. Measures: busbw_ratio (paired per round "
    "at sizes from 1 MiB: median and 10-90th percentile), accuracy_agreement (final top-1 against ring's "
    "within the resolution: seed range or two standard errors at the eval size), recipe_delta (top-1 of one "
    "recipe minus another's), scaling_efficiency (never judged on CPU ranks), not_measurable."
)


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro reproduce``."""
    s.add_argument("--analysis", required=True, metavar="DIR", help="folder written by `analyze`")
    s.add_argument(
        "--papers",
        default=str(DEFAULT),
        metavar="DIR",
        help=f"the papers' files: their claims and how each is measured (default {DEFAULT})",
    )
    s.add_argument("--out", required=True, metavar="FILE", help="the cards as Markdown, e.g. results/reproduction.md")
    s.add_argument("--csv", required=True, metavar="FILE", help="the same rows as CSV")
    s.add_argument("--html", metavar="FILE", help="the same rows as one HTML page, a table per paper (the report's)")
    s.add_argument(
        "--json",
        required=True,
        metavar="FILE",
        help="per claim id: value, interval or resolution, reproduced (1/0) and verdict, for DVC",
    )


def command(args: argparse.Namespace) -> None:
    """Analysis tables + the papers' claims -> one reproduction card per paper."""
    command = (
        "scalerepro reproduce " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["reproduce"] else "scalerepro reproduce"
    )
    out, csv, as_json = (check_out(getattr(args, name), f"--{name}", folder=False) for name in ("out", "csv", "json"))
    page = check_out(args.html, "--html", folder=False) if args.html else None
    table = reproduce(Path(args.analysis), Path(args.papers), out, csv, as_json, command, page)
    print(f"{len(table)} claims: {tally(table)} -> {args.out}", file=sys.stderr)
