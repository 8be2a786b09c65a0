"""``scalerepro make-dataset``: generate the deterministic synthetic ImageNet-layout dataset."""

from __future__ import annotations

import argparse
from dataclasses import fields

from scalerepro.cli.common import (
    add_config_flags,
    check_out,
    load_config,
    progress,
)
from scalerepro.data.synth import SynthSpec, generate

DESCRIPTION = "Write <root>/<name>/{train,val}/<wnid>/*.JPEG; same seed, same bytes."


def arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``scalerepro make-dataset``."""
    add_config_flags(s)
    s.add_argument("--out", metavar="ROOT", help="folder to write <name>/ into (default: dataset.root)")


def command(args: argparse.Namespace) -> None:
    """Generate the synthetic dataset."""
    ds = load_config(args).dataset
    spec = SynthSpec(**{f.name: getattr(ds, f.name) for f in fields(SynthSpec) if hasattr(ds, f.name)})
    root = check_out(args.out or ds.root, "--out" if args.out else "dataset.root", folder=True)
    path = generate(spec, root, progress("make-dataset"))
    print(path)
