"""The one command line: ``scalerepro <command>``; each command parses, builds its config, calls the package."""

from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

from scalerepro import __version__
from scalerepro.errors import UserError

CONFIG_HELP = "YAML config file (e.g. config/config.yaml); keys missing there take the schema's defaults"


def _progress(label: str) -> Callable[[int, int], None]:
    """A progress callback printing about every 10% to stderr."""
    state = {"last": -1}

    def report(done: int, total: int) -> None:
        pct = done * 100 // max(1, total)
        if pct // 10 != state["last"] // 10 or done == total:
            state["last"] = pct
            print(f"{label}: {done}/{total} ({pct}%)", file=sys.stderr, flush=True)

    return report


def _parse_set(items: list[str]) -> str | None:
    """``--set section.key=value`` pairs as one inline JSON object (values parsed as YAML)."""
    if not items:
        return None
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        section, dot, name = key.partition(".")
        if not sep or not dot or not section or not name:
            raise UserError(f"--set {item!r}: expected SECTION.KEY=VALUE, e.g. --set train.epochs=2")
        out.setdefault(section, {})[name] = yaml.safe_load(value)
    return json.dumps(out)


def _config(args: argparse.Namespace) -> Any:
    """The validated, frozen Config from --config, --config-json and --set (later wins)."""
    from scalerepro.config import load

    cfg = load(args.config, args.config_json)
    overrides = _parse_set(args.set)
    if overrides:
        merged = cfg.to_dict()
        for section, values in json.loads(overrides).items():
            merged.setdefault(section, {}).update(values)
        cfg = load(None, json.dumps(merged))
    return cfg


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    """The config flags every command shares."""
    p.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    p.add_argument("--config-json", metavar="JSON", help="config sections as one JSON object (used by the Snakemake rules)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one key, e.g. --set train.epochs=2 (repeatable)")


def cmd_make_dataset(args: argparse.Namespace) -> None:
    """Generate the synthetic dataset."""
    from dataclasses import fields

    from scalerepro.data.synth import SynthSpec, generate

    ds = _config(args).dataset
    spec = SynthSpec(**{f.name: getattr(ds, f.name) for f in fields(SynthSpec)})
    root = Path(args.out) if args.out else Path(ds.root)
    path = generate(spec, root, _progress("make-dataset"))
    print(path)


def cmd_shard(args: argparse.Namespace) -> None:
    """Shard the train and/or val split."""
    from scalerepro.data.pack import shard_split

    cfg = _config(args)
    source = Path(args.dataset) if args.dataset else cfg.dataset.path
    if not source.is_dir():
        raise UserError(f"dataset folder {source} not found; set dataset.root/dataset.name (or --dataset), "
                        "or generate the laptop dataset with `scalerepro make-dataset`")
    splits = ["train", "val"] if args.split == "all" else [args.split]
    counts = {"train": cfg.shard.train_shards, "val": cfg.shard.val_shards}
    for split in splits:
        m = shard_split(source, split, Path(args.out) / split, counts[split], cfg.shard.seed, args.skip_bad,
                        _progress(f"shard {split}"))
        print(f"{split}: {m['samples']} samples in {len(m['shards'])} shards, {m['bytes'] / 2**20:.1f} MiB, "
              f"converted {m['converted']}, skipped {len(m['skipped'])}", file=sys.stderr)


def cmd_stage(args: argparse.Namespace) -> None:
    """Stage shards into node memory (first rank per node copies)."""
    from scalerepro.data.stage import clean_on_nodes, describe, stage_on_nodes
    from scalerepro.io import write_json_atomic
    from scalerepro.mpi import on_root, world

    root = args.root or _config(args).stage.root
    comm = world()
    if args.clean:
        removed = clean_on_nodes(comm, root)
        on_root(comm, lambda: print(f"removed {len(removed)} staged folder(s) under {root}", file=sys.stderr))
        return
    record = stage_on_nodes(comm, [Path(d) for d in args.shards], root)

    def report() -> None:
        if args.log:
            write_json_atomic(args.log, record)
        print(describe(record), file=sys.stderr)

    on_root(comm, report)


def _staged_dir(shards: Path, split: str, stage_root: str, direct: bool) -> Path:
    """The folder training reads a split from: the staged copy, or the shard folder itself."""
    from scalerepro.data.shards import read_manifest
    from scalerepro.data.stage import staged_folder

    source = shards / split
    if direct:
        return source
    dest = staged_folder(stage_root, read_manifest(source))
    if not (dest / "manifest.json").is_file():
        raise UserError(f"{split} shards are not staged in {dest}; run `scalerepro stage --shards {source}` "
                        "in the same allocation first (or pass --no-stage to read the shard folder)")
    return dest


