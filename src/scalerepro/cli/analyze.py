"""``scalerepro analyze``: time-to-accuracy, throughput, scaling efficiency, baselines -> metrics.json."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scalerepro.analysis.analyze import analyze, study_table
from scalerepro.cli.common import add_config_flags, check_out, load_config

DESCRIPTION = None


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro analyze``."""
    s.add_argument("--tables", required=True, metavar="DIR", help="folder written by `collect`")
    s.add_argument("--baselines", required=True, metavar="FILE", help="published results (config/baselines.yaml)")
    s.add_argument("--metrics", required=True, metavar="FILE", help="metrics JSON to write (DVC metrics)")
    s.add_argument("--out", required=True, metavar="DIR", help="folder for analysis CSVs (DVC plots)")
    s.add_argument(
        "--costmodel",
        metavar="FILE",
        help="cost-model JSON (`scalerepro cost-model`): its projections to "
        "the papers' scales join comparison.csv as 'projected' rows",
    )
    s.add_argument(
        "--simulation",
        metavar="DIR",
        help="folder of `scalerepro simulate-validate` and `simulate-scale`: "
        "simulated rows join comparison.csv; simulated.csv, papers.csv and validation.csv are written",
    )
    add_config_flags(s)  # train's grids name the study of each run (studies.csv, the time-to-accuracy panels)


def command(args: argparse.Namespace) -> None:
    """Tables -> metrics.json and analysis tables."""
    train = load_config(args).train
    grids = {name: [p.run_id for p in points] for name, points in train.grids().items()}
    metrics = analyze(
        Path(args.tables),
        Path(args.baselines),
        check_out(args.metrics, "--metrics", folder=False),
        check_out(args.out, "--out", folder=True),
        Path(args.costmodel) if args.costmodel else None,
        Path(args.simulation) if args.simulation else None,
        study_table(grids, train.study_descriptions()),
    )
    print(json.dumps(metrics["summary"], indent=2), file=sys.stderr)