def cmd_train(args: argparse.Namespace) -> None:
    """Run one training run on all ranks."""
    from scalerepro.mpi import on_root, world
    from scalerepro.train.loop import RunSpec, run

    cfg = _config(args)
    shards = Path(args.shards)
    spec = RunSpec(
        config=cfg,
        algorithm=args.algo,
        train_dir=_staged_dir(shards, "train", cfg.stage.root, args.no_stage),
        val_dir=_staged_dir(shards, "val", cfg.stage.root, args.no_stage),
        out=Path(args.out),
        workers=args.workers,
    )
    record = run(spec, world())
    final = record["final"] or {}
    on_root(world(), lambda: print(
        f"train {spec.algorithm} x{record['world_size']}: top-1 {final.get('top1', float('nan')):.3f} after "
        f"{record['config']['train']['epochs']} epochs, {record['seconds']:.1f} s, status {record['status']}",
        file=sys.stderr))


def cmd_bench(args: argparse.Namespace) -> None:
    """All-reduce sweep with correctness check; JSON for analysis, a table for people."""
    import os
    import platform

    from scalerepro.comm.context import Context
    from scalerepro.comm.harness import HEADER, SweepSpec, sweep, total_wrong
    from scalerepro.comm.registry import get
    from scalerepro.io import write_json_atomic
    from scalerepro.mpi import hosts, library_version, on_root, world
    from scalerepro.provenance import argv, versions

    cfg = _config(args)
    b = cfg.bench
    algos = tuple(args.algos.split(",")) if args.algos else b.algorithms
    for a in algos:
        get(a)
    spec = SweepSpec(algos, b.min_bytes, b.max_bytes, b.dtype, b.warmup, b.iters, b.check)
    params = cfg.comm.params()
    comm = world()
    on_root(comm, lambda: print(f"# world size {comm.size}, {library_version()}\n{HEADER}", file=sys.stderr))
    with Context(comm, params) as ctx:
        rows = sweep(ctx, spec)
    record = {
        "argv": argv(), "world_size": comm.size, "hosts": hosts(comm), "mpi_library": library_version(),
        "versions": versions(), "platform": platform.platform(), "spec": spec.__dict__ | {"algorithms": list(algos)},
        "params": cfg.to_dict()["comm"],
        "env": {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "MPIR_", "MPICH_", "SLURM_"))},
        "rows": rows,
    }
    on_root(comm, lambda: write_json_atomic(args.out, record))
    wrong = total_wrong(rows)
    if wrong:
        raise UserError(f"{wrong} wrong elements in the all-reduce results (see #wrong in {args.out})")


def cmd_collect(args: argparse.Namespace) -> None:
    """Logs -> tidy CSV tables."""
    from scalerepro.analysis.collect import collect

    runs = sorted(Path(p) for pattern in args.runs for p in glob.glob(pattern))
    benches = sorted(Path(p) for pattern in args.bench for p in glob.glob(pattern))
    tables = collect(runs, benches, Path(args.out))
    for name, frame in tables.items():
        print(f"{name}: {len(frame)} rows", file=sys.stderr)


def cmd_analyze(args: argparse.Namespace) -> None:
    """Tables -> metrics.json and analysis tables."""
    from scalerepro.analysis.analyze import analyze

    metrics = analyze(Path(args.tables), Path(args.baselines), Path(args.metrics), Path(args.out))
    print(json.dumps(metrics["summary"], indent=2), file=sys.stderr)


def cmd_plot(args: argparse.Namespace) -> None:
    """Analysis tables -> figures."""
    from scalerepro.analysis.plots import plot_all

    for path in plot_all(Path(args.analysis), Path(args.out)):
        print(path, file=sys.stderr)


def parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    p = argparse.ArgumentParser(prog="scalerepro", description=__doc__)
    p.add_argument("--version", action="version", version=f"scalerepro {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("make-dataset", help="generate the deterministic synthetic ImageNet-layout dataset",
                       description="Write <root>/<name>/{train,val}/<wnid>/*.JPEG; same seed, same bytes.")
    _add_config_flags(s)
    s.add_argument("--out", metavar="ROOT", help="folder to write <name>/ into (default: dataset.root)")
    s.set_defaults(fn=cmd_make_dataset)

    s = sub.add_parser("shard", help="pack an ImageNet-layout folder into shards + manifest",
                       description="Shards of RGB JPEG bytes with labels; grayscale/CMYK/PNG inputs are re-encoded.")
    _add_config_flags(s)
    s.add_argument("--dataset", metavar="DIR", help="ImageNet-layout folder (default: dataset.root/dataset.name)")
    s.add_argument("--split", choices=["train", "val", "all"], default="all", help="which split (default: all)")
    s.add_argument("--out", metavar="DIR", required=True, help="write <split>/shard-*.srs and manifest.json here")
    s.add_argument("--skip-bad", action="store_true", help="leave undecodable files out (listed in the manifest) instead of failing")
    s.set_defaults(fn=cmd_shard)

    s = sub.add_parser("stage", help="copy shards into node memory, verified (run under mpiexec/srun)",
                       description="The first rank of each node copies; others wait. Verified shards already there are kept.")
    _add_config_flags(s)
    s.add_argument("--shards", nargs="*", default=[], metavar="DIR", help="shard folders (with manifest.json) to stage")
    s.add_argument("--root", help="node-memory folder (default: stage.root)")
    s.add_argument("--log", metavar="FILE", help="write a JSON record of what was staged, per node, with timings")
    s.add_argument("--clean", action="store_true", help="remove everything staged under the root instead")
    s.set_defaults(fn=cmd_stage)

    s = sub.add_parser("train", help="one data-parallel training run (every rank runs this)",
                       description="Synchronous SGD over the chosen all-reduce; JSON-lines events + run.json in --out.")
    _add_config_flags(s)
    s.add_argument("--algo", required=True, help="all-reduce algorithm for the gradients")
    s.add_argument("--shards", required=True, metavar="DIR", help="folder with train/ and val/ shard folders")
    s.add_argument("--out", required=True, metavar="DIR", help="run directory (events.jsonl, run.json)")
    s.add_argument("--no-stage", action="store_true", help="read the shard folder directly instead of the staged copy")
    s.add_argument("--workers", type=int, default=0, help="data loader worker processes per rank (default 0)")
    s.set_defaults(fn=cmd_train)

    s = sub.add_parser("bench", help="all-reduce sweep, nccl-tests style (run under mpiexec/srun)",
                       description="Sizes by doubling; t = max over ranks of the mean; busbw = algbw*2(p-1)/p; checked.")
    _add_config_flags(s)
    s.add_argument("--algos", help="comma-separated algorithms (default: bench.algorithms)")
    s.add_argument("--out", required=True, metavar="FILE", help="JSON result file")
    s.set_defaults(fn=cmd_bench)

    s = sub.add_parser("collect", help="logs -> tidy tables (runs, evals, steps, bench)")
    s.add_argument("--runs", nargs="*", default=[], metavar="GLOB", help="run.json files (globs allowed)")
    s.add_argument("--bench", nargs="*", default=[], metavar="GLOB", help="bench JSON files (globs allowed)")
    s.add_argument("--out", required=True, metavar="DIR", help="folder for the CSV tables")
    s.set_defaults(fn=cmd_collect)

    s = sub.add_parser("analyze", help="time-to-accuracy, throughput, scaling efficiency, baselines -> metrics.json")
    s.add_argument("--tables", required=True, metavar="DIR", help="folder written by `collect`")
    s.add_argument("--baselines", required=True, metavar="FILE", help="published results (config/baselines.yaml)")
    s.add_argument("--metrics", required=True, metavar="FILE", help="metrics JSON to write (DVC metrics)")
    s.add_argument("--out", required=True, metavar="DIR", help="folder for analysis CSVs (DVC plots)")
    s.set_defaults(fn=cmd_analyze)

    s = sub.add_parser("plot", help="seaborn figures from the analysis tables")
    s.add_argument("--analysis", required=True, metavar="DIR", help="folder written by `analyze`")
    s.add_argument("--out", required=True, metavar="DIR", help="folder for PNG figures")
    s.set_defaults(fn=cmd_plot)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the command; bad input exits 2 with one clear message and no traceback."""
    args = parser().parse_args(argv)
    try:
        args.fn(args)
    except UserError as exc:
        print(f"scalerepro {args.command}: error: {exc}", file=sys.stderr, flush=True)
        _abort_world(2)
        return 2
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        _abort_world(1)
        raise
    return 0


def _abort_world(code: int) -> None:
    """Under MPI with several ranks, end them all so no rank waits forever in a collective."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.size > 1:
        mpi.COMM_WORLD.Abort(code)


if __name__ == "__main__":
    sys.exit(main())
